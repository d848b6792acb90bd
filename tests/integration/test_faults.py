"""Faults during a campaign (issue 21): a corrupt record is a `corrupt` row, never an abort; a run in
progress holds a lock; signals to Snakemake stop the ranks. Real processes throughout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from exabench.campaign.plan import expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate
from exabench.records.record import base_record, write_record
from helpers_docs import run_documented
from helpers_runs import rendered_kmeans, stand_in_site

ROOT = Path(__file__).resolve().parents[2]


def exabench(*args, cwd=None, timeout=120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "exabench", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=env, timeout=timeout)


# -- corrupt records -------------------------------------------------------------------------------

@pytest.fixture
def campaign(tmp_path, two_core_site):
    """Four planned kmeans runs (rendered, plan.json written) and an ok record for each."""
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2]}}], "repeats": 2,
                    "timeout_s": 30}, "config", "c.yaml")
    runs = expand(cfg, two_core_site, "c.yaml")
    results = tmp_path / "results" / "local"
    (results / "records").mkdir(parents=True)
    (results / "plan.json").write_text(json.dumps([r.to_dict() for r in runs]))
    texts = {}
    for i, run in enumerate(runs):
        paths = RunPaths(results, run.run_id)
        write_run_files(run, two_core_site, paths)
        rec = {**base_record(json.loads(paths.spec.read_text())), "status": "ok", "checks": [],
               "metrics": {"time": {"value": 1.0 + i, "unit": "s", "samples": [1.0 + i], "higher_is_better": False}}}
        write_record(rec, paths.record)
        texts[run.run_id] = paths.record.read_text()
    return results, [r.run_id for r in runs], texts


def corrupt(results: Path, ids: list[str], texts: dict) -> dict[str, str]:
    """Damage three of the four records, each its own way; returns run id -> the reason shown."""
    a, b, c, d = ids
    rec_dir = results / "records"
    (rec_dir / f"{b}.json").write_text(texts[b][: len(texts[b]) // 2])  # truncated mid-write
    (rec_dir / f"{c}.json").write_text(texts[a])  # another run's record under this run's name
    wrong = json.loads(texts[d])
    wrong["metrics"]["time"]["value"] = "fast"  # the wrong shape
    (rec_dir / f"{d}.json").write_text(json.dumps(wrong))
    return {b: "not JSON", c: f"run_id '{a}' does not match the file name", d: "key 'metrics.time.value'"}


def test_corrupt_records_are_corrupt_rows_in_the_tidy_table_and_summary(campaign, tmp_path):
    results, ids, texts = campaign
    reasons = corrupt(results, ids, texts)
    csv, md = tmp_path / "tables" / "results.csv", tmp_path / "tables" / "summary.md"
    csv.parent.mkdir()
    csv.write_text("previous table\n")
    md.write_text("previous summary\n")
    proc = exabench("aggregate", "--site-name", "local", "--csv", csv, "--markdown", md,
                    *sorted((results / "records").glob("*.json")))
    assert proc.returncode == 0, proc.stderr
    df = pd.read_csv(csv)
    assert sorted(df["run_id"]) == sorted(ids)  # every file is one row: none merged into another run's
    assert df.set_index("run_id").loc[ids[0], "status"] == "ok"
    for run_id, reason in reasons.items():
        row = df.set_index("run_id").loc[run_id]
        assert row["status"] == "corrupt" and pd.isna(row["value"])
        assert str(results / "records" / f"{run_id}.json") in row["error"] and reason in row["error"]
        assert row["benchmark"] == "kmeans"
    summary = md.read_text()
    assert "1 of 4 runs ok, 3 not ok." in summary and summary.count("| corrupt |") == 3
    assert "Traceback" not in proc.stderr


def test_corrupt_records_are_corrupt_cells_in_comparisons_and_plots_and_fail_acceptance(campaign, tmp_path):
    results, ids, texts = campaign
    reasons = corrupt(results, ids, texts)
    plan = results / "plan.json"
    proc = exabench("compare", "--out", tmp_path / "tables", "--plan", plan, "--site-name", "local",
                    results / "records")
    assert proc.returncode == 0, proc.stderr
    site = pd.read_csv(tmp_path / "tables" / "site.csv")
    statuses = dict(zip(site["run_ids"], site["status"]))
    # repeats 1 and 2 of each layout share a cell; every run is in exactly one, none is `missing`
    assert sorted(";".join(statuses).split(";")) == sorted(ids)
    assert "missing" not in statuses.values()
    assert set(statuses.values()) <= {"partial", "corrupt"} and "corrupt" in statuses.values()

    from exabench.analysis.runs import load_runs
    runs = load_runs(sorted((results / "records").glob("*.json")), plan, "local").set_index("run_id")
    for run_id in reasons:  # the plan's facts fill the row: its layout, its parameters
        assert runs.loc[run_id, "status"] == "corrupt" and runs.loc[run_id, "ranks"] > 0
        assert runs.loc[run_id, "params"] != "{}"

    proc = exabench("plots", "--out", tmp_path / "plots", "--plan", plan, "--site-name", "local", results / "records")
    assert proc.returncode == 0, proc.stderr
    # Only the 1-rank runs have a figure: no scaling series, no placeholder picture, a line saying so.
    assert "- Scaling against ideal: not drawn, no workload was run at more than one size" in \
        (tmp_path / "plots" / "index.md").read_text()
    assert not list((tmp_path / "plots").glob("*.png"))

    refs = tmp_path / "references.yaml"
    refs.write_text("references:\n  - {benchmark: kmeans, metric: time, value: 1, lower: 0.5, upper: 0.5, unit: s}\n")
    out = tmp_path / "acceptance"
    proc = exabench("accept", "--references", refs, "--plan", plan, "--site-name", "local", "--markdown",
                    out / "v.md", "--csv", out / "v.csv", "--junit", out / "j.xml", "--strict", results / "records")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdicts = pd.read_csv(out / "v.csv").set_index("run_id")
    assert verdicts.loc[ids[0], "verdict"] == "pass"
    for run_id in reasons:
        assert verdicts.loc[run_id, "verdict"] == "fail" and verdicts.loc[run_id, "status"] == "corrupt"
        assert "corrupt record" in verdicts.loc[run_id, "detail"]


def test_a_record_under_another_runs_name_is_refused_on_read(tmp_path):
    from exabench.records.record import RecordError, read_record
    rec = {"schema": "exabench.result/1", "run_id": "kmeans.tiny.n1r1t1", "benchmark": "kmeans", "status": "ok",
           "metrics": {}}
    records = tmp_path / "records"  # a campaign's records folder: each file named by its run
    write_record(rec, records / "kmeans.tiny.n1r1t1.json")
    assert read_record(records / "kmeans.tiny.n1r1t1.json")["run_id"] == "kmeans.tiny.n1r1t1"
    (records / "kmeans.tiny.n1r2t1.json").write_text(json.dumps(rec))
    with pytest.raises(RecordError, match=r"kmeans.tiny.n1r2t1.json: run_id 'kmeans.tiny.n1r1t1' does not match"):
        read_record(records / "kmeans.tiny.n1r2t1.json")
    (tmp_path / "record.json").write_text(json.dumps(rec))  # elsewhere (a spec's own path): read as it is
    assert read_record(tmp_path / "record.json")["run_id"] == "kmeans.tiny.n1r1t1"
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RecordError, match="bin.json: not UTF-8"):
        read_record(tmp_path / "bin.json")
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(RecordError, match="dir.json: not readable"):
        read_record(tmp_path / "dir.json")


@pytest.mark.parametrize("written, why", [
    ('{"schema": "exabench.result/1", "status": "ok"', "not JSON"),  # torn
    (None, "run_id 'other.run' does not match the file name"),  # another run's record
])
def test_ranks_that_leave_no_valid_record_give_a_failed_record_naming_why(tmp_path, two_core_site, written, why):
    # The execution reads the ranks' record without the schema check (write_record made it): what is
    # not a record of this run becomes a `failed` record naming the reason, and the file is kept.
    from exabench.execute import execute
    run, paths = rendered_kmeans(tmp_path, two_core_site, script="#!/usr/bin/env bash\nexit 0\n")
    other = {"schema": "exabench.result/1", "run_id": "other.run", "benchmark": "kmeans", "status": "ok",
             "metrics": {}}
    text = written if written is not None else json.dumps(other)
    paths.record.parent.mkdir(parents=True, exist_ok=True)
    paths.script.write_text(f"#!/usr/bin/env bash\ncat > {paths.record} <<'EOF'\n{text}\nEOF\n")
    rec = execute(paths.spec)
    kept = paths.run_dir / "invalid-record.json"
    assert rec["status"] == "failed" and why in rec["error"] and str(kept) in rec["error"], rec["error"]
    assert kept.read_text() == text + "\n"
    assert json.loads(paths.record.read_text()) == rec


# -- the per-run lock ------------------------------------------------------------------------------

@pytest.fixture
def sleeping_run(tmp_path, two_core_site):
    """One rendered run whose job script sleeps (it writes no record: the run ends `failed`): 4 s, or
    while a file `hold` in its run folder exists (a test that must act while it runs)."""
    script = ("#!/usr/bin/env bash\necho started > \"$(dirname \"$0\")/started\"\n"
              "if [ -e \"$(dirname \"$0\")/hold\" ]; then\n"
              "  for _ in $(seq 1200); do [ -e \"$(dirname \"$0\")/hold\" ] || break; sleep 0.1; done\n"
              "else\n  sleep 4\nfi\nexit 3\n")
    run, paths = rendered_kmeans(tmp_path, two_core_site, script, timeout_s=60)
    return paths, run.run_id


def start_execute(spec) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "exabench", "execute", "--spec", str(spec)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(path: Path, timeout=30.0, proc: subprocess.Popen | None = None) -> None:
    import time
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{path} never appeared; the process ended:\n{proc.communicate()[0][-3000:]}")
        time.sleep(0.05)


def wait_for_log(cwd: Path, text: str, timeout: float, proc: subprocess.Popen) -> None:
    """Until the log of the snakemake running in `cwd` (.snakemake/log/, the lines it prints) says `text`."""
    import time
    end = time.monotonic() + timeout
    while not any(text in log.read_text(errors="replace") for log in (cwd / ".snakemake" / "log").glob("*.log")):
        assert time.monotonic() < end, f"snakemake never said {text!r}"
        if proc.poll() is not None:
            raise AssertionError(f"snakemake ended before saying {text!r}:\n{proc.communicate()[0][-3000:]}")
        time.sleep(0.1)


def test_a_second_execution_of_a_running_run_is_refused(sleeping_run):
    paths, run_id = sleeping_run
    hold = paths.run_dir / "hold"  # the first execution's job runs until the second one was refused
    hold.touch()
    first = start_execute(paths.spec)
    wait_for(paths.run_dir / "started")
    lock = json.loads((paths.run_dir / "run.lock").read_text())
    # The job's group is written to the lock once its start returns, which a loaded machine lets the
    # job's own first line (the `started` file) precede: wait for it rather than read it too early.
    deadline = time.monotonic() + 30
    while lock.get("job_pgid") is None and time.monotonic() < deadline:
        time.sleep(0.05)
        lock = json.loads((paths.run_dir / "run.lock").read_text())
    assert lock["pid"] == first.pid and lock["run_id"] == run_id and lock["job_pgid"]
    second = exabench("execute", "--spec", paths.spec)
    assert second.returncode == 2
    assert f"run {run_id} is already being executed by PID {first.pid} on host " in second.stderr
    assert "Traceback" not in second.stderr and "wait for it to finish" in second.stderr
    hold.unlink()
    out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    # the first execution's result stands, and its lock is gone
    assert json.loads(paths.record.read_text())["status"] == "failed" and "code 3" in out + paths.record.read_text()
    assert not (paths.run_dir / "run.lock").exists()
    # now free: a third execution runs
    third = exabench("execute", "--spec", paths.spec)
    assert third.returncode == 0, third.stderr


def test_an_orphaned_execution_is_reported_its_job_stopped_and_the_lock_taken_over(sleeping_run):
    import socket
    paths, run_id = sleeping_run
    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID that no longer runs: the owner that died (SIGKILL) without releasing its lock
    orphan_job = subprocess.Popen(["sleep", "60"], start_new_session=True)  # its ranks, still running
    (paths.run_dir / "run.lock").write_text(json.dumps({"run_id": run_id, "pid": dead.pid, "pid_start": None,
                                                        "host": socket.gethostname(), "start_time": "earlier",
                                                        "job_pgid": orphan_job.pid}))
    proc = exabench("execute", "--spec", paths.spec)
    assert proc.returncode == 0, proc.stderr
    assert f"run {run_id}: orphaned execution found (PID {dead.pid} on host" in proc.stderr
    assert f"its job (process group {orphan_job.pid}) was still running and has been stopped" in proc.stderr
    assert orphan_job.wait(timeout=10) is not None  # stopped, not left running beside the new execution
    assert (paths.run_dir / "started").exists() and not (paths.run_dir / "run.lock").exists()


def test_a_lock_held_on_another_host_is_refused_naming_it(sleeping_run):
    paths, run_id = sleeping_run
    (paths.run_dir / "run.lock").write_text(json.dumps({"run_id": run_id, "pid": 4242, "host": "login07",
                                                        "start_time": "2026-01-01T00:00:00"}))
    proc = exabench("execute", "--spec", paths.spec)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"run {run_id} is locked by an execution on another host (PID 4242 on host login07" in proc.stderr
    assert str(paths.run_dir / "run.lock") in proc.stderr and not (paths.run_dir / "started").exists()


# -- SIGINT / SIGTERM / SIGKILL to a running snakemake ---------------------------------------------

SLOW_OR_FAST = """#!/usr/bin/env bash
# the test's stand-in for a run's ranks: sleeps while {flag} exists, else ends at once (no record)
# (the PID written whole before it appears: the test reads it at once)
if [ -e {flag} ]; then
  echo $$ > "$(dirname "$0")/job.pid.tmp"; mv "$(dirname "$0")/job.pid.tmp" "$(dirname "$0")/job.pid"; exec sleep 120
