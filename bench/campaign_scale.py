"""How exabench's own machinery grows with the campaign: plan + render, `snakemake -n` and
aggregation of 100 / 1,000 / 10,000 K-Means runs, and what Snakemake adds to each run (goals for
10,000 runs on the 2-core machine: render through Snakemake < 15 s, `snakemake -n` < 30 s, aggregate
< 5 s; harness overhead < 0.2 s a run at 1,000 runs).

    PYTHONPATH=. python bench/campaign_scale.py [--sizes 100 1000 10000] [--repeats 1] [--skip-snakemake]
        [--render-jobs N] [--execute N [--execute-real]] [--remote-jobs N] [--slurm-jobs N]

Per size, in a temporary directory: a sweep config of `size` K-Means runs (seed x k x ranks per
node) on the local site; plan + render through the package (campaign.plan.expand, then
campaign.render.write_runs_files: every job script and spec written atomically); the Snakemake
dry-run of that campaign (`snakemake --profile profiles/local -n`, its own process, in a copy of
the working directory so that the checkout's results/ are not read); and the aggregation of
`size` result records shaped like real ones (records.tidy.aggregate: read, tidy table, CSV and
summary). Prints wall and CPU seconds per stage, per run, and the growth ratio from the size
before (10x the runs should cost about 10x). With --repeats > 1 each figure is the minimum.
Figures are printed, never asserted: on a shared machine they say as much about the neighbours.

With --render-jobs N it also renders an N-run campaign through Snakemake for real
(`snakemake --profile profiles/local render`: one job for the campaign, which Snakemake runs in a
Python process of its own that loads the workflow again, then the batch write above).

With --execute N it runs an N-run campaign for real and prices the harness: the campaign is
rendered through Snakemake (`render`, timed) for a site whose ranks' Python is a no-op
stand-in (it copies a valid `ok` record, prepared beside the run's spec, into place: the benchmark's
own work is nil, so what is left is the harness and the launcher), then the same N job scripts run one after another in a plain
shell loop, then through `snakemake --profile profiles/local --cores 1 --until run_benchmark` (one
at a time too, so the two compare). Harness overhead per run = (Snakemake - loop) / N. With
--execute-real the job scripts stay the rendered K-Means tiny ones (a real MPI run each: slow).

With --remote-jobs N it prices a job in cluster mode: an executor plugin (slurm, lsf) starts each
job on its compute node as a Snakemake job step (`python -m snakemake --target-jobs ... --mode
remote`, which parses the Snakefile, reads the plan the campaign's start saved and builds that one
job's DAG). Five runs of an N-run no-op campaign are run that way, then by `exabench execute`
alone; the difference is the per-job start cost (the scheduler's own submit and scheduling come on top).

With --slurm-jobs N an N-run no-op campaign runs through a real Slurm, the two-node loopback one
of scripts/slurm-local.sh (started and stopped here; it needs root, and nothing else using it), and
snakemake-executor-plugin-slurm (profiles/slurm-local): the wall time per job of the whole way,
submit, queue, job step and the status polls.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def sweep_config(runs: int) -> dict:
    """A K-Means campaign of `runs` runs (runs must be a multiple of 4)."""
    return {"campaign": f"scale{runs}", "preset": "tiny", "repeats": 1, "timeout_s": 600,
            "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2], "k": [2, 3],
                                                        "seed": list(range(1, runs // 4 + 1))}}]}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_plan_render(config_file: Path, root: Path) -> tuple[float, float, int]:
    from exabench.campaign.plan import expand
    from exabench.campaign.render import write_runs_files
    from exabench.campaign.site import load_site
    from exabench.config import load_yaml, validate
    shutil.rmtree(root, ignore_errors=True)
    settle()
    wall, cpu = time.perf_counter(), time.process_time()
    config = validate(load_yaml(config_file), "config", str(config_file))
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    runs = expand(config, site, str(config_file))
    write_runs_files(runs, site, root)
    return time.perf_counter() - wall, time.process_time() - cpu, len(runs)


def time_dry_run(config_file: Path, workdir: Path, mode: list[str] | None = None) -> tuple[float, float]:
    """`snakemake --profile profiles/local -n` on the campaign (or with `mode` instead of -n), from a
    working directory of its own (the Snakefile, profile and default config are the checkout's)."""
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "config" / "config.yaml", workdir / "config" / "config.yaml")
    if not (workdir / "profiles").exists():
        (workdir / "profiles").symlink_to(ROOT / "profiles")
    # The mode first: --configfile takes every word after it.
    cmd = [sys.executable, "-m", "snakemake", *(mode or ["-n"]), "-s", str(ROOT / "Snakefile"), "--profile",
           "profiles/local", "--configfile", str(config_file)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cpu, wall = children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    if out.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(mode or ['-n'])} failed:\n{out.stdout[-3000:]}")
    return wall, cpu


