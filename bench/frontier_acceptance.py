"""A Frontier-wide acceptance plan: every node one Frontier job may have (9,472) runs the ~20 single-node tests of
the acceptance suite, one job per node (`every_node` with `group: 1`): about 190,000 runs. Times and
sizes what exabench does with it here, each stage a process of its own under /usr/bin/time:

    PYTHONPATH=. python bench/frontier_acceptance.py [--nodes 9472] [--keep DIR]

- plan: config and site validated, the campaign's runs expanded, the node groups made and checked
  (the package API, as the Snakefile calls it);
- dry-run: `snakemake -n every_node_groups` from an empty results folder (the Snakefile parsed, the
  DAG of the render job and the group scripts' job built);
- render: `snakemake every_node_groups`, for real: the campaign's one render job (each test's job
  script and spec), then one batch script per node, pinned to it, and submit.sh;
- dry-run after: `snakemake -n every_node_groups` again, nothing left to do.

Prints wall and CPU seconds and peak memory (the largest process) per stage, and the total of plan,
dry-run and render. The site is profiles/frontier/site.yaml without its container section (no
Apptainer image can be built here; with it, rendering waits for the images' builds) on the local
profile. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

# The single-node tests: the Frontier acceptance suite's workloads (profiles/frontier/campaign.yaml)
# and the micro-benchmarks, one node each.
TESTS = [
    {"name": "resnet50", "params": {"precision": "fp32"}}, {"name": "resnet50", "params": {"precision": "fp16"}},
    {"name": "alexnet"}, {"name": "googlenet"}, {"name": "cosmoflow"}, {"name": "deepcam"},
    {"name": "kmeans", "params": {"size_per_node": "8GB"}, "gpus_per_rank": 0, "ranks": "per_socket"},
    {"name": "pca", "params": {"size_per_node": "8GB"}, "gpus_per_rank": 0, "ranks": "per_socket"},
    {"name": "svm", "gpus_per_rank": 0, "ranks": "per_socket"},
    {"name": "gemm", "params": {"precision": "fp32"}}, {"name": "gemm", "params": {"precision": "fp16"}},
    {"name": "gemm", "params": {"precision": "bf16"}}, {"name": "conv"}, {"name": "rnn"},
    {"name": "allreduce"}, {"name": "io_read"}, {"name": "candle", "params": {"model": "p1b1"}},
    {"name": "candle", "params": {"model": "p1b2"}}, {"name": "candle", "params": {"model": "p3b1"}},
    {"name": "oc20"},
]


def acceptance_config(nodes: int) -> dict:
    benchmarks = []
    for test in TESTS:
        sweep = {"nodes": [1], "ranks_per_node": [test.get("ranks", "per_gpu")], "threads_per_rank": ["fill"]}
        if "gpus_per_rank" in test:
            sweep["gpus_per_rank"] = [test["gpus_per_rank"]]
        benchmarks.append({"name": test["name"], "params": test.get("params", {}), "sweep": sweep})
    # node_hours_budget 0: the bench times the plan and the render; nothing is submitted.
    return {"campaign": "frontier-every-node", "preset": "tiny", "repeats": 1, "timeout_s": 240, "node_hours_budget": 0,
            "every_node": {"nodes": f"frontier[{1:05d}-{nodes:05d}]", "group": 1}, "benchmarks": benchmarks}


def native_site(work: Path) -> Path:
    site = yaml.safe_load((ROOT / "profiles" / "frontier" / "site.yaml").read_text())
    site.pop("container", None)
    path = work / "frontier-native.yaml"
    path.write_text(yaml.safe_dump(site, sort_keys=False))
    return path


def plan_stage(config_file: str, site_file: str) -> None:
    """The plan as the Snakefile makes it: runs, node groups, the groups checked against the runs."""
    from exabench.campaign.node_groups import check_groups, node_groups
    from exabench.campaign.plan import expand
    from exabench.campaign.site import load_site
    from exabench.config import load_yaml, validate
    config = validate(load_yaml(config_file), "config", config_file)
    site = load_site(site_file)
    runs = expand(config, site, config_file)
    groups = node_groups(config, site, config_file)
    check_groups(groups, runs, config_file)
    print(f"{len(runs)} tests x {len(groups)} nodes = {len(runs) * len(groups)} runs")


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, float, str]:
    """(wall s, cpu s, peak resident MB of its largest process, output) of one command under /usr/bin/time."""
    fmt = "exabench-time %e %U %S %M"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(["/usr/bin/time", "-f", fmt, *cmd], cwd=cwd, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    line = [x for x in out.stdout.splitlines() if x.startswith("exabench-time ")][-1]
    wall, user, sys_, kb = map(float, line.split()[1:])
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}")
    return wall, user + sys_, kb / 1024, out.stdout


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=9472)
    ap.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    ap.add_argument("--stage-plan", nargs=2, metavar=("CONFIG", "SITE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.stage_plan:
        plan_stage(*args.stage_plan)
        return 0
    with tempfile.TemporaryDirectory(prefix="exabench-frontier-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(work / "results", ignore_errors=True)
        shutil.rmtree(work / ".snakemake", ignore_errors=True)
        (work / "config").mkdir(exist_ok=True)
        shutil.copy(ROOT / "config" / "config.yaml", work / "config" / "config.yaml")
        if not (work / "profiles").exists():
            (work / "profiles").symlink_to(ROOT / "profiles")
        config_file = work / "frontier-every-node.yaml"
        config_file.write_text(yaml.safe_dump(acceptance_config(args.nodes), default_flow_style=None))
        site_file = native_site(work)
        smk = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--config", f"site={site_file}",
               "results_store=none", "--configfile", str(config_file), "--profile", "profiles/local"]
        stages = {}
        stages["plan"] = timed([sys.executable, __file__, "--stage-plan", str(config_file), str(site_file)], work)
        print(stages["plan"][3].splitlines()[0])
        stages["dry-run"] = timed([*smk, "-n", "every_node_groups"], work)
        stages["render"] = timed([*smk, "every_node_groups"], work)
        stages["dry-run after"] = timed([*smk, "-n", "every_node_groups"], work)
        scripts = len(list((work / "results" / "frontier" / "nodes" / "groups").glob("*.sh")))
    print(f"{'stage':14s} {'wall s':>8s} {'cpu s':>8s} {'peak MB':>8s}")
    for name, (wall, cpu, mb, _) in stages.items():
        print(f"{name:14s} {wall:8.2f} {cpu:8.2f} {mb:8.0f}")
    total = sum(stages[s][0] for s in ("plan", "dry-run", "render"))
    print(f"plan + dry-run + render: {total:.1f} s wall, peak {max(s[2] for s in stages.values()):.0f} MB; "
          f"{scripts} scripts (one per node, and submit.sh); load average {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
