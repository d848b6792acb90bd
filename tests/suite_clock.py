"""The suite's clock (`make test`): every pytest run of the suite adds its tests' durations to one
file, and each run ends with the ten slowest tests so far and the time since `make test` started.
Past the limit (EXABENCH_SUITE_LIMIT_MIN, 45 minutes of the suite's pytest runs, set-up not counted:
it installs more on a new machine than on one that has the packages) the run fails, naming the
slowest tests: CI stops at 90 minutes, and a suite that creeps towards it should fail loudly long
before.

Set by the Makefile: EXABENCH_SUITE_START (epoch seconds when `make test` began) and
EXABENCH_SUITE_TIMES (the file the runs share). Without them (a plain `pytest`), the table covers
this run alone and no limit applies. Under pytest-xdist the controller keeps the clock: a test's
figure is its own wall time on its worker, and the runs' time is the controller's."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from pathlib import Path

SHOWN = 10
SESSIONS_KEY = "<pytest runs, wall seconds>"  # the runs' own time, beside the tests' in the shared file
_durations: dict[str, float] = defaultdict(float)
_session_start = time.time()


def _limit_s() -> float:
    return float(os.environ.get("EXABENCH_SUITE_LIMIT_MIN", "45")) * 60


def _since_start_s() -> float | None:
    start = os.environ.get("EXABENCH_SUITE_START", "")
    return time.time() - float(start) if start.strip().isdigit() else None


def pytest_sessionstart(session) -> None:
    global _session_start
    _session_start = time.time()


def pytest_runtest_logreport(report) -> None:
    _durations[report.nodeid] += report.duration  # setup, call and teardown together


def _all_durations() -> dict[str, float]:
    """This run's durations merged with the earlier runs' of the same `make test`, written back."""
    path = os.environ.get("EXABENCH_SUITE_TIMES")
    merged: dict[str, float] = {}
    if path and Path(path).is_file():
        try:
            merged = {str(k): float(v) for k, v in json.loads(Path(path).read_text()).items()}
        except (ValueError, AttributeError):
            merged = {}  # a damaged file: this run's figures alone
    sessions = merged.pop(SESSIONS_KEY, 0.0) + (time.time() - _session_start)
    merged.update(_durations)
    merged[SESSIONS_KEY] = sessions
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{path}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(merged))
        tmp.replace(path)
    return merged


def _slowest(durations: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(durations.items(), key=lambda item: -item[1])[:SHOWN]


def pytest_sessionfinish(session, exitstatus) -> None:
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: its tests' reports reach the controller, which keeps the clock
    durations = _all_durations()
    session.config._suite_clock = durations
    if _since_start_s() is not None and durations[SESSIONS_KEY] > _limit_s() and session.exitstatus == 0:
        session.exitstatus = 1  # the summary below says why


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    durations = dict(getattr(config, "_suite_clock", None) or {})
    suite_s = durations.pop(SESSIONS_KEY, 0.0)
    if not durations:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"the {SHOWN} slowest tests of the suite so far (setup + call + teardown)")
    for nodeid, seconds in _slowest(durations):
        write(f"{seconds:8.1f} s  {nodeid}")
    since = _since_start_s()
    tests_s = sum(durations.values())
    if since is None:
        write(f"{len(durations)} tests, {tests_s / 60:.1f} min in tests")
        return
    write(f"suite: {len(durations)} tests, {suite_s / 60:.1f} min in its pytest runs (limit {_limit_s() / 60:.0f} min), "
          f"{since / 60:.1f} min since `make test` started (set-up and the scale bench included)")
    if suite_s > _limit_s():
        write(f"FAILED: the suite took {suite_s / 60:.1f} min, past its limit of {_limit_s() / 60:.0f} min "
              f"(EXABENCH_SUITE_LIMIT_MIN); CI stops at 90. Make the slowest tests above cheaper (share what "
              f"they build), or move them out of `make test`.", red=True, bold=True)