def time_render_jobs(config_file: Path, workdir: Path, extra: list[str] = ()) -> tuple[float, float]:
    """`snakemake --profile profiles/local render`: the campaign's render job (one job for the
    campaign, every run's files), from a fresh results folder."""
    shutil.rmtree(workdir / "results", ignore_errors=True)
    shutil.rmtree(workdir / ".snakemake", ignore_errors=True)
    settle()
    return time_dry_run(config_file, workdir, ["render", *extra])


def settle() -> None:
    """The file system's own work for what was deleted before a measurement, done before it: on this
    machine 20,000 files made right after 20,000 were deleted took 1 s to 14 s, by when the deletion
    reached the disk."""
    os.sync()
    time.sleep(1)


# No-op stand-in for the Python a run's ranks start (the site's `python`; the job scripts stay the
# rendered ones, which a run job renders again): the run's `ok` record, prepared beside its spec, put in place.
NOOP_PYTHON = """#!/usr/bin/env bash
run_dir="$(dirname "${@: -1}")"
record="$run_dir/../../records/$(basename "$run_dir").json"
cp "$run_dir/ok.json" "$record.tmp.$$" && mv "$record.tmp.$$" "$record"
"""


def noop_site(workdir: Path, profile: str = "local") -> Path:
    """The profile's site with NOOP_PYTHON as its ranks' Python."""
    program = workdir / "noop-python"
    program.write_text(NOOP_PYTHON)
    program.chmod(0o755)
    raw = yaml.safe_load((ROOT / "profiles" / profile / "site.yaml").read_text())
    site = workdir / "noop-site.yaml"
    site.write_text(yaml.safe_dump({**raw, "python": str(program)}))
    return site


def noop_records(runs_dir: Path) -> list[Path]:
    """Each rendered run's `ok` record, beside its spec, for NOOP_PYTHON; the runs' job scripts."""
    import json

    from exabench.records.record import base_record, check_record
    scripts = []
    for spec_path in sorted(runs_dir.glob("*/spec.json")):
        spec = json.loads(spec_path.read_text())
        rec = {**base_record(spec), "status": "ok", "error": None, "checks": [],
               "metrics": {"elapsed_s": {"value": 0.0, "unit": "s", "higher_is_better": False, "samples": [0.0]}},
               "provenance": {"hosts": ["noop"], "start_time": "", "end_time": ""}}
        check_record(rec, spec_path)
        (spec_path.parent / "ok.json").write_text(json.dumps(rec))
        scripts.append(spec_path.parent / "job.sh")
    return scripts