fi
exit 3
"""


def snakemake_popen(cwd: Path, cfg: Path, *args) -> subprocess.Popen:
    # The campaign's site: a stand-in site beside its config (helpers_runs.stand_in_site), else this machine's.
    site = cfg.parent / "stand-in-site.yaml"
    site = site if site.exists() else ROOT / "profiles" / "local" / "site.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile"), "--profile",
           str(ROOT / "profiles" / "local"), "--config", f"site={site}",
           "--configfile", str(cfg), "--cores", "4", *args]  # the job scripts sleep: no CPU used
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group: a signal reaches snakemake alone


def pid_gone(pid: int, timeout: float) -> bool:
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def two_runs(tmp_path):
    """A campaign of two STREAM runs whose one rank is a stand-in: the first ends at once, the second sleeps while the flag is up."""
    import yaml

    from exabench.campaign.site import load_site
    campaign = {"campaign": "sig", "timeout_s": 300, "benchmarks": [{"name": "stream", "sweep": {"samples": [3, 4]}}]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(campaign))
    runs = tmp_path / "results" / "local" / "runs"
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")  # this machine's: its run ids
    ids = [r.run_id for r in expand(validate(campaign, "config", str(cfg)), site, str(cfg))]
    stand_in_site(tmp_path)  # each run's ranks run its stand-in.sh (the run job renders job.sh again)
    flag = tmp_path / "slow"
    flag.touch()
    for run_id, text in zip(ids, ["#!/usr/bin/env bash\nexit 3\n", SLOW_OR_FAST.format(flag=flag)]):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "stand-in.sh").write_text(text)
    return tmp_path, cfg, runs, ids, flag


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_snakemake_stops_the_ranks_and_the_resume_runs_only_the_unfinished_run(two_runs, sig):
    cwd, cfg, runs, (fast, slow), flag = two_runs
    records = cwd / "results" / "local" / "records"
    smk = snakemake_popen(cwd, cfg, f"results/local/records/{fast}.json", f"results/local/records/{slow}.json")
    try:
        wait_for(runs / slow / "job.pid", timeout=180, proc=smk)
        wait_for(records / f"{fast}.json", timeout=60, proc=smk)
        # The fast run is finished once snakemake has taken note (its record is written a moment before,
        # by the run's own process): a signal in between leaves it marked incomplete, and run again.
        wait_for_log(cwd, "1 of 2 steps (50%) done", timeout=60, proc=smk)
        job = int((runs / slow / "job.pid").read_text())
        fast_record = (records / f"{fast}.json").read_text()
        smk.send_signal(sig)
        assert pid_gone(job, 15), f"the run's job (PID {job}) still runs 15 s after {sig.name} to snakemake"
        out, _ = smk.communicate(timeout=60)  # snakemake ends (communicate's limit bounds it; no wall-clock assert)
    finally:
        if smk.poll() is None:
            os.killpg(smk.pid, signal.SIGKILL)
    assert smk.returncode != 0, out[-3000:]
    assert "stopping 1 running run(s): " + slow in out, out[-3000:]
    assert not (records / f"{slow}.json").exists()  # stopped: no record, so it is not finished
    assert not (runs / slow / "run.lock").exists() and not (runs / slow / "stop").exists()

    flag.unlink()  # the resume: the slow run now ends at once
    resume = snakemake_popen(cwd, cfg, f"results/local/records/{fast}.json", f"results/local/records/{slow}.json")
    out, _ = resume.communicate(timeout=240)
    assert resume.returncode == 0, out[-3000:]
    assert (records / f"{fast}.json").read_text() == fast_record, out  # the finished run was not run again
    assert f"wildcards: run_id={slow}" in out and f"wildcards: run_id={fast}" not in out
    assert json.loads((records / f"{slow}.json").read_text())["status"] == "failed"


@contextlib.contextmanager
def signal_ignored(sig):
    previous = signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(sig, previous)


# How soon one Ctrl-C ends a campaign: 1 to 2 s here (snakemake's handler, the run's process group
# stopped, two interpreters leaving); the bound only catches a campaign that runs on, so it leaves
# room for a loaded machine.
STOPPED_WITHIN_S = 15

SLEEPER = """#!/usr/bin/env bash
# the test's stand-in for a run's ranks: notes that the run started, then sleeps (no record)
echo $$ > "$(dirname "$0")/job.pid.tmp"  # whole when it appears: the test reads it at once
mv "$(dirname "$0")/job.pid.tmp" "$(dirname "$0")/job.pid"
exec sleep 120
"""


def three_stream_runs(tmp_path: Path, campaign: str, timeout_s: int) -> tuple[Path, list[str]]:
    """A three-run STREAM campaign's config file in `tmp_path`, and its run ids in plan order."""
    import yaml

    from exabench.campaign.site import load_site
    config = {"campaign": campaign, "timeout_s": timeout_s,
              "benchmarks": [{"name": "stream", "sweep": {"samples": [3, 4, 5]}}]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config))
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    return cfg, [r.run_id for r in expand(validate(config, "config", str(cfg)), site, str(cfg))]


