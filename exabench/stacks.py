"""Where a hung run's ranks were: each rank's Python stacks written shortly before its time limit.

`exabench execute` hands the ranks the run's deadline (wall-clock seconds since the epoch, in
EXABENCH_DEADLINE; a launcher passes the environment on to its ranks); each rank arms the
interpreter's own fault handler to write every thread's stack to `errors/stacks-rank<N>.txt`
STACKS_MARGIN_S before it. The handler runs in its own thread and needs neither the GIL nor the
main thread, so it writes even from a rank stuck inside a collective or a DataLoader wait. When the
run is stopped at its limit, the `timeout` record names where each rank's main thread was, so a hang
is a place in the code, not only a time.
"""

from __future__ import annotations

import faulthandler
import os
import re
import time
from pathlib import Path

DEADLINE_ENV = "EXABENCH_DEADLINE"
STACKS_MARGIN_S = 5.0  # written this long before the limit: the ranks are killed at it
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')


def deadline_env(timeout_s: float, now: float | None = None) -> dict[str, str]:
    """The variable the job's ranks read: the run's deadline `timeout_s` from now."""
    return {DEADLINE_ENV: f"{(time.time() if now is None else now) + timeout_s:.3f}"}


def arm(errors: Path, rank: int, environ=None) -> Path | None:
    """Write this rank's stacks to `errors`/stacks-rank<rank>.txt STACKS_MARGIN_S before the run's
    deadline; None (nothing armed) outside a run or when the deadline is that close already."""
    value = (os.environ if environ is None else environ).get(DEADLINE_ENV, "")
    try:
        wait = float(value) - time.time() - STACKS_MARGIN_S
    except ValueError:
        return None
    if wait <= 0:
        return None
    errors.mkdir(parents=True, exist_ok=True)
    path = errors / f"stacks-rank{rank}.txt"
    out = open(path, "w")  # noqa: SIM115 - kept open for the process's life: the handler writes to its descriptor
    faulthandler.dump_traceback_later(wait, exit=False, file=out)
    return path


STOP_MARK = "stopped-rank{rank}.txt"


def mark_stops(errors: Path, rank: int) -> Path:
    """Create errors/stopped-rank<rank>.txt, empty, and have SIGTERM write this rank's stacks into
    it before the signal's default action ends the process: the interpreter's fault handler writes
    from the C signal handler, so even a rank blocked inside a collective leaves the mark. A launch
    that stops its ranks (SIGTERM, then SIGKILL) marks each one it stopped; a rank killed outright
    (out of memory: SIGKILL) leaves its file empty (exabench.execute.collect_node_world).
    Every thread is written: the kernel hands a signal sent to the process to any thread that does
    not block it, often one of MPI's, OpenMP's or the BLAS's own, and on a thread with no Python
    state a handler asked for the current thread only writes nothing, so the mark would read as
    a rank killed outright."""
    import signal
    errors.mkdir(parents=True, exist_ok=True)
    path = errors / STOP_MARK.format(rank=rank)
    out = open(path, "w")  # noqa: SIM115 - kept open for the process's life, as arm's file
    faulthandler.register(signal.SIGTERM, file=out, all_threads=True, chain=True)
    return path


def clear(errors: Path) -> None:
    """A previous execution's stack files (a run executed again starts without them)."""
    for stale in (*errors.glob("stacks-rank*.txt"), *errors.glob(STOP_MARK.format(rank="*"))):
        stale.unlink(missing_ok=True)


def where(text: str) -> str | None:
    """One line for a rank's stack file: the main thread's innermost frame and, when that is outside
    exabench, the innermost exabench frame that led to it, and the innermost benchmark frame where
    that is neither. The main thread is the last one listed."""
    blocks = [b for b in re.split(r"\n\s*\n", text.strip()) if "most recent call first" in b]
    if not blocks:
        return None
    frames = [m for m in (_FRAME.match(line) for line in blocks[-1].splitlines())
              if m and not m["file"].startswith("<frozen")]  # the import machinery's own frames say nothing
    if not frames:
        return None

    def show(m) -> str:
        return f"{_short(m['file'])}:{m['line']} in {m['func']}"
    text = show(frames[0])
    ours = next((m for m in frames if "/exabench/" in m["file"]), None)
    if ours is not None and ours is not frames[0]:
        text += f", called from {show(ours)}"
    # a wait inside shared plumbing (the run's communicator, its collectives) says which benchmark
    # code was waiting, too
    bench = next((m for m in frames if "/exabench/benchmarks/" in m["file"]), None)
    if bench is not None and bench is not frames[0] and bench is not ours:
        text += f", in {show(bench)}"
    return text


def summary(errors: Path) -> str | None:
    """Where each rank was shortly before the limit, from the stack files the ranks wrote; None when
    none did (a run that hung before its ranks started, or a launcher that dropped the variable)."""
    found = []
    for path in sorted(errors.glob("stacks-rank*.txt"), key=lambda p: int(p.stem.rsplit("rank", 1)[1] or 0)):
        try:
            line = where(path.read_text(errors="replace"))
        except OSError:
            continue
        if line:
            found.append(f"rank {path.stem.rsplit('rank', 1)[1]} at {line}")
    if not found:
        return None
    return (f"where the ranks were {STACKS_MARGIN_S:.0f} s before the limit: " + "; ".join(found)
            + f" (every thread's stack: {errors}/stacks-rank<N>.txt)")


def _short(path: str) -> str:
    """A frame's file from its package folder on (site-packages/torch/... -> torch/...)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    if "/exabench/" in path:
        return "exabench/" + path.rsplit("/exabench/", 1)[1]
    return path