def time_shell_loop(scripts: list[Path], records: Path) -> tuple[float, float]:
    """The job scripts run one after another by bash (their records removed afterwards)."""
    listing = records.parent / "jobs.txt"
    listing.write_text("".join(f"{s}\n" for s in scripts))
    cpu, wall = children_cpu(), time.perf_counter()
    # Each script's stdin is /dev/null: mpirun forwards its stdin to rank 0, and would read the rest
    # of the listing (the loop then ends after one script).
    out = subprocess.run(["bash", "-c", 'while read -r s; do bash "$s" < /dev/null || exit 1; done < "$1"', "loop",
                          str(listing)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, cpu = time.perf_counter() - wall, children_cpu() - cpu
    written = len(list(records.glob("*.json")))
    if out.returncode != 0 or written != len(scripts):
        raise SystemExit(f"the shell loop failed ({written} of {len(scripts)} records):\n{out.stdout[-3000:]}")
    for rec in records.glob("*.json"):
        rec.unlink()
    return wall, cpu


def time_execution(n: int, real: bool) -> dict[str, tuple[float, float]]:
    """Render an n-run campaign through Snakemake, then run its job scripts in a shell loop and
    through Snakemake: {stage: (wall s, cpu s)}."""
    with tempfile.TemporaryDirectory(prefix="exabench-execute-") as tmp:
        work = Path(tmp)
        config_file = work / f"scale{n}.yaml"
        config_file.write_text(yaml.safe_dump(sweep_config(n), default_flow_style=None))
        site = [] if real else ["--config", f"site={noop_site(work)}"]
        figures = {"render (snakemake)": time_render_jobs(config_file, work, site)}
        results = work / "results" / "local"
        scripts = sorted(results.glob("runs/*/job.sh")) if real else noop_records(results / "runs")
        assert len(scripts) == n, (len(scripts), n)
        (results / "records").mkdir(parents=True, exist_ok=True)
        figures["shell loop"] = time_shell_loop(scripts, results / "records")
        # Each run job renders its own files (unchanged here: nothing written) before it runs them.
        figures["snakemake run"] = time_dry_run(config_file, work, ["--cores", "1", "--until", "run_benchmark", *site])
        done = len(list((results / "records").glob("*.json")))
        if done != n:
            raise SystemExit(f"snakemake left {done} of {n} records")
        return figures


# What an executor plugin (slurm, lsf) runs on a compute node for one job: Snakemake's job step
# (the arguments a spawned job gets, snakemake_interface_executor_plugins' format_job_exec, with
# `--mode remote`), which parses the Snakefile, reads the plan the campaign's start saved (or expands
# it when there is none for this config) and builds the DAG of that job alone.
def remote_job_command(config_file: Path, site: Path, run_id: str) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"),
            "--target-jobs", f"run_benchmark:run_id={run_id}", "--allowed-rules", "run_benchmark", "--cores", "2",
            "--attempt", "1", "--force-use-threads", "--force", "--target-files-omit-workdir-adjustment",
            "--max-inventory-time", "0", "--nocolor", "--no-hooks", "--nolock", "--ignore-incomplete",
            # The campaign's own --configfile alone, as Snakemake passes its job steps (spawn_jobs:
            # the files that replaced the default config).
            "--rerun-triggers", "params", "mtime", "code", "input", "software-env", "--configfiles",
            str(config_file), "--config", f"site={site}",
            "--scheduler", "greedy", "--quiet", "progress", "rules", "host", "--mode", "remote"]


def time_remote_jobs(n: int, jobs: int) -> dict[str, tuple[float, float]]:
    """An n-run no-op campaign rendered, then `jobs` of its runs each run as an executor plugin's job
    step runs it on a compute node, against the same runs' `exabench execute` alone: {stage: (wall s,
    cpu s) per job}."""
    with tempfile.TemporaryDirectory(prefix="exabench-remote-") as tmp:
        work = Path(tmp)
        config_file = work / f"scale{n}.yaml"
        config_file.write_text(yaml.safe_dump(sweep_config(n), default_flow_style=None))
        site = noop_site(work)
        time_render_jobs(config_file, work, ["--config", f"site={site}"])
        results = work / "results" / "local"
        noop_records(results / "runs")
        ids = sorted(p.name for p in (results / "runs").iterdir() if p.is_dir())[:jobs]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               "EXABENCH_ROOT": str(ROOT), "EXABENCH_PYTHON": sys.executable, "EXABENCH_SITE": str(site)}
        figures = {}
        for stage in ("job step (snakemake --mode remote)", "exabench execute alone"):
            cpu, wall = children_cpu(), time.perf_counter()
            for run_id in ids:
                cmd = remote_job_command(config_file, site, run_id) if stage.startswith("job") else \
                    [sys.executable, "-m", "exabench", "execute", "--spec", f"{results}/runs/{run_id}/spec.json"]
                out = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                record = results / "records" / f"{run_id}.json"
                if out.returncode != 0 or not record.exists():
                    raise SystemExit(f"{stage} of {run_id} failed:\n{out.stdout[-3000:]}")
                record.unlink()
            figures[stage] = ((time.perf_counter() - wall) / len(ids), (children_cpu() - cpu) / len(ids))
        return figures


SLURM_DIR = "/tmp/exabench-slurm"  # scripts/slurm-local.sh's default, which profiles/slurm-local/site.yaml names