@pytest.mark.parametrize("started", ["in the foreground", "by a script, with `&`"])
def test_one_ctrl_c_stops_a_local_campaign_and_starts_no_other_run(tmp_path, started):
    """SIGINT to the campaign's process group, as a terminal sends it on Ctrl-C (snakemake and the
    running run's `exabench execute` both get it): the campaign ends within 5 s and no later run
    starts. A snakemake that a script started with `&` (a shell without job control starts it with
    SIGINT ignored) let each Ctrl-C stop only the run in flight, which it took for a failed job
    (keep-going) and started the next."""
    import time

    cfg, ids = three_stream_runs(tmp_path, "ctrl-c", 300)
    stand_in_site(tmp_path)
    runs = tmp_path / "results" / "local" / "runs"
    for run_id in ids:
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "stand-in.sh").write_text(SLEEPER)
    ignored = started != "in the foreground"
    with signal_ignored(signal.SIGINT) if ignored else contextlib.nullcontext():  # inherited by snakemake
        smk = snakemake_popen(tmp_path, cfg, "--cores", "1")  # one run at a time (the stand-ins use no CPU)
    try:
        end = time.monotonic() + 180
        while not any((runs / i / "job.pid").exists() for i in ids):
            assert smk.poll() is None and time.monotonic() < end, smk.communicate()[0][-3000:]
            time.sleep(0.2)
        [first] = [i for i in ids if (runs / i / "job.pid").exists()]
        job = int((runs / first / "job.pid").read_text())
        os.killpg(smk.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole foreground group
        sent = time.monotonic()
        try:
            out, _ = smk.communicate(timeout=STOPPED_WITHIN_S)
        except subprocess.TimeoutExpired:
            out = ""
        took = time.monotonic() - sent
        time.sleep(2)  # a run started late would show by now
    finally:
        if smk.poll() is None:
            os.killpg(smk.pid, signal.SIGKILL)
            out += smk.communicate()[0]
    assert took < STOPPED_WITHIN_S, f"snakemake still ran {took:.1f} s after one SIGINT:\n{out[-3000:]}"
    started = [i for i in ids if (runs / i / "job.pid").exists()]
    assert started == [first], f"runs started after the SIGINT: {sorted(set(started) - {first})}\n{out[-3000:]}"
    assert pid_gone(job, 5) and smk.returncode != 0, out[-3000:]
    assert "Traceback" not in out and f"run {first} stopped: its execution got SIGINT" in out, out[-3000:]


def test_sigkill_of_snakemake_leaves_no_orphan_running_and_the_rerun_runs_the_run_once(two_runs):
    cwd, cfg, runs, (fast, slow), flag = two_runs
    smk = snakemake_popen(cwd, cfg, f"results/local/records/{slow}.json")
    try:
        wait_for(runs / slow / "job.pid", timeout=180, proc=smk)
        job = int((runs / slow / "job.pid").read_text())
        smk.send_signal(signal.SIGKILL)
        smk.wait(timeout=10)
        # the run's execution (a process snakemake spawned) saw its snakemake die and stopped the ranks
        assert pid_gone(job, 15), f"the run's job (PID {job}) runs on as an orphan after SIGKILL of snakemake"
        (runs / slow / "job.pid").unlink()
        unlock = snakemake_popen(cwd, cfg, "--unlock")  # as snakemake suggests after its SIGKILL
        assert unlock.wait(timeout=120) == 0
        rerun = snakemake_popen(cwd, cfg, f"results/local/records/{slow}.json")
        wait_for(runs / slow / "job.pid", timeout=180, proc=rerun)
        flag.unlink()
        os.kill(int((runs / slow / "job.pid").read_text()), signal.SIGTERM)
        out, _ = rerun.communicate(timeout=120)
    finally:
        for p in (smk, locals().get("rerun")):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert rerun.returncode == 0, out[-3000:]
    assert json.loads((cwd / "results" / "local" / "records" / f"{slow}.json").read_text())["status"] == "failed"



def test_a_results_directory_is_claimed_by_one_campaign_at_a_time(two_runs, tmp_path_factory):
    """Campaign A runs; campaign B, from another working directory whose results/ is A's, is refused
    naming A and runs nothing; A releases its claim when it ends; a claim left by a dead owner is
    reported and taken over."""
    cwd, cfg, runs, (fast, slow), flag = two_runs
    other = tmp_path_factory.mktemp("other")
    (other / "results").symlink_to(cwd / "results")  # two working directories, one results directory
    claim = cwd / "results" / "local" / "campaign.claim"
    records = cwd / "results" / "local" / "records"
    a = snakemake_popen(cwd, cfg, f"results/local/records/{slow}.json")
    try:
        wait_for(runs / slow / "job.pid", timeout=180, proc=a)
        held = json.loads(claim.read_text())
        assert held["pid"] == a.pid and held["workdir"] == str(cwd.resolve()) and held["checkout"] == str(ROOT)
        b = snakemake_popen(other, cfg, f"results/local/records/{fast}.json")
        out_b, _ = b.communicate(timeout=180)
        assert b.returncode != 0 and "Traceback" not in out_b, out_b[-3000:]
        assert f"is claimed by the campaign of checkout {ROOT} (working directory {cwd.resolve()}; PID {a.pid}" in out_b
        assert not (records / f"{fast}.json").exists() and not (runs / fast / "run.lock").exists()
        flag.unlink()
        os.kill(int((runs / slow / "job.pid").read_text()), signal.SIGTERM)
        out_a, _ = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
    assert a.returncode == 0 and not claim.exists(), out_a[-3000:]  # released at the end

    dead = subprocess.Popen(["true"])
    dead.wait()  # the owner of a claim left behind (its snakemake was killed)
    claim.write_text(json.dumps({**held, "pid": dead.pid, "pid_start": None}))
    b = snakemake_popen(other, cfg, f"results/local/records/{fast}.json")
    out_b, _ = b.communicate(timeout=180)
    assert b.returncode == 0, out_b[-3000:]
    assert f"stale claim on results/local by the campaign of checkout {ROOT} (working directory {cwd.resolve()}; " \
           f"PID {dead.pid}" in out_b and "taking it over" in out_b
    assert json.loads((records / f"{fast}.json").read_text())["status"] == "failed" and not claim.exists()


def test_the_same_checkout_shares_its_claim_and_a_claim_on_another_host_is_refused(tmp_path):
    import socket

    from exabench.execute import ResultsClaim, ResultsClaimedError
    said = []
    mine = ResultsClaim(tmp_path / "results", ROOT)
    assert mine.acquire(said.append) and not said
    assert ResultsClaim(tmp_path / "results", ROOT).acquire(said.append) is False  # a live owner, same checkout
    mine.release()
    elsewhere = {**mine.info, "host": "login07", "checkout": "/home/other/exabench"}
    mine.path.write_text(json.dumps(elsewhere))
    with pytest.raises(ResultsClaimedError, match="on another host and cannot be checked from here"):
        ResultsClaim(tmp_path / "results", ROOT).acquire(said.append)
    mine.path.write_text(json.dumps({**elsewhere, "checkout": str(ROOT)}))  # this checkout, resumed elsewhere
    assert ResultsClaim(tmp_path / "results", ROOT).acquire(said.append) and "resuming" in said[-1]
    assert json.loads(mine.path.read_text())["host"] == socket.gethostname()



# -- retrying failed runs and restoring records -----------------------------------------------------

FAULTY_NODE = """#!/usr/bin/env bash
# the run's rank fails while {flag} exists (a faulty node, say), else runs for real
if [ -e {flag} ]; then echo "node fault: ECC errors" >&2; exit 3; fi
exec {python} "$@"
"""


def test_retry_reruns_only_the_failed_run_and_restore_brings_back_a_kept_record(tmp_path):
    """A real campaign of two K-Means runs, one failing; `exabench retry` sets its record aside and
    the next snakemake runs it alone; `exabench restore` brings back a kept record, from archive/ and
    from a campaign archive, keeping the one it replaces."""
    import yaml

    from exabench.campaign.site import load_site
    campaign = {"campaign": "retry", "timeout_s": 240,
                "benchmarks": [{"name": "kmeans", "params": {"size_per_node": "2000rows", "repeats": 1},
                                "sweep": {"k": [3, 4], "ranks_per_node": [1]}}]}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(campaign))
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    ok_id, flaky = [r.run_id for r in expand(validate(campaign, "config", str(cfg)), site, str(cfg))]
    results = tmp_path / "results" / "local"
    records = [f"results/local/records/{i}.json" for i in (ok_id, flaky)]
    stand_in_site(tmp_path, launcher="mpirun")  # the flaky run's rank runs FAULTY_NODE, the other the runner
    flag = tmp_path / "faulty"
    flag.touch()
    (results / "runs" / flaky).mkdir(parents=True)
    (results / "runs" / flaky / "stand-in.sh").write_text(FAULTY_NODE.format(flag=flag, python=sys.executable))
    first = snakemake_popen(tmp_path, cfg, *records)
    out, _ = first.communicate(timeout=240)
    assert first.returncode == 0, out[-3000:]
    ok_record = (results / "records" / f"{ok_id}.json").read_bytes()
    failed = json.loads((results / "records" / f"{flaky}.json").read_text())
    assert json.loads(ok_record)["status"] == "ok" and failed["status"] == "failed"

    flag.unlink()  # the node is fixed
    local = {"<site>": "local"}  # docs/results.md's commands, from the campaign's folder
    proc = run_documented("exabench retry --results results/<site>", fill=local, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [kept] = (results / "attempts" / flaky).glob("*-failed.json")
    assert f"{flaky}: failed; record set aside -> " in proc.stdout and kept.name in proc.stdout, proc.stdout
    assert ok_id not in proc.stdout
    assert json.loads(kept.read_text()) == failed  # moved, not lost
    again = snakemake_popen(tmp_path, cfg, *records)
    out, _ = again.communicate(timeout=240)
    assert again.returncode == 0, out[-3000:]
    assert f"wildcards: run_id={flaky}" in out and f"wildcards: run_id={ok_id}" not in out
    assert (results / "records" / f"{ok_id}.json").read_bytes() == ok_record  # not run again
    assert json.loads((results / "records" / f"{flaky}.json").read_text())["status"] == "ok"
    assert "nothing to retry" in exabench("retry", "--results", results).stdout

    # Restore: the latest kept record other than the current one is the failed one (archive/ keeps every
    # record a run wrote); the ok record it replaces goes to attempts/.
    listed = run_documented("exabench restore --results results/<site> RUN_ID --list", fill={**local, "RUN_ID": flaky},
                            cwd=tmp_path)
    assert listed.returncode == 0 and kept.name in listed.stdout, listed.stdout + listed.stderr
    assert f"kept record(s) of {flaky}" in listed.stdout
    proc = run_documented("exabench restore --results results/<site> RUN_ID", fill={**local, "RUN_ID": flaky},
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((results / "records" / f"{flaky}.json").read_text()) == failed
    [replaced] = (results / "attempts" / flaky).glob("*-ok.json")
    assert "the ok record it replaces is kept -> " in proc.stdout and replaced.name in proc.stdout, proc.stdout
    tarball = tmp_path / "results/archives/local.tar.gz"
    tarball.parent.mkdir(parents=True)
    assert exabench("archive", "--results", results, "--out", tarball).returncode == 0
    import tarfile
    with tarfile.open(tarball) as tar:  # the records set aside travel with the campaign
        assert {f"attempts/{flaky}/{kept.name}", f"attempts/{flaky}/{replaced.name}"} <= set(tar.getnames())
    (results / "records" / f"{ok_id}.json").write_text("{truncated")  # damaged after the archive was made
    proc = run_documented("exabench restore --results results/local RUN_ID --archive results/archives/local.tar.gz",
                          fill={"RUN_ID": ok_id}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (results / "records" / f"{ok_id}.json").read_bytes() == ok_record
    assert "the corrupt record it replaces is kept" in proc.stdout
    proc = exabench("restore", "--results", results, ok_id, "--version", "nope.json")
    assert proc.returncode == 2 and "no kept record named 'nope.json'" in proc.stderr and "Traceback" not in proc.stderr


def test_after_retry_the_campaigns_own_command_runs_the_retried_run_and_no_other(tmp_path):
    """`exabench retry`, then the campaign's plain command (its default target, no record named):
    the retried run runs, alone, and the tables are made again. It said "Nothing to be done": the
    tables were newer than every record left."""
    cfg, ids = three_stream_runs(tmp_path, "retry-all", 240)
    flaky, others = ids[1], [ids[0], ids[2]]
    results = tmp_path / "results" / "local"
    stand_in_site(tmp_path)  # the flaky run's rank runs FAULTY_NODE, the others the runner
    flag = tmp_path / "faulty"
    flag.touch()
    (results / "runs" / flaky).mkdir(parents=True)
    (results / "runs" / flaky / "stand-in.sh").write_text(FAULTY_NODE.format(flag=flag, python=sys.executable))
    first = snakemake_popen(tmp_path, cfg)
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    kept = {i: (results / "records" / f"{i}.json").read_bytes() for i in others}
    assert json.loads((results / "records" / f"{flaky}.json").read_text())["status"] == "failed"

    flag.unlink()  # the node is fixed
    assert exabench("retry", "--results", results).returncode == 0
    again = snakemake_popen(tmp_path, cfg)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out[-3000:]
    assert f"wildcards: run_id={flaky}" in out and not any(f"wildcards: run_id={i}" in out for i in others), out[-3000:]
    assert {i: (results / "records" / f"{i}.json").read_bytes() for i in others} == kept  # not run again
    assert json.loads((results / "records" / f"{flaky}.json").read_text())["status"] == "ok"
    import csv
    with open(results / "tables" / "results.csv") as f:  # the tables were made again from the new record
        rows = list(csv.DictReader(f))
    assert {(r["run_id"], r["status"]) for r in rows} == {(i, "ok") for i in ids}

    # A record damaged since: its corrupt row's advice, followed, runs that run again and no other.
    damaged = results / "records" / f"{others[0]}.json"
    damaged.write_text("{torn")
    shown = snakemake_popen(tmp_path, cfg)
    out, _ = shown.communicate(timeout=600)
    assert shown.returncode == 0, out[-3000:]
    with open(results / "tables" / "results.csv") as f:
        [advice] = [r["error"] for r in csv.DictReader(f) if r["run_id"] == others[0]]
    command = re.search(r"`exabench (retry --results \S+)`", advice)
    assert command and "and the campaign's command then runs the run again" in advice, advice
    assert exabench(*command.group(1).split(), cwd=tmp_path).returncode == 0
    again = snakemake_popen(tmp_path, cfg)
    out, _ = again.communicate(timeout=600)
    assert again.returncode == 0, out[-3000:]
    assert f"wildcards: run_id={others[0]}" in out and not any(f"wildcards: run_id={i}" in out for i in ids[1:]), out
    assert json.loads(damaged.read_text())["status"] == "ok"


# -- the collectives' timeout follows the run's ----------------------------------------------------

HUNG_RANK = """
import sys, time
import torch, torch.distributed as dist
from exabench.training.distributed import World, init_torch, run_timeout_s, set_run_timeout
rank = int(sys.argv[1])
set_run_timeout(int(sys.argv[2]))  # as the runner does from the run spec's timeout_s
init_torch(World(rank, 2, rank, 2, "torchrun", False), "gloo", sys.argv[3])
print("pg timeout", run_timeout_s(), flush=True)
if rank == 1:
    time.sleep(120)  # never joins the collective: rank 0's all_reduce hangs
t0 = time.monotonic()
try:
    dist.all_reduce(torch.ones(1))
    print("all_reduce returned")
except Exception as exc:
    print(f"collective gave up after {time.monotonic() - t0:.1f} s: {type(exc).__name__}", flush=True)
"""


def test_a_hung_gloo_collective_gives_up_at_the_runs_time_limit(tmp_path):
    pytest.importorskip("torch")
    import socket
    import time
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    env.pop("EXABENCH_TIMEOUT_S", None)
    script = tmp_path / "hung.py"
    script.write_text(HUNG_RANK)
    ranks = [subprocess.Popen([sys.executable, str(script), str(r), "4", str(tmp_path)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    try:
        t0 = time.monotonic()
        out, _ = ranks[0].communicate(timeout=90)  # a fixed 600 s process-group timeout fails here
        waited = time.monotonic() - t0
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert "pg timeout 4" in out, out
    # The collective raised (the run's 4 s, not the 600 s default, as communicate's limit shows) rather
    # than returning; how long it took is reported, not judged: load on the machine stretches it.
    gave_up = [line for line in out.splitlines() if line.startswith("collective gave up after")]
    assert gave_up and "all_reduce returned" not in out, out
    print(f"\n{gave_up[0]} (process-group timeout 4 s); rank 0 exited after {waited:.1f} s")


def test_the_collective_timeout_is_the_runs_and_600_s_outside_a_run():
    from exabench.training.distributed import run_timeout_s
    assert run_timeout_s({"EXABENCH_TIMEOUT_S": "60"}) == 60
    assert run_timeout_s({"EXABENCH_TIMEOUT_S": "3600"}) == 3600  # longer than the old fixed 600 s too
    assert run_timeout_s({}) == 600 and run_timeout_s({"EXABENCH_TIMEOUT_S": "soon"}) == 600


# -- errors that explain themselves ----------------------------------------------------------------

def test_rank_errors_come_in_the_order_they_were_written_root_cause_first(sleeping_run):
    paths, _ = sleeping_run
    errors = paths.run_dir / "errors"
    paths.script.write_text(
        f"#!/usr/bin/env bash\nmkdir -p {errors}\n"
        f"printf 'rank 1 on h: ValueError: the root cause\\n\\ntraceback' > {errors}/rank1.txt\nsleep 0.2\n"
        f"printf 'rank 0 on h: ConnectionResetError: Connection reset by peer\\n' > {errors}/rank0.txt\nexit 1\n")
    proc = exabench("execute", "--spec", paths.spec)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(paths.record.read_text())
    assert rec["status"] == "failed"
    assert rec["error"] == (f"rank 1 on h: ValueError: the root cause (traceback: {errors / 'rank1.txt'}); "
                            "rank 0 on h: ConnectionResetError: Connection reset by peer")


def test_a_full_disk_is_named_not_an_index_error(sleeping_run):
    paths, _ = sleeping_run
    errors = paths.run_dir / "errors"
    # /dev/full answers every write with ENOSPC; the rank's own error file stayed empty, as on a full disk
    paths.script.write_text(
        f"#!/usr/bin/env bash\nmkdir -p {errors}\n: > {errors}/rank0.txt\n"
        f"{sys.executable} -c \"open('/dev/full', 'w').write('x' * 100000)\"\n")
    proc = exabench("execute", "--spec", paths.spec)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rec = json.loads(paths.record.read_text())
    assert rec["status"] == "failed" and rec["error"].startswith("No space left on device"), rec["error"]


def test_the_summary_shows_the_whole_root_cause_and_trims_only_what_follows(sleeping_run, tmp_path):
    paths, run_id = sleeping_run
    errors = paths.run_dir / "errors"
    cause = "rank 1 on h: ValueError: " + "the input shape (128, 3, 224, 224) does not match " * 8 + "the model"
    peer = "ConnectionResetError: Connection reset by peer"
    consequences = "".join(f"sleep 0.05\nprintf 'rank {r} on h: {peer}\\n' > {errors}/rank{r}.txt\n"
                           for r in (0, 2, 3, 4, 5, 6, 7))
    paths.script.write_text(f"#!/usr/bin/env bash\nmkdir -p {errors}\nprintf '{cause}\\n\\ntraceback' > "
                            f"{errors}/rank1.txt\n{consequences}exit 1\n")
    assert exabench("execute", "--spec", paths.spec).returncode == 0
    summary = tmp_path / "summary.md"
    proc = exabench("aggregate", "--csv", tmp_path / "t.csv", "--markdown", summary, "--site-name", "local",
                    paths.record)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in summary.read_text().splitlines() if x.startswith(f"| {run_id} "))
    assert len(cause) > 400 and f"| failed | {cause} (traceback: {errors / 'rank1.txt'}); more rank errors" in line
    assert "Connection reset" not in line  # seven peers' consequences are in results.csv, not the summary
    assert "Connection reset" in (tmp_path / "t.csv").read_text()


@pytest.mark.parametrize("error, shown", [
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    f()\n"
     "RuntimeError: CUDA out of memory | tried 2 GiB", "RuntimeError: CUDA out of memory / tried 2 GiB"),
    ("job script exited with code 1 and wrote no record; last output: " + " | ".join(f"line {i} " + "x" * 60
                                                                                       for i in range(5))
     + " | ImportError: no module named horovod",
     "job script exited with code 1 and wrote no record; last output: ... / " + " / ".join(
         f"line {i} " + "x" * 60 for i in (2, 3, 4)) + " / ImportError: no module named horovod"),
    ("sanity check 'loss' failed: " + "loss is nan, " * 40, "sanity check 'loss' failed: " + "loss is nan, " * 39
     + "loss is nan,"),  # one message: the root cause itself, never cut
])
def test_a_shown_error_keeps_the_exception_and_the_last_lines(error, shown):
    from exabench.records.tidy import shown_error
    assert shown_error(error) == shown


def test_restore_refuses_what_is_not_the_runs_record_and_changes_nothing(campaign):
    from exabench.errors import ExabenchError
    from exabench.records.attempts import restore, retry
    results, ids, texts = campaign
    (results / "records" / f"{ids[1]}.json").write_text("{torn")
    for text, why in ((texts[ids[2]], f"a record of run '{ids[2]}', not of '{ids[0]}'"), ("{torn", "not a JSON record"),
                      ('{"schema": "exabench.result/1"}', "is not a valid record field")):
        with pytest.raises(ExabenchError, match=why):
            restore(results, ids[0], text, "source.json")
    assert (results / "records" / f"{ids[0]}.json").read_text() == texts[ids[0]]
    assert not (results / "attempts").exists()
    [moved] = retry(results)  # the torn record only: the others are ok
    assert (moved.run_id, moved.status) == (ids[1], "corrupt") and moved.to.read_text() == "{torn"


def test_a_rerun_killed_halfway_is_finished_not_mixed_with_the_campaign_before_it(tmp_path):
    """`make rerun` (every run again) stopped after some runs, then the plain command: it used to
    find every record done and put the old campaign's beside the new one's in one table. While a
    rerun is unfinished, the plain command is refused naming the old records; the rerun itself goes
    on, and once it ends well the mark is gone and the plain command has nothing to do."""
    import time

    from exabench.records import rerun_marker
    cfg, ids = three_stream_runs(tmp_path, "rerun", 240)
    first = snakemake_popen(tmp_path, cfg)
    out, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out[-3000:]
    results = tmp_path / "results" / "local"
    # The rerun as a killed `make rerun` leaves it: marked at its start, one record rewritten since.
    rerun_marker.mark(results, ["--forcerun", "run_benchmark"])
    time.sleep(0.05)
    (results / "records" / f"{ids[0]}.json").touch()
    plain = snakemake_popen(tmp_path, cfg, "-n")
    out, _ = plain.communicate(timeout=300)
    assert plain.returncode == 1 and "Traceback" not in out, out[-3000:]
    assert "a rerun of this campaign started" in out and "2 of 3 records are still the earlier campaign's" in out
    assert f"delete {results.relative_to(tmp_path)}/{rerun_marker.MARKER}" in out or rerun_marker.MARKER in out
    rerun = snakemake_popen(tmp_path, cfg, "--forcerun", "run_benchmark")
    out, _ = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, out[-3000:]
    assert all(f"wildcards: run_id={i}" in out for i in ids)  # every run again
    assert not rerun_marker.marker_path(results).exists()  # ended well: one campaign's records
    again = snakemake_popen(tmp_path, cfg, "-n")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0 and "Nothing to be done" in out, out[-3000:]


def test_ranks_that_outlived_their_killed_execution_are_stopped_before_the_next_run_starts(tmp_path):
    """The execution and its watchdog both SIGKILLed leave the run's lock and its ranks running; the
    next run of the campaign on this host used to start beside them (2.5 min of overlap, two `ok`
    records with contaminated timings). Its execution now stops them first, and says so."""
    import time

    from exabench.execute import LOCK_NAME, RunLock
    from exabench.processes import group_alive, proc_start
    runs = tmp_path / "runs"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # the killed execution: a PID no longer running
    dead.wait()
    ranks = subprocess.Popen(["sleep", "120"], start_new_session=True)  # its ranks, in their own group
    try:
        (runs / "old").mkdir(parents=True)
        (runs / "old" / LOCK_NAME).write_text(json.dumps({
            "pid": dead.pid, "pid_start": "0", "host": os.uname().nodename, "start_time": "-",
            "run_id": "old", "job_pgid": ranks.pid}))
        said = []
        lock = RunLock("new", runs / "new")
        assert lock.acquire(said.append)
        assert lock.stop_orphans(said.append) == ["old"]
        ranks.wait(timeout=15)  # stopped, not left to run beside the new run
        assert not group_alive(ranks.pid)
        assert f"the ranks of run old (process group {ranks.pid}) outlived their execution" in said[0]
        # A group id that a newer execution's lock names but an older process holds is left alone.
        other = subprocess.Popen(["sleep", "120"], start_new_session=True)
        time.sleep(0.05)
        (runs / "old" / LOCK_NAME).write_text(json.dumps({
            "pid": dead.pid, "pid_start": str(int(proc_start(os.getpid())) + 10**9), "host": os.uname().nodename,
            "start_time": "-", "run_id": "old", "job_pgid": other.pid}))
        assert lock.stop_orphans(said.append) == [] and other.poll() is None
        other.kill()
        other.wait()
        lock.release()
    finally:
        if ranks.poll() is None:
            ranks.kill()
