"""The rerun mark (exabench.records.rerun_marker): which command lines are a rerun, and when a plain
command is refused while a rerun is unfinished."""

from __future__ import annotations

import os
import time

import pytest

from exabench.errors import ExabenchError
from exabench.records import rerun_marker


@pytest.mark.parametrize("argv, rerun", [
    (["--profile", "profiles/local", "--forcerun", "run_benchmark"], True),
    (["--profile", "profiles/local", "-R", "run_benchmark", "aggregate"], True),
    (["--profile", "profiles/local", "--forceall"], True),
    (["--profile", "profiles/local", "--forcerun", "aggregate"], False),
    (["--profile", "profiles/local"], False),
    (None, False),
])
def test_a_rerun_is_a_command_that_runs_every_run_again(argv, rerun):
    assert rerun_marker.is_rerun(argv) is rerun


def test_a_plain_command_is_refused_only_while_older_records_remain(tmp_path):
    records = tmp_path / "records"
    records.mkdir()
    for run_id in ("a", "b"):
        (records / f"{run_id}.json").write_text("{}")
        os.utime(records / f"{run_id}.json", (time.time() - 60,) * 2)
    plain = ["--profile", "profiles/local"]
    rerun_marker.check_unfinished(tmp_path, ["a", "b"], plain)  # no mark: nothing to check
    rerun_marker.mark(tmp_path, ["--forcerun", "run_benchmark"])
    time.sleep(0.05)  # past the file system's clock tick
    os.utime(records / "a.json")  # rewritten by the rerun
    with pytest.raises(ExabenchError, match=r"1 of 2 records are still the earlier campaign's \(b\)"):
        rerun_marker.check_unfinished(tmp_path, ["a", "b"], plain)
    rerun_marker.check_unfinished(tmp_path, ["a", "b"], ["--forcerun", "run_benchmark"])  # the rerun goes on
    rerun_marker.check_unfinished(tmp_path, ["a", "b"], None)  # a job's own process decides nothing
    os.utime(records / "b.json")
    rerun_marker.check_unfinished(tmp_path, ["a", "b"], plain)  # every record the rerun's
    rerun_marker.clear(tmp_path)
    assert not rerun_marker.marker_path(tmp_path).exists()


def test_a_damaged_mark_is_named(tmp_path):
    rerun_marker.marker_path(tmp_path).write_text("not json")
    with pytest.raises(ExabenchError, match=r"rerun-unfinished.json: not a rerun mark"):
        rerun_marker.check_unfinished(tmp_path, [], ["--profile", "profiles/local"])