def time_slurm_jobs(n: int, stop_after: int = 0) -> tuple[float, float, int]:
    """An n-run no-op campaign through a real Slurm (the loopback two-node one of
    scripts/slurm-local.sh, started and stopped here) and snakemake-executor-plugin-slurm
    (profiles/slurm-local: 4 jobs at a time): each run one Slurm job, whose job step (a Snakemake
    on its node) runs `exabench execute`, which runs the job script (srun, a no-op rank). The
    campaign is rendered first (not timed). With `stop_after`, the campaign is stopped (SIGINT: the
    plugin cancels its jobs) once that many records exist. Returns (wall s to the last record
    counted, CPU s of the submitting Snakemake, records counted)."""
    script = ROOT / "scripts" / "slurm-local.sh"
    start = subprocess.run(["bash", str(script), "start", SLURM_DIR], capture_output=True, text=True)
    if start.returncode != 0:
        raise SystemExit(f"scripts/slurm-local.sh start failed:\n{start.stdout[-2000:]}{start.stderr[-2000:]}")
    try:
        with tempfile.TemporaryDirectory(prefix="exabench-slurm-jobs-") as tmp:
            work = Path(tmp)
            (work / "profiles").symlink_to(ROOT / "profiles")
            (work / "config").mkdir()
            shutil.copy(ROOT / "config" / "config.yaml", work / "config" / "config.yaml")
            config_file = work / f"scale{n}.yaml"
            config_file.write_text(yaml.safe_dump(sweep_config(n), default_flow_style=None))
            site = noop_site(work, "slurm-local")
            env = {**os.environ, "SLURM_CONF": f"{SLURM_DIR}/slurm.conf",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            # The mode first: --configfile takes every word after it.
            cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--profile", "profiles/slurm-local",
                   "--configfile", str(config_file), "--config", f"site={site}"]
            rendered = subprocess.run(cmd[:3] + ["render"] + cmd[3:], cwd=work, env=env, capture_output=True, text=True)
            if rendered.returncode != 0:
                raise SystemExit(f"snakemake render failed:\n{rendered.stderr[-3000:]}")
            noop_records(work / "results" / "slurm-local" / "runs")
            settle()
            records = work / "results" / "slurm-local" / "records"
            cpu, start = children_cpu(), time.perf_counter()
            with open(work / "snakemake.log", "w+") as log:
                campaign = subprocess.Popen(cmd[:3] + ["--until", "run_benchmark"] + cmd[3:], cwd=work, env=env,
                                            stdout=log, stderr=subprocess.STDOUT, text=True)
                done = 0
                while campaign.poll() is None:
                    time.sleep(0.5)
                    done = len(list(records.glob("*.json"))) if records.exists() else 0
                    if stop_after and done >= stop_after:
                        wall = time.perf_counter() - start
                        campaign.send_signal(signal.SIGINT)
                        campaign.wait()
                        return wall, children_cpu() - cpu, done
                wall, cpu = time.perf_counter() - start, children_cpu() - cpu
                done = len(list(records.glob("*.json"))) if records.exists() else 0
                if campaign.returncode != 0 or done != n:
                    log.seek(0)
                    raise SystemExit(f"the Slurm campaign left {done} of {n} records:\n{log.read()[-3000:]}")
            return wall, cpu, done
    finally:
        subprocess.run(["bash", str(script), "stop", SLURM_DIR], capture_output=True, text=True)


