"""The suite's clock (tests/suite_clock.py): the runs of one `make test` share a durations file, each
ends with the ten slowest tests so far, and a run past the suite's limit fails naming them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from suite_clock import SESSIONS_KEY  # noqa: E402


def _pytest(folder: Path, limit_min: float, times: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "EXABENCH_SUITE_TIMES": str(times),
           "EXABENCH_SUITE_LIMIT_MIN": str(limit_min), "EXABENCH_SUITE_START": str(int(time.time()))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_clock", "-p", "no:cacheprovider",
                           str(folder)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def test_runs_share_their_durations_and_a_suite_past_its_limit_fails_naming_the_slowest(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    (first / "test_a.py").write_text("import time\ndef test_slow():\n    time.sleep(1.5)\n")
    (second / "test_b.py").write_text("def test_quick():\n    pass\n")
    times = tmp_path / "times.json"
    res = _pytest(first, 1, times)  # 1.5 s of a minute's limit
    assert res.returncode == 0 and "the 10 slowest tests" in res.stdout, res.stdout
    res = _pytest(second, 0.02, times)  # both runs together: past a 1.2-second limit
    assert res.returncode == 1, res.stdout
    slowest = res.stdout[res.stdout.index("slowest tests"):].splitlines()[1]
    assert "test_a.py::test_slow" in slowest, res.stdout  # the earlier run's test, first
    assert "suite: 2 tests" in res.stdout, res.stdout
    assert re.search(r"FAILED: the suite took 0\.\d min, past its limit of 0 min", res.stdout), res.stdout
    saved = json.loads(times.read_text())
    assert {"test_a.py::test_slow", "test_b.py::test_quick"} <= set(saved) and saved[SESSIONS_KEY] >= 1.5
