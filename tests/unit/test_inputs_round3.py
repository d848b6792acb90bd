"""Inputs refused in one line (issue 49, "Hardening, third round"): a host list larger than the
machine, queue models that contradict themselves, non-finite numbers, unknown acceptance names and
bad command-line values. Each names the file or option, the key, the value and what is valid."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from exabench.campaign.node_groups import node_groups
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def _site(tmp_path, base: str = "slurm-cluster", **queue_changes):
    """profiles/<base>/site.yaml, its first queue changed (a queue added where it has none)."""
    data = yaml.safe_load((REPO / "profiles" / base / "site.yaml").read_text())
    data["queues"] = data.get("queues") or [{"name": "debug", "max_walltime_min": 60}]
    data["queues"][0].update(queue_changes)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


# --- 1. a host list is bounded by the machine before it is expanded --------------------------------

@pytest.mark.parametrize("spec,key,count", [
    ({"nodes": "n[1-99999999]"}, "every_node.nodes", "99,999,999"),
    ({"nodes": "r[1-9999]n[1-9999]"}, "every_node.nodes", "99,980,001"),
    ({"nodes": "a[1-20],b[1-20]"}, "every_node.nodes", "40"),
    ({"nodes": [f"n{i}" for i in range(33)]}, "every_node.nodes", "33"),
    ({"group": "rack", "racks": {"r1": "n[1-20]", "r2": "m[1-20]"}}, "every_node.racks", "40"),
])
def test_a_host_list_larger_than_the_machine_is_refused_before_it_is_expanded(tmp_path, spec, key, count):
    site = load_site(_site(tmp_path))  # 32 nodes
    started = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        node_groups({"every_node": spec}, site, "c.yaml")
    assert time.perf_counter() - started < 5  # counted, not expanded
    assert err.value.key == key and f"names {count} nodes" in str(err.value)
    assert "valid: at most the site's max_nodes = 32 nodes" in str(err.value)


def test_a_host_list_the_size_of_the_machine_is_expanded(tmp_path):
    groups = node_groups({"every_node": {"nodes": "n[01-32]"}}, load_site(_site(tmp_path)), "c.yaml")
    assert [g.name for g in groups][::31] == ["n01", "n32"]


# --- 2. queue models that contradict themselves ------------------------------------------------------

@pytest.mark.parametrize("changes,key,fragment", [
    ({"max_walltime_min": 60, "min_walltime_min": 90}, "queues[0].min_walltime_min",
     "= 90 (queue debug) is above the queue's longest walltime; valid: at most the queue's max_walltime_min = 60"),
    ({"max_walltime_min": 3000, "min_walltime_min": 2000}, "queues[0].min_walltime_min",
     "= 2000 (queue debug) is above the site's walltime limit; valid: at most the site's limits.max_walltime_min"),
    ({"charged_min_nodes": 128}, "queues[0].charged_min_nodes",
     "= 128 (queue debug) is more than the machine has; valid: at most the machine's max_nodes = 32"),
    ({"max_nodes": 64}, "queues[0].max_nodes",
     "= 64 (queue debug) is wider than the machine; valid: at most the machine's max_nodes = 32"),
    ({"max_queued_per_user": 2, "max_running_per_user": 5}, "queues[0].max_queued_per_user",
     "= 2 (queue debug) is below max_running_per_user; valid: at least max_running_per_user = 5"),
])
def test_a_queue_that_contradicts_itself_or_the_machine_is_refused(tmp_path, changes, key, fragment):
    path = _site(tmp_path, **changes)
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert str(err.value).startswith(f"{path}: key '{key}' ") and fragment in str(err.value), str(err.value)


@pytest.mark.parametrize("name", sorted(p.parent.name for p in (REPO / "profiles").glob("*/site.yaml")))
def test_every_profile_still_loads(name):
    load_site(REPO / "profiles" / name / "site.yaml")


# --- 3. NaN and infinity are no numbers a config may give ------------------------------------------

@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("where", ["params", "sweep"])
def test_a_non_finite_number_is_refused_wherever_it_is(value, where):
    given = value if where == "params" else [value]
    entry = {"name": "kmeans", where: {"slowdown": given}}
    with pytest.raises(ConfigError) as err:
        validate({"campaign": "m", "benchmarks": [entry]}, "config", "c.yaml")
    key = "benchmarks[0].params.slowdown" if where == "params" else "benchmarks[0].sweep.slowdown[0]"
    assert str(err.value) == (f"c.yaml: key '{key}' = {value!r} is not valid; valid: a finite number "
                              "(not .nan, .inf or -.inf)")


def test_a_non_finite_number_in_a_yaml_site_file_is_refused(tmp_path):
    path = _site(tmp_path)
    path.write_text(path.read_text().replace("  cores_per_socket: 2", "  cores_per_socket: 2\n  memory_gb: .nan"))
    with pytest.raises(ConfigError, match=r"key 'node.memory_gb' = nan is not valid; valid: a finite number"):
        load_site(path)


def test_a_benchmark_parameter_given_in_code_is_checked_too():
    from exabench.benchmarks import get
    with pytest.raises(ConfigError, match=r"key 'params.slowdown' = nan is not valid; valid: a finite float"):
        get("kmeans").resolve_params("tiny", {"slowdown": math.nan}, "c.yaml", "params")


# --- 4. the names an every-node verdict judges by are the campaign's ---------------------------------

def _acceptance(verdict: dict) -> dict:
    return validate({"campaign": "acc", "preset": "tiny", "every_node": {"nodes": "n[01-04]", "verdict": verdict},
                     "benchmarks": [{"name": "stream"}, {"name": "pingpong", "sweep": {"nodes": [2]}},
                                    {"name": "allreduce"}]}, "config", "c.yaml")


@pytest.mark.parametrize("verdict,key,says", [
    ({"metrics": {"pingpong": ["bandwith"]}}, "every_node.verdict.metrics.pingpong[0]",
     "= 'bandwith' is not a metric of 'pingpong'; valid: did you mean 'bandwidth'? metrics of 'pingpong': "
     "bandwidth, latency, energy, power, energy_run, bandwidth_per_joule"),
    ({"best_of": ["stream", "streem"]}, "every_node.verdict.best_of[1]",
     "= 'streem' is not a benchmark of this campaign; valid: did you mean 'stream'? the campaign's benchmarks: "
     "allreduce, pingpong, stream"),
    ({"metrics": {"pingpog": ["bandwidth"]}}, "every_node.verdict.metrics",
     "= 'pingpog' is not a benchmark of this campaign; valid: did you mean 'pingpong'?"),
    ({"best_of": ["gemm"]}, "every_node.verdict.best_of[0]", "= 'gemm' is not a benchmark of this campaign"),
    ({"metrics": {"allreduce": ["time"]}}, "every_node.verdict.metrics.allreduce[0]", "= 'time' is not a metric"),
])
def test_an_unknown_verdict_benchmark_or_metric_is_refused_at_planning(tmp_path, verdict, key, says):
    with pytest.raises(ConfigError) as err:
        node_groups(_acceptance(verdict), load_site(_site(tmp_path)), "c.yaml")
    assert err.value.key == key and says in str(err.value), str(err.value)


@pytest.mark.parametrize("verdict", [{"metrics": {"pingpong": ["bandwidth", "latency"]}, "best_of": ["stream"]},
                                     {"metrics": {"allreduce": ["time.1048576", "busbw"], "stream": ["energy"]}}])
def test_the_metrics_benchmarks_declare_are_taken(tmp_path, verdict):
    assert node_groups(_acceptance(verdict), load_site(_site(tmp_path)), "c.yaml")


def test_the_shipped_acceptance_config_still_plans(tmp_path):
    from exabench.config import load_and_validate
    assert node_groups(load_and_validate(REPO / "config" / "cluster-acceptance.yaml", "config"),
                       load_site(_site(tmp_path)), "c.yaml")


@pytest.mark.parametrize("record", sorted((REPO / "tests" / "data" / "records").glob("*/*.json")), ids=lambda p: p.name)
def test_declared_metric_names_cover_the_stored_records(record):
    import json
    from exabench.benchmarks import get
    rec = json.loads(record.read_text())
    if "benchmark" not in rec:
        pytest.skip("not a record")
    cls = get(rec["benchmark"])
    assert all(cls.has_metric(name) for name in rec.get("metrics") or {}), (cls.known_metrics(), list(rec["metrics"]))


# --- 5-7. command-line values: one line, exit 2, nothing written ------------------------------------

def _cli(tmp_path, *argv, module="exabench"):
    (tmp_path / "records").mkdir(exist_ok=True)
    (tmp_path / "a-folder").mkdir(exist_ok=True)
    (tmp_path / "a-file").write_text("")
    before = sorted(p.name for p in tmp_path.iterdir())
    res = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing half-written
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    return res


REFERENCES = ("references", "--from", "records", "--site-name", "x")


@pytest.mark.parametrize("band", ["1.2,0.8", "0.2", "a,b", "-0.1,0.1", "0.1,-0.1", "nan,0.1", "0.1,inf"])
def test_a_tolerance_band_that_is_not_two_fractions_is_refused(tmp_path, band):
    res = _cli(tmp_path, *REFERENCES, "--out", "r.yaml", f"--tolerance={band}")
    assert res.returncode == 2 and res.stderr.startswith(f"exabench: error: --tolerance {band}: not valid; valid: "
                                                         "LOWER,UPPER: the fractions"), res.stderr


@pytest.mark.parametrize("argv,says", [
    ((*REFERENCES, "--out", "a-folder"), "--out a-folder: is a folder; valid: a references.yaml to write"),
    ((*REFERENCES, "--out", "a-file/r.yaml"), "--out a-file/r.yaml: a-file is a file, not a folder"),
    (("archive", "--results", "records", "--out", "a-folder"), "--out a-folder: is a folder; valid: a .tar.gz"),
    (("compare", "--out", "a-file", "records"), "--out a-file: a-file is a file, not a folder; valid: a folder"),
    (("plots", "--out", "a-file", "records"), "--out a-file: a-file is a file, not a folder; valid: a folder"),
])
def test_an_out_of_the_wrong_kind_is_named_not_a_traceback(tmp_path, argv, says):
    res = _cli(tmp_path, *argv)
    assert res.returncode == 2 and res.stderr == f"exabench: error: {says}" + res.stderr.split(says, 1)[1], res.stderr


@pytest.mark.parametrize("argv,says", [
    (("--seconds", "-1"), "argument --seconds: '-1' is not valid; valid: seconds >= 0"),
    (("--seconds", "nan"), "argument --seconds: 'nan' is not valid; valid: seconds >= 0"),
    (("--seconds", "two"), "argument --seconds: 'two' is not valid; valid: seconds >= 0"),
    (("--slurm-job", "last"), "argument --slurm-job: 'last' is not a Slurm job id; valid: digits, e.g. 1234"),
    (("--slurm-job", "12; rm -rf x"), "argument --slurm-job: '12; rm -rf x' is not a Slurm job id"),
])
def test_energy_probe_options_are_checked(tmp_path, argv, says):
    res = _cli(tmp_path, *argv, module="exabench.energy")
    assert res.returncode == 2 and res.stderr.startswith(f"python -m exabench.energy: error: {says}"), res.stderr


@pytest.mark.parametrize("job", ["1234", "1234_5", "1234+1", "1234.batch", "1234_5.0"])
def test_slurm_job_ids_sacct_takes_are_accepted(job):
    from exabench.energy.__main__ import SLURM_JOB_ID
    assert SLURM_JOB_ID.fullmatch(job)


# --- 8. a node-pinned srun line gives each option once ---------------------------------------------

@pytest.mark.parametrize("line,pinned", [
    ("srun --nodes=1 --ntasks=8 --cpus-per-task=7 ./a.out", "srun --nodes=1 --nodelist=c7 --kill-on-bad-exit=1 --ntasks=8 --cpus-per-task=7 ./a.out"),
    ("srun -N 1 -n 4 /py -m exabench.runner", "srun --nodes=1 --nodelist=c7 --kill-on-bad-exit=1 -n 4 /py -m exabench.runner"),
    ("srun -N1 -w c1 -l /py", "srun --nodes=1 --nodelist=c7 --kill-on-bad-exit=1 -l /py"),
    ("srun --nodes 2 --nodelist=a,b /py --nodes=9 -N 3", "srun --nodes=1 --nodelist=c7 --kill-on-bad-exit=1 /py --nodes=9 -N 3"),
    # the line's own choice is replaced: a failing rank always ends an acceptance run's step
    ("srun -K0 --kill-on-bad-exit=0 -K -n 2 /py", "srun --nodes=1 --nodelist=c7 --kill-on-bad-exit=1 -n 2 /py"),
])
def test_a_node_pinned_srun_line_gives_nodes_and_nodelist_once(line, pinned):
    from exabench.campaign.node_sweep import pin_to_node
    assert pin_to_node(line, "c7", 4) == pinned


def test_the_inventory_counts_command_of_docs_studies_runs_and_gives_the_documented_counts():
    import ast
    import re
    doc = (REPO / "docs" / "studies.md").read_text()
    command = re.search(r'^python -c "(.*seed_inventory.*)"$', doc, re.M).group(1)
    res = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 0, res.stderr
    counts = ast.literal_eval(res.stdout)  # the dict it prints
    table = {"results in the seeds": "results", "in the catalogue": "in_catalogue", "runnable": "runnable",
             "judged": "judged"}
    for row, key in table.items():
        assert f"| {row} | {counts[key]} |" in doc, (row, counts)


@pytest.mark.parametrize("targets,prints_study", [({"study"}, True), ({"all"}, False), ({"study", "aggregate"}, False)])
def test_a_study_run_ends_with_its_own_table_not_the_previous_campaigns_summary(tmp_path, capsys, targets,
                                                                              prints_study):
    from snakemake.settings.types import DAGSettings

    from exabench.pipeline import print_summary, study_tables_only
    results = tmp_path / "results" / "local"
    (results / "tables").mkdir(parents=True)
    (results / "acceptance").mkdir()
    (results / "plan.json").write_text("[]")
    (results / "tables" / "summary.md").write_text("# the previous campaign's summary\n")
    (results / "acceptance" / "verdicts.md").write_text("# verdicts\n\nPASSED: the previous campaign\n")
    (results / "tables" / "study-summit-resnet.md").write_text("# study summit-resnet: published vs reproduced\n")
    tables = study_tables_only(DAGSettings(targets=targets), {"summit-resnet": None}, str(results))
    print_summary(str(results), load_site(REPO / "profiles" / "local" / "site.yaml"), tables)
    out = capsys.readouterr().out
    assert ("study summit-resnet: published vs reproduced" in out) == prints_study
    assert ("previous campaign" in out) != prints_study, out
