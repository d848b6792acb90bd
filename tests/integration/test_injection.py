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


# -- values that reach a shell through Snakemake's own job command line ------------------------------
# Snakemake starts each `run:` job as a new snakemake process through a shell, writing the working
# directory, the config files and every --config item (quoted with Python's repr()) on its command line.

CONFIG_PAYLOADS = {
    "quote-and-substitution": "baseline_site=x'$(touch {m})'",
    "substitution": "baseline_site=$(touch {m})",
    "backticks": "campaign=`touch {m}`",
    "store": "results_store=x'$(touch {m})'.duckdb",
    "semicolon": "baseline_site=x;touch {m}",
}


def _snakemake(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    from helpers_compare import env
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", "profiles/local", "--cores", "1", *args],
                          cwd=cwd, env=env(), capture_output=True, text=True, timeout=240)


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory):
    from helpers_compare import copy_workflow
    return copy_workflow(tmp_path_factory.mktemp("inject") / "w")


@pytest.mark.parametrize("case, dry", [("quote-and-substitution", False), ("quote-and-substitution", True),
                                       ("semicolon", False), ("backticks", True)])
def test_a_config_item_with_shell_characters_never_runs_its_payload(workflow_copy, case, dry, tmp_path):
    marker = tmp_path / "injected"
    item = CONFIG_PAYLOADS[case].format(m=marker)
    # The real run asks for the plan: a `run:` job, which Snakemake would start through a shell.
    res = _snakemake(workflow_copy, *(["-n"] if dry else []), "results/local/plan.csv", "--configfile", "tiny.yaml",
                     "--config", item)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and not marker.exists(), out[-3000:]
    key = item.split("=")[0]
    assert f"--config: key '{key}'" in out and "Traceback" not in out, out[-3000:]
    assert not (workflow_copy / "results" / "local" / "plan.csv").exists()


@pytest.mark.parametrize("case", sorted(CONFIG_PAYLOADS))
def test_each_config_item_payload_is_refused_before_any_job(case):
    from exabench.pipeline import check_job_command_line, validate_config
    item = CONFIG_PAYLOADS[case].format(m="/tmp/never")
    key, _, value = item.partition("=")
    with pytest.raises(ConfigError, match=f"--config: key '{key}'"):
        check_job_command_line(["site=profiles/local/site.yaml", item], [], "/work/x", "/work/x")
        validate_config({"benchmarks": [{"name": "kmeans"}], key: value}, "c.yaml", {key: value})


def test_a_checkout_path_that_needs_quoting_is_refused(workflow_copy, tmp_path):
    import shutil
    marker = tmp_path / "injected"
    checkout = tmp_path / f"c'$(touch {marker.name})'"
    shutil.copytree(workflow_copy, checkout, ignore=shutil.ignore_patterns(".snakemake", "results", "logs"))
    for args in (["-n"], []):
        res = _snakemake(checkout, *args, "results/local/plan.csv", "--configfile", "tiny.yaml")
        out = res.stdout + res.stderr
        assert res.returncode != 0 and "needs shell quoting" in out and "Traceback" not in out, out[-3000:]
        assert not marker.exists() and not (checkout / marker.name).exists() and not (checkout / "results").exists()


@pytest.mark.parametrize("entry, key", [
    ({"name": "kmeans", "params": {"data": "$(id)"}}, "benchmarks[0].params.data"),
    ({"name": "kmeans", "sweep": {"init": ["random", "a b"]}}, "benchmarks[0].sweep.init[1]"),
    ({"name": "kmeans", "params": {"x;y": 1}}, "benchmarks[0].params"),
    ({"name": "kmeans'"}, "benchmarks[0].name"),
])
def test_every_benchmark_value_has_a_pattern(entry, key, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [entry]}))
    with pytest.raises(ConfigError) as err:
        load_and_validate(path, "config")
    assert f"key '{key}" in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize("key, value", [("site", "profiles/local/site.yaml;id"), ("references", "r e f.yaml"),
                                        ("baseline_site", "titan'"), ("results_store", "a b.duckdb")])
def test_every_top_level_path_and_name_has_a_pattern(key, value, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"benchmarks": [{"name": "kmeans"}], key: value}))
    with pytest.raises(ConfigError, match=f"key '{key}'"):
        load_and_validate(path, "config")
