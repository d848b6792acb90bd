"""Run one rendered job script and make sure a record exists afterwards.

The benchmark's rank 0 writes the record when the run completes; when it does not
(a rank raised, the launcher failed, the time limit passed), this writes a record
with status `failed` or `timeout` and a readable error, so the campaign goes on and
the table shows why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from exabench import containers
from exabench.containers import ContainerError
from exabench.records.record import failed_record, now_iso, read_record, write_record
from exabench.runner import error_dir


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _error_from(run_dir: Path, returncode: int, log_tail: str) -> str:
    files = sorted(error_dir(run_dir).glob("rank*.txt"), key=lambda p: int(p.stem[4:]))
    if files:
        lines = [f.read_text().splitlines()[0] for f in files]
        return "; ".join(lines) + f" (traceback: {files[0]})"
    tail = " | ".join(line for line in log_tail.splitlines()[-5:] if line.strip())
    return f"job script exited with code {returncode} and wrote no record; last output: {tail or '(none)'}"


def execute(spec_path: str | Path, script: str | Path | None = None, log=None) -> dict:
    """Run the job script of `spec_path`; returns the record that now exists."""
    spec_path = Path(spec_path)
    spec = json.loads(spec_path.read_text())
    run_dir = Path(spec["paths"]["run_dir"])
    record_path = Path(spec["paths"]["record"])
    script = Path(script) if script else run_dir / "job.sh"
    for stale in error_dir(run_dir).glob("rank*.txt"):
        stale.unlink()
    if record_path.exists():  # a previous result: archived by write_record already; start clean
        record_path.unlink()
    start = now_iso()
    t0 = time.monotonic()
    try:
        containers.check_before_start(spec.get("container"))
    except ContainerError as exc:
        record = failed_record(spec, "failed", str(exc), start, now_iso())
        write_record(record, record_path, spec["paths"]["archive_dir"])
        return record
    out_path = run_dir / "output.log"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=spec["timeout_s"])
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc, timed_out = proc.returncode, True
        except BaseException:  # interrupted ourselves: never leave ranks running
            _kill_group(proc)
            raise
    output = out_path.read_text(errors="replace")
    if log is not None:
        log.write(output)
    if record_path.exists() and not timed_out:
        return read_record(record_path)
    if timed_out:
        status, error = "timeout", f"run exceeded its time limit of {spec['timeout_s']} s and was stopped"
    else:
        status, error = "failed", _error_from(run_dir, rc, output)
    record = failed_record(spec, status, error, start, now_iso())
    record["provenance"]["elapsed_s"] = round(time.monotonic() - t0, 3)
    write_record(record, record_path, spec["paths"]["archive_dir"])
    return record