def time_aggregate(runs: int, workdir: Path) -> tuple[float, float]:
    from aggregate_10k import make_records

    from exabench.records.tidy import aggregate
    records = workdir / "records"
    shutil.rmtree(records, ignore_errors=True)
    make_records(runs, records)
    paths = sorted(records.glob("*.json"))
    wall, cpu = time.perf_counter(), time.process_time()
    aggregate(paths, workdir / "results.csv", workdir / "summary.md", "local")
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 10_000],
                    help="sizes of the package-API stages (none: `--sizes` alone)")
    ap.add_argument("--repeats", type=int, default=1, help="take the minimum of this many measurements")
    ap.add_argument("--skip-snakemake", action="store_true", help="leave out the dry-run (the slowest stage)")
    ap.add_argument("--render-jobs", type=int, default=0, metavar="N",
                    help="also render an N-run campaign through Snakemake (its render job)")
    ap.add_argument("--execute", type=int, default=0, metavar="N",
                    help="run an N-run campaign for real: Snakemake against a shell loop (harness overhead per run)")
    ap.add_argument("--execute-real", action="store_true",
                    help="with --execute: keep the rendered K-Means tiny job scripts (not the no-op stand-ins)")
    ap.add_argument("--slurm-jobs", type=int, default=0, metavar="N",
                    help="run an N-run no-op campaign through the loopback Slurm and the Slurm executor plugin")
    ap.add_argument("--slurm-stop-after", type=int, default=0, metavar="K",
                    help="with --slurm-jobs: stop the campaign once K runs have their record (figures for those K)")
    ap.add_argument("--remote-jobs", type=int, default=0, metavar="N",
                    help="time one executor-plugin job step (a compute node's snakemake) in an N-run campaign")
    args = ap.parse_args(argv)
    if any(n % 4 for n in args.sizes + [args.render_jobs, args.execute, args.remote_jobs, args.slurm_jobs]):
        ap.error("each size must be a multiple of 4 (seed x k x ranks per node)")
    stages = ["plan + render", "aggregate"] + ([] if args.skip_snakemake else ["snakemake -n"])
    figures: dict[str, dict[int, tuple[float, float]]] = {s: {} for s in stages}
    with tempfile.TemporaryDirectory(prefix="exabench-scale-") as tmp:
        tmp = Path(tmp)
        warm = tmp / "warm.yaml"  # imports, schemas and templates loaded once, before any timing
        warm.write_text(yaml.safe_dump(sweep_config(4), default_flow_style=None))
        time_plan_render(warm, tmp / "warm" / "results" / "local")
        time_aggregate(4, tmp / "warm")
        for n in args.sizes:
            config_file = tmp / f"scale{n}.yaml"
            config_file.write_text(yaml.safe_dump(sweep_config(n), default_flow_style=None))
            work = tmp / f"n{n}"
            work.mkdir()
            for _ in range(args.repeats):
                wall, cpu, planned = time_plan_render(config_file, work / "results" / "local")
                assert planned == n, (planned, n)
                measured = {"plan + render": (wall, cpu), "aggregate": time_aggregate(n, work)}
                if not args.skip_snakemake:
                    measured["snakemake -n"] = time_dry_run(config_file, work)
                for stage, (w, c) in measured.items():
                    old = figures[stage].get(n)
                    figures[stage][n] = (min(w, old[0]), min(c, old[1])) if old else (w, c)
            shutil.rmtree(work)
            print(f"{n} runs measured (load average {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
    print(f"{'stage':14s} {'runs':>7s} {'wall s':>8s} {'cpu s':>8s} {'ms/run':>8s} {'growth':>7s}")
    for stage in stages:
        previous = None
        for n in args.sizes:
            wall, cpu = figures[stage][n]
            growth = f"{wall / figures[stage][previous][0]:6.1f}x" if previous else f"{'':7s}"
            print(f"{stage:14s} {n:7d} {wall:8.2f} {cpu:8.2f} {1000 * wall / n:8.2f} {growth}")
            previous = n
    if args.render_jobs:
        n = args.render_jobs
        with tempfile.TemporaryDirectory(prefix="exabench-render-") as tmp:
            config_file = Path(tmp) / f"scale{n}.yaml"
            config_file.write_text(yaml.safe_dump(sweep_config(n), default_flow_style=None))
            wall, cpu = time_render_jobs(config_file, Path(tmp))
        print(f"{'render (snakemake)':18s} {n:7d} {wall:8.2f} {cpu:8.2f} {1000 * wall / n:8.2f}  "
              "(snakemake --profile profiles/local render: one job for the campaign)")
    if args.execute:
        n = args.execute
        what = "K-Means tiny" if args.execute_real else "no-op"
        ex = time_execution(n, args.execute_real)
        for stage, (wall, cpu) in ex.items():
            print(f"{stage:18s} {n:7d} {wall:8.2f} {cpu:8.2f} {1000 * wall / n:8.2f}  ({what} job scripts)")
        (smk, smk_cpu), (loop, loop_cpu) = ex["snakemake run"], ex["shell loop"]
        print(f"harness overhead per run: {(smk - loop) / n:.3f} s wall, {(smk_cpu - loop_cpu) / n:.3f} s CPU "
              f"(snakemake {smk:.1f} s / shell loop {loop:.1f} s = {smk / loop:.1f}x)")
    if args.remote_jobs:
        n = args.remote_jobs
        ex = time_remote_jobs(n, 5)
        for stage, (wall, cpu) in ex.items():
            print(f"{stage:36s} {n:7d}-run campaign: {wall:6.2f} s wall, {cpu:6.2f} s CPU a job (5 jobs)")
        (step, _), (alone, _) = ex.values()
        print(f"per-job start cost in cluster mode: {step - alone:.2f} s (no-op runs; Slurm's own submit and "
              "scheduling not included)")
    if args.slurm_jobs:
        n = args.slurm_jobs
        wall, cpu, done = time_slurm_jobs(n, args.slurm_stop_after)
        print(f"slurm (executor plugin, loopback) {done:7d} jobs of a {n}-run campaign: {wall:8.1f} s wall, "
              f"{wall / done:.2f} s a job (4 at a time: submit, queue, job step, srun, status polls every 3 s; "
              f"the submitting Snakemake's CPU {cpu:.1f} s, {cpu / done:.2f} s a job; the job steps' is slurmd's)")
    print(f"(growth: wall time over the size before; load average now {os.getloadavg()[0]:.2f}, "
          f"{os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
