"""Hostile values from config and site files never execute: they are rejected (schema patterns,
then full-string checks at render time, so a trailing newline cannot pass a `$` anchor) or
they stay inert (shell-quoted environment values), checked with `bash -n` and a real run
whose payload would create a file if it were injected."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from exabench.config import load_and_validate
from exabench.errors import ConfigError
from exabench.execute import execute
from exabench.campaign.render import RunPaths, render_bundle, render_script, write_run_files
from exabench.campaign.plan import Run, expand
from exabench.campaign.site import Layout, load_site, resolve_layout

from helpers_sites import site, write_site_with

MARK = "/tmp/exabench-injected-{}"
HOSTILE = [
    "a; touch {m}", "$(touch {m})", "`touch {m}`", "a\ntouch {m}", "-p evil", "a b", "a&&touch {m}",
    "x|touch {m}", "'; touch {m}; '", "acct\n", "${{IFS}}touch${{IFS}}{m}",
]


def hostile(i: int) -> list[str]:
    return [h.format(m=MARK.format(i)) for h in HOSTILE]


def _run(layout: Layout, run_id: str = "probe") -> Run:
    return Run(run_id=run_id, benchmark="kmeans", suite="coral2-analytics", framework="mpi4py", preset="tiny",
               params={}, layout=layout, timeout_s=60)


FIELDS = ["account", "partition", "qos", "constraint", "python", "modules", "storage.node_local",
          "storage.stage_in_from", "scheduler_options.extra", "scheduler_options.pbs_select_extra",
          "scheduler_options.cobalt_attrs", "node.gpu.model"]


@pytest.mark.parametrize("field", FIELDS)
def test_hostile_site_values_are_rejected_when_the_site_is_loaded_or_rendered(field, tmp_path):
    for value in hostile(0):
        v = [value] if field in ("modules", "scheduler_options.extra") else value
        path = write_site_with(tmp_path, "frontier", **{field: v})
        try:
            s = load_site(path)
        except ConfigError as exc:
            assert str(path) in str(exc) and field.split(".")[-1] in str(exc)
            continue
        # Passed the schema (e.g. "acct\n" against a `$` anchor): the render-time check must stop it.
        if field in ("node.gpu.model",):
            continue  # never rendered into a script
        with pytest.raises(ConfigError) as info:
            render_script(_run(resolve_layout(s, nodes=1)), s, RunPaths(tmp_path / "r", "probe"))
        assert "not safe" in str(info.value) or "not valid" in str(info.value)


@pytest.mark.parametrize("field", ["account", "partition", "qos", "constraint"])
def test_render_time_checks_hold_even_without_the_schema(field, tmp_path):
    # A Site built in Python skips the schema: render_script still refuses the value.
    for value in hostile(1):
        s = dataclasses.replace(site("frontier"), **{field: value})
        with pytest.raises(ConfigError) as info:
            render_script(_run(resolve_layout(s, nodes=1)), s, RunPaths(tmp_path / "r", "probe"))
        assert field in str(info.value) and "frontier" in str(info.value) or "site.yaml" in str(info.value)


def test_hostile_modules_extra_flags_and_paths_are_rejected_at_render_time(tmp_path):
    base = site("frontier")
    cases = [dict(modules=(v,)) for v in hostile(2)] + \
        [dict(scheduler_options={"extra": [v]}) for v in hostile(2)] + \
        [dict(storage={"stage_in_from": v, "node_local": "/mnt/bb/$USER"}) for v in hostile(2)] + \
        [dict(storage={"stage_in_from": "/data", "node_local": v}) for v in hostile(2)]
    for change in cases:
        s = dataclasses.replace(base, **change)
        with pytest.raises(ConfigError):
            render_script(_run(resolve_layout(s, nodes=1)), s, RunPaths(tmp_path / "r", "probe"))


def test_a_results_path_with_shell_characters_is_refused_in_headers(tmp_path):
    s = site("frontier")
    with pytest.raises(ConfigError):
        render_script(_run(resolve_layout(s, nodes=1)), s, RunPaths(tmp_path / "a;touch x" / "r", "probe"))


@pytest.mark.parametrize("key,value", [("campaign", "x; touch /tmp/y"), ("campaign", "$(id)"),
                                       ("benchmarks", [{"name": "kmeans", "label": "a b"}]),
                                       ("benchmarks", [{"name": "kmeans; id"}])])
def test_hostile_config_values_are_rejected(key, value, tmp_path):
    config = {"campaign": "c", "benchmarks": [{"name": "kmeans"}], key: value}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError):
        cfg = load_and_validate(path, "config")
        expand(cfg, site("local"), str(path))


@pytest.mark.parametrize("name", ["frontier", "summit", "polaris", "theta", "titan", "stampede2", "local"])
def test_hostile_environment_values_render_to_scripts_bash_accepts(name, tmp_path):
    env = {f"HOSTILE_{i}": v for i, v in enumerate(hostile(3))}
    s = dataclasses.replace(site(name), env=env)
    layout = resolve_layout(s, nodes=1, ranks_per_node=1, gpus_per_rank=s.node.gpus or None)
    text, _ = render_script(_run(layout), s, RunPaths(tmp_path / name, "probe"))
    script = tmp_path / "job.sh"
    script.write_text(text)
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    bundle = render_bundle([_run(layout)], s, tmp_path / name, "probe")
    script.write_text(bundle)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_hostile_environment_values_stay_inert_in_a_real_run(tmp_path):
    """A real K-Means run on the local site whose environment carries payloads that would
    create marker files if a shell ever evaluated them; the record shows them verbatim."""
    markers = [Path(MARK.format(4)), Path(MARK.format(4) + "b")]
    for m in markers:
        m.unlink(missing_ok=True)
    values = hostile(4) + [f"$(touch {markers[1]})\n`touch {markers[1]}`"]
    env = dict(site("local").env)
    env.update({f"HOSTILE_{i}": v for i, v in enumerate(values)})
    s = dataclasses.replace(site("local"), env=env, python=sys.executable)
    config = {"campaign": "inert", "preset": "tiny", "timeout_s": 240,
              "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1], "k": [2]}}]}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    [run] = expand(load_and_validate(path, "config"), s, str(path))
    paths = RunPaths(tmp_path / "results" / "local", run.run_id)
    write_run_files(run, s, paths)
    record = execute(paths.spec)
    assert not any(m.exists() for m in markers), "a hostile value was executed"
    assert record["status"] == "ok", record.get("error")
    seen = record["provenance"]["environment"]
    for i, v in enumerate(values):
        assert seen[f"HOSTILE_{i}"] == v
    json.dumps(record)  # and the record stays plain JSON
