"""Re-make the golden records (tests/data/records/{local,titan}) and the local plan.json; then run
`EXABENCH_REGEN_GOLDEN=1 python -m pytest tests/integration/test_compare.py` and review the diff before committing.

What a record asks (run id, parameters, swept values, layout, launch line, workload facts) comes
from the current planner and renderer, as a real run's record would, so the tests see what the
benchmarks' parameters are today; only the figures, statuses and errors below are made up. The
local campaign is planned on tests/data/sites/golden-local.yaml (fixed core counts), the Titan one
on profiles/titan/site.yaml."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
sys.path.insert(0, str(REPO))

from exabench.campaign.plan import expand  # noqa: E402
from exabench.campaign.render import RunPaths, write_run_files  # noqa: E402
from exabench.campaign.site import load_site  # noqa: E402
from exabench.config import validate  # noqa: E402
from exabench.records.record import base_record, write_record  # noqa: E402

RECORDS = TESTS / "data" / "records"
T1 = [1]  # one thread per rank unless swept (the planner would give a rank all free cores)

LOCAL = [  # (benchmark entries, repeats); each is expanded on its own and the runs put together
    ([{"name": "allreduce", "params": {"backend": "gloo"}, "sweep": {"ranks_per_node": [2], "threads_per_rank": T1}},
      {"name": "kmeans", "sweep": {"nodes": [1], "ranks_per_node": [1, 2, 4], "threads_per_rank": T1}},
      {"name": "kmeans", "sweep": {"nodes": [2], "ranks_per_node": [4], "threads_per_rank": T1}},
      {"name": "kmeans", "label": "smt", "sweep": {"size_per_node": ["1000rows", "2000rows"],
                                                   "threads_per_rank": [1, 2]}},
      {"name": "kmeans", "label": "prec", "params": {"size_per_node": "500rows"},
       "sweep": {"dtype": ["float32", "float64"], "init": ["random", "kmeans++"], "threads_per_rank": T1}},
      {"name": "resnet50", "sweep": {"ranks_per_node": [1], "threads_per_rank": T1}},
      {"name": "resnet50", "sweep": {"precision": ["bf16"], "ranks_per_node": [2], "threads_per_rank": T1}},
      {"name": "resnet50-keras", "sweep": {"ranks_per_node": [2], "threads_per_rank": T1}}], 1),
    ([{"name": "resnet50", "sweep": {"ranks_per_node": [2], "threads_per_rank": T1}}], 2),
]
TITAN = [
    ([{"name": "kmeans", "sweep": {"ranks_per_node": [1], "threads_per_rank": T1, "gpus_per_rank": [0]}},
      {"name": "resnet50", "sweep": {"nodes": [2], "ranks_per_node": [1], "threads_per_rank": T1,
                                     "gpus_per_rank": [1]}}], 1),
]


def kmeans(time_s: float, precision: str = "float64", fom: float | None = None) -> dict:
    return {"time": (time_s, "s", False, precision), "fom": (fom or 8e-5 / time_s, "TB/s", True, precision)}


def resnet(images_s: float, precision: str = "fp32", batch: int = 8) -> dict:
    return {"throughput": (images_s, "images/s", True, precision),
            "step_time": (round(batch / images_s, 6), "s", False, precision)}


def allreduce() -> dict:
    out = {"busbw": (2.5, "GB/s", True, "fp32")}
    for size, busbw, time_us in ((8, 0.001, 8.0), (1024, 0.08, 12.8), (131072, 1.5, 87.381333),
                                 (1048576, 2.5, 419.4304)):
        out[f"busbw.{size}B"] = (busbw, "GB/s", True, "fp32")
        out[f"time.{size}B"] = (time_us, "us", False, "fp32")
    return out


OK = ("ok", None)
# run id -> (status, error), metrics (name -> value, unit, higher is better, precision), hosts.
# A planned run that is not here has no record (the tables show it as missing).
FIGURES = {
    "local": {
        "allreduce.tiny.gloo.n1r2t1": (OK, allreduce()),
        "kmeans.tiny.float64.n1r1t1": (OK, kmeans(0.1)),
        "kmeans.tiny.float64.n1r2t1": (OK, kmeans(0.125)),
        "kmeans.tiny.float64.n1r4t1": (("failed", "sanity check 'centres_recovered' failed: mean |error| per true "
                                        "centre 0: 0.031, 2: 1.900, 10: 0.020"), kmeans(0.09, fom=0.000888889)),
        "kmeans.smt.tiny.float64.size_per_node-1000rows.n1r1t1": (OK, kmeans(0.01)),
        "kmeans.smt.tiny.float64.size_per_node-1000rows.n1r1t2": (OK, kmeans(0.006, fom=0.013333333)),
        "kmeans.smt.tiny.float64.size_per_node-2000rows.n1r1t1": (OK, kmeans(0.02)),
        "kmeans.smt.tiny.float64.size_per_node-2000rows.n1r1t2": (
            ("timeout", "run exceeded its time limit of 900 s and was stopped"), {}),
        "kmeans.prec.tiny.float32.init-kmeans.n1r1t1": (OK, kmeans(0.04, "float32")),
        "kmeans.prec.tiny.float32.init-random.n1r1t1": (OK, kmeans(0.03, "float32", fom=0.002666667)),
        # float64 with the default init has no record: a MISSING hole in both matrices
        "kmeans.prec.tiny.float64.init-kmeans.n1r1t1": (OK, kmeans(0.05)),
        "resnet50.tiny.fp32.n1r1t1": (OK, resnet(10.0)),
        "resnet50.tiny.fp32.n1r2t1.rep1": (OK, resnet(18.0)),
        "resnet50.tiny.fp32.n1r2t1.rep2": (OK, resnet(20.0)),
        "resnet50.tiny.bf16.n1r2t1": (OK, resnet(30.0, "bf16")),
        "resnet50-keras.tiny.fp32.n1r2t1": (OK, {"throughput": (9.5, "images/s", True, "fp32")}),
    },
    "titan": {
        "kmeans.tiny.float64.n1r1t1": (OK, kmeans(0.4)),
        "resnet50.tiny.fp32.n2r1t1g1": (OK, resnet(10.0)),
    },
}
HOSTS = {"local": ["vm"], "titan": ["titan-n1"]}


def plan(site, parts) -> list:
    runs = []
    for benchmarks, repeats in parts:
        config = validate({"campaign": "golden", "preset": "tiny", "timeout_s": 900, "repeats": repeats,
                           "benchmarks": benchmarks}, "config", "golden")
        runs += expand(config, site, "golden")
    return sorted(runs, key=lambda r: r.run_id)


def make(name: str, site_file: Path, parts, work: Path) -> None:
    site = load_site(str(site_file))
    runs = plan(site, parts)
    out = RECORDS / name
    for old in out.glob("*.json"):
        old.unlink()
    figures = FIGURES[name]
    missing = set(figures) - {r.run_id for r in runs}
    assert not missing, f"figures for runs the plan does not have: {sorted(missing)}"
    for run in runs:
        paths = RunPaths(Path("results") / name, run.run_id)
        write_run_files(run, site, paths)
        if run.run_id not in figures:
            continue
        (status, error), metrics = figures[run.run_id]
        # No scratch path and no interpreter of this machine in a record: the same bytes wherever made.
        spec = json.loads(paths.spec.read_text().replace(f"{Path.cwd()}/", "").replace(sys.executable, "python3"))
        record = {**base_record(spec), "status": status, "error": error,
                  "checks": [], "provenance": {"hosts": HOSTS[name]},
                  "metrics": {m: {"value": v, "unit": u, "higher_is_better": hib, "precision": p, "samples": [v]}
                              for m, (v, u, hib, p) in metrics.items()}}
        write_record(record, out / f"{run.run_id}.json")
    if name == "local":
        (out / "plan.json").write_text(json.dumps([r.to_dict() for r in runs], indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(runs)} planned runs, {len(figures)} records")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        make("local", TESTS / "data" / "sites" / "golden-local.yaml", LOCAL, Path(tmp))
        make("titan", REPO / "profiles" / "titan" / "site.yaml", TITAN, Path(tmp))
