"""Why a node's run failed, in a few words a centre acts on: out of memory, killed by a signal
(which), a timeout, a node down, no record. Read from the record's status and error, or from what
the campaign said of a run that left no record (its Slurm job's end state, the node's state)."""

from __future__ import annotations

import re
import signal

# What the kernel, a cgroup, Slurm or Python write when memory ran out.
OOM_TEXT = re.compile(r"out[ _-]of[ _-]memory|oom[-_ ]?kill|\boom\b|MemoryError|Cannot allocate memory", re.I)
EXIT_CODE = re.compile(r"(?:exit(?:ed)?(?: with)?(?: code| status)?|return code)\s*[:=]?\s*(-?\d+)", re.I)
SIGNAL_NAME = re.compile(r"\b(SIG[A-Z]{2,6})\b")
NODE_LOST = ("NODE_FAIL", "BOOT_FAIL")


def _signal_name(number: int) -> str | None:
    """The signal's name; None where `number` is no signal (an exit code of 255 is 'exit -1' of
    mpirun or ssh, not signal 127)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def failure_cause(status: str, error: str | None) -> str:
    """The cause of a failed run from its record's `status` and `error` (or, for a run without a
    record, the campaign's note: "missing: job 12 ended OUT_OF_MEMORY", "not run: node down ...")."""
    text = error or ""
    code = EXIT_CODE.search(text)
    rc = int(code.group(1)) if code else None
    killed = rc in (137, -9) or (rc is not None and rc > 128 and rc - 128 == signal.SIGKILL)
    if OOM_TEXT.search(text):
        return "out of memory"
    if status == "timeout" or re.search(r"\bTIMEOUT\b|timed out|time limit", text, re.I):
        return "timeout"
    # The shell's "Killed" follows any SIGKILL; one a time limit or scancel did not name is the OOM killer's.
    if killed and re.search(r"\bKilled\b", text):
        return "out of memory"
    if status.startswith("not run: node down") or any(s in text for s in NODE_LOST):
        return "node down"
    if rc is not None and (rc < 0 or rc > 128) and (name := _signal_name(-rc if rc < 0 else rc - 128)):
        return f"killed by signal {name}"
    named = SIGNAL_NAME.search(text)
    if named and named.group(1) in signal.Signals.__members__:
        return f"killed by signal {named.group(1)}"
    if status == "missing":
        return "no record"
    return "run failed"
