"""The two-campaign experiment of `history regress` under real machine noise (tests/test_regression_noise.py,
bench/regression_noise.py): campaigns of one tiny K-Means config run through the real path (plan ->
job script -> runner -> record -> results store), one of them beside a CPU-burning neighbour
process, one on a CPU throttled to 1/1.3 of its speed (the injected slowdown), each judged against the
baseline by the `exabench history regress` command (each alone against the baseline: with two
history campaigns the campaign would be the unit, and one degree of freedom decides nothing).

The slowdown is a CPU capped to 1/1.3 of its speed: while the slowed campaign runs, a thread of
the test stops every process the campaign started (SIGSTOP, through psutil) for 23% of each 20 ms
period and lets it run the rest, as a frequency cap or a throttled node would. The stopped
fraction actually achieved is measured (a loaded machine oversleeps), and the injected slowdown
is 1 / (1 - fraction) - 1: about 30%, known, whatever the benchmark's own scaling (30% more rows
gave K-Means 20% more time at this size: fixed costs).

The repeats are sized from the observed variance, not guessed: the baseline's first runs give
the run-to-run spread, and regression.repeats_needed the runs every campaign needs to detect a
20% change (so 30% is found with room to spare), between PILOT and MAX_RUNS."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import yaml

from helpers_compare import REPO, env

PILOT = 3  # runs of the baseline before its spread is known
MAX_RUNS = 6
DETECT = 0.2  # what the repeats are sized for: below the injected 30%, so that it is found with room
SLOWDOWN = 0.3
ROWS = 5000
NEIGHBOUR = "while True: pass"  # one core kept busy for the whole campaign


def _config(path: Path, rows: int, runs: int) -> str:
    path.write_text(yaml.safe_dump({
        "campaign": "noise", "preset": "tiny", "repeats": runs, "timeout_s": 300,
        "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1], "threads_per_rank": [1]},
                        "params": {"size_per_node": f"{rows}rows", "repeats": 10, "budget_s": 5}}]}))
    return str(path)


def run_campaign(root: Path, rows: int, runs: int, only_new: bool = False) -> list[dict]:
    """Every run of the config through the real path: render its job script, execute it; records in root/records."""
    from exabench.campaign.plan import expand
    from exabench.campaign.render import RunPaths, write_run_files
    from exabench.campaign.site import load_site
    from exabench.config import load_and_validate
    from exabench.execute import execute
    from exabench.records.record import read_record

    root.mkdir(parents=True, exist_ok=True)
    cfg = _config(root / "noise.yaml", rows, runs)
    site = load_site(REPO / "profiles" / "local" / "site.yaml")
    records = []
    for run in expand(load_and_validate(cfg, "config"), site, cfg):
        paths = RunPaths(root / "results", run.run_id)
        if not (only_new and paths.record.exists()):
            write_run_files(run, site, paths)
            execute(str(paths.spec))
        records.append(read_record(paths.record))
    bad = [r.get("error") for r in records if r["status"] != "ok"]
    assert not bad, bad
    return records


def run_spread(records: list[dict]) -> float:
    """The run-to-run spread of the records' headline (sd of log per-run times)."""
    logs = [math.log(r["metrics"]["time"]["value"]) for r in records]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


@contextlib.contextmanager
def neighbour():
    """A CPU-burning process beside the campaign (the test's own, ended by its pid)."""
    proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def throttle(slowdown: float, period: float = 0.02):
    """Every process this one started runs 1 / (1 + slowdown) of the time; yields a dict whose
    "injected" is the slowdown achieved (from the stopped fraction measured while runs existed)."""
    import psutil
    fraction = slowdown / (1 + slowdown)
    done, figures = threading.Event(), {"stopped": 0.0, "wall": 0.0, "injected": None}

    def cycle():
        me = psutil.Process()
        while not done.is_set():
            t0 = time.perf_counter()
            kids = me.children(recursive=True)
            for k in kids:
                with contextlib.suppress(psutil.Error):
                    k.suspend()
            time.sleep(period * fraction)
            t1 = time.perf_counter()
            for k in kids:
                with contextlib.suppress(psutil.Error):
                    k.resume()
            time.sleep(period * (1 - fraction))
            if kids:
                figures["stopped"] += t1 - t0
                figures["wall"] += time.perf_counter() - t0

    thread = threading.Thread(target=cycle, daemon=True)
    thread.start()
    try:
        yield figures
    finally:
        done.set()
        thread.join()
        f = figures["stopped"] / figures["wall"] if figures["wall"] else 0.0
        figures["injected"] = 1 / (1 - f) - 1


def _ingest(work: Path, root: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "exabench", "ingest", str(root / "results")], cwd=work, env=env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    from exabench.analysis import history
    return history.campaigns(work / "results" / "history.duckdb")["campaign_id"].iloc[-1]


def regress(work: Path, current: str, against: str) -> dict:
    """`exabench history regress` of one campaign against another: its one row, and what it printed."""
    res = subprocess.run([sys.executable, "-m", "exabench", "history", "regress", "--current", f"campaign:{current}",
                          "--against", f"campaign:{against}", "--csv", "regress.csv"], cwd=work, env=env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    row = pd.read_csv(work / "regress.csv").iloc[0].to_dict()
    row["printed"] = res.stdout
    return row


def experiment(work: Path) -> dict:
    """Baseline; the same config beside a neighbour; the same config on a CPU throttled by 30%.
    Returns the two verdict rows, the runs per campaign and the baseline's spread."""
    from exabench.analysis import regression

    base = work / "baseline"
    pilot = run_campaign(base, ROWS, PILOT)
    spread = run_spread(pilot)
    needed = regression.repeats_needed(DETECT, spread, history_runs=None)
    runs = min(MAX_RUNS, max(PILOT, needed or MAX_RUNS))
    run_campaign(base, ROWS, runs, only_new=True)  # topped up to the sized count, ingested as one campaign
    a = _ingest(work, base)
    with neighbour():
        run_campaign(work / "noisy", ROWS, runs)
    b = _ingest(work, work / "noisy")
    with throttle(SLOWDOWN) as injected:
        run_campaign(work / "slowed", ROWS, runs)
    c = _ingest(work, work / "slowed")
    out = {"runs": runs, "pilot_spread": spread, "repeats_needed": needed, "injected": injected["injected"],
           "noisy": regress(work, b, a), "slowed": regress(work, c, a)}
    (work / "figures.json").write_text(json.dumps(
        {k: ({kk: vv for kk, vv in v.items() if kk != "printed"} if isinstance(v, dict) else v)
         for k, v in out.items()}, indent=1, default=str))
    return out
