"""Processes of this host, seen through /proc: whether one runs (a reused PID told apart by its start
time), whether a process group (or the session it leads) has a live member, stopping them, and the
watchdog's loop.

Apart from exabench.execute so that the watchdog, a process of its own started for every run,
imports this module alone (os, signal, time), not what an execution needs.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused PID apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def proc_parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _answers(signal_zero) -> bool:
    """`signal_zero()` sends signal 0 (os.kill, os.killpg): False where no such process or group
    exists; one of another user's exists."""
    try:
        signal_zero()
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def alive(pid: int, start: str | None = None) -> bool:
    """The process runs (a zombie, dead but not yet reaped by its parent, does not)."""
    if not _answers(lambda: os.kill(pid, 0)):
        return False
    if proc_state(pid) in ("Z", "X"):
        return False
    got = proc_start(pid)
    return start is None or got is None or got == start


def _members(pgid: int) -> list[int]:
    """The live processes of the group, and of the session it leads: a job is started in a session
    of its own (its PID is its group's and session's id), and a launcher may put each rank in a
    group of its own inside it (Open MPI's mpirun does), where a signal to the job's group does not
    reach it. Zombies do not count: where nothing reaps orphans (a container whose PID 1 does not),
    a group of zombies would look alive for ever."""
    members = []
    for f in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = f.read_text().rsplit(")", 1)[-1].split()
        except OSError:  # ended while we looked
            continue
        if len(fields) > 3 and str(pgid) in (fields[2], fields[3]) and fields[0] not in ("Z", "X"):
            members.append(int(f.parent.name))
    return members


def group_alive(pgid: int) -> bool:
    """A process of the group (or of the session it leads) runs."""
    if not Path("/proc/self/stat").exists():  # no /proc: the group alone, as the kernel sees it
        return _answers(lambda: os.killpg(pgid, 0))
    return bool(_members(pgid))


def group_started_since(pgid: int, ticks: str | None) -> bool:
    """Every live process of the group (and its session) started at or after `ticks` (proc_start of
    the execution that made it): a group id reused by an unrelated, older process group is not it."""
    if ticks is None or not str(ticks).isdigit():
        return False
    starts = [proc_start(pid) for pid in _members(pgid)]
    return bool(starts) and all(s is not None and int(s) >= int(ticks) for s in starts)


def stop_group(pgid: int) -> None:
    """SIGTERM, then SIGKILL, to the group and to every process of the session it leads (a rank in a
    group of its own outlived its killed mpirun), each time until none is left or 5 s have passed."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        for target in (None, *(_members(pgid) if Path("/proc/self/stat").exists() else ())):
            try:
                os.killpg(pgid, sig) if target is None else os.kill(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if not group_alive(pgid):
                return
            time.sleep(0.1)


WATCHDOG_POLL_S = 0.5


def watch_job(argv: list[str]) -> None:
    """The watchdog's loop (argv: PGID, then PID:START of each owner): it ends when the group is gone,
    and stops the group (SIGTERM, then SIGKILL) when an owner is gone."""
    pgid = int(argv[0])
    owners = [(int(pid), start or None) for pid, _, start in (a.partition(":") for a in argv[1:])]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the execution's to handle
    while group_alive(pgid):
        if any(not alive(pid, start) for pid, start in owners):
            stop_group(pgid)
            return
        time.sleep(WATCHDOG_POLL_S)
