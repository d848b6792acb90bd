"""The two-campaign experiment of `history regress` under real machine noise (tests/integration/test_regression_noise.py,
bench/regression_noise.py): campaigns of one tiny K-Means config run through the real path (plan ->
job script -> runner -> record -> results store), one of them beside a CPU-burning neighbour
process, one with an injected 30% slowdown, each judged against the
baseline by the `exabench history regress` command (each alone against the baseline: with two
history campaigns the campaign would be the unit, and one degree of freedom decides nothing).

The slowdown is the analytics' `slowdown` parameter: every timed fit stretched by 30% of its own
time, the CPU kept busy, so the true change is +30% whatever the machine's load. More rows is
not a known change (the fits' fixed costs do not grow with the rows: 30% more rows measured
+22 to +27%), and a CPU throttled by stopping the process is not either (the scheduler gives a
stopped process its share back when it resumes).

The campaigns' runs are interleaved (baseline run 1, neighbour run 1, slowed run 1, baseline run
2, ...), each campaign's records in its own results folder and ingested as its own campaign: a
shared machine's background load drifts over minutes, and interleaving makes the drift hit every
campaign alike instead of deciding the verdict. The neighbour runs only beside the noisy
campaign's runs.

The repeats are sized from the observed variance, not guessed: the baseline's first runs give
the run-to-run spread, and regression.repeats_needed the runs every campaign needs to detect a
20% change (so 30% is found with room to spare), between PILOT and MAX_RUNS."""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from helpers_compare import REPO, env

PILOT = 3  # runs of each campaign before the baseline's spread is known
MAX_RUNS = 6
DETECT = 0.2  # what the repeats are sized for: below the injected 30%, so that it is found with room
SLOWDOWN = 0.3
ROWS = 5000
NEIGHBOUR = "while True: pass"  # one core kept busy beside each of the noisy campaign's runs


def _config(path: Path, slowdown: float, runs: int) -> str:
    path.write_text(yaml.safe_dump({
        "campaign": "noise", "preset": "tiny", "repeats": runs, "timeout_s": 300,
        "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1], "threads_per_rank": [1]},
                        "params": {"size_per_node": f"{ROWS}rows", "repeats": 10, "budget_s": 5,
                                   "slowdown": slowdown}}]}))
    return str(path)


class Campaign:
    """One campaign's runs through the real path, one at a time: render the job script, execute it."""

    def __init__(self, root: Path, slowdown: float = 0.0):
        from exabench.campaign.plan import expand
        from exabench.campaign.site import load_site
        from exabench.config import load_and_validate
        root.mkdir(parents=True, exist_ok=True)
        cfg = _config(root / "noise.yaml", slowdown, MAX_RUNS)
        self.root, self.site = root, load_site(REPO / "profiles" / "local" / "site.yaml")
        self.plan = expand(load_and_validate(cfg, "config"), self.site, cfg)
        self.records: list[dict] = []

    def run_next(self) -> dict:
        from exabench.campaign.render import RunPaths, write_run_files
        from exabench.execute import execute
        from exabench.records.record import read_record
        run = self.plan[len(self.records)]
        paths = RunPaths(self.root / "results", run.run_id)
        write_run_files(run, self.site, paths)
        execute(str(paths.spec))
        rec = read_record(paths.record)
        assert rec["status"] == "ok", rec.get("error")
        self.records.append(rec)
        return rec


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


def _ingest(work: Path, root: Path) -> str:
    """The campaign's records into the store as one campaign; its id."""
    from exabench.records import store
    done = store.ingest([root / "results"], work / "results" / "history.duckdb")
    (campaign,) = done.campaigns
    return campaign["campaign_id"]


def regress(work: Path, current: str, against: str) -> dict:
    """`exabench history regress` of one campaign against another: its one row, and what it printed."""
    res = subprocess.run([sys.executable, "-m", "exabench", "history", "regress", "--current", f"campaign:{current}",
                          "--against", f"campaign:{against}", "--csv", "regress.csv"], cwd=work, env=env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    row = pd.read_csv(work / "regress.csv").iloc[0].to_dict()
    row["printed"] = res.stdout
    return row


def _floor(spread: float) -> float:
    """The noise floor one history campaign gives: the campaign level assumed as large as the runs'
    spread or the campaign_spread, whichever is larger (regression.compare_runs)."""
    from exabench.analysis import regression
    return math.expm1(regression.FLOOR_SPREADS
                      * math.sqrt(spread ** 2 + max(spread, math.log1p(regression.CAMPAIGN_SPREAD)) ** 2))


def experiment(work: Path) -> dict:
    """Baseline, the same config beside a neighbour, the same config slowed by 30%, their runs
    interleaved; PILOT runs each, then as many as the baseline's spread asks for (at most MAX_RUNS).
    Returns the two verdict rows (each against the baseline), the runs per campaign, the spread, and
    `sized`: whether the runs reached what the spread asks for and the noise floor the spread
    implies (one history campaign: regression.compare_runs) is below DETECT, for the pilot's spread
    and for the spread the campaigns then showed (a machine too busy for these runs to detect DETECT
    is named so, not judged by luck)."""
    from exabench.analysis import regression

    base, noisy, slowed = (Campaign(work / "baseline"), Campaign(work / "noisy"),
                           Campaign(work / "slowed", SLOWDOWN))
    runs, needed, spread = PILOT, None, None
    while len(base.records) < runs:
        base.run_next()
        with neighbour():
            noisy.run_next()
        slowed.run_next()
        if len(base.records) == PILOT:  # the repeats, sized from the observed variance
            spread = run_spread(base.records)
            needed = regression.repeats_needed(DETECT, spread)
            runs = min(MAX_RUNS, max(PILOT, needed or MAX_RUNS))
    a, b, c = (_ingest(work, x.root) for x in (base, noisy, slowed))
    rows = {"noisy": regress(work, b, a), "slowed": regress(work, c, a)}
    # The pilot's few runs can underestimate the spread: the sizing is checked again against the
    # spread the slowed verdict saw (both campaigns' runs), and a machine that turned out too noisy
    # for these runs to detect DETECT is named so, not judged by luck.
    seen = float(rows["slowed"]["spread_run"])
    seen_needed = regression.repeats_needed(DETECT, seen)
    out = {"runs": runs, "pilot_spread": spread, "repeats_needed": needed, "pilot_floor": _floor(spread),
           "seen_spread": seen, "seen_repeats_needed": seen_needed, "seen_floor": _floor(seen),
           "sized": all(n is not None and n <= runs and _floor(x) < DETECT
                        for n, x in ((needed, spread), (seen_needed, seen))), **rows}
    (work / "figures.json").write_text(json.dumps(
        {k: ({kk: vv for kk, vv in v.items() if kk != "printed"} if isinstance(v, dict) else v)
         for k, v in out.items()}, indent=1, default=str))
    return out
