"""Rendering: job scripts and launch lines for the local site, checked by bash itself."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from exabench.config import validate
from exabench.errors import ExabenchError, LayoutError
from exabench.campaign.render import RunPaths, render_script, write_run_files, write_runs_files
from exabench.campaign.plan import Run, expand


@pytest.fixture
def kmeans_run(two_core_site):
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [2]}}]}, "config", "c.yaml")
    return expand(cfg, two_core_site, "c.yaml")[0]


def test_local_mpirun_script(tmp_path, two_core_site, kmeans_run):
    paths = RunPaths(tmp_path / "results" / "local", kmeans_run.run_id)
    write_run_files(kmeans_run, two_core_site, paths)
    text = paths.script.read_text()
    subprocess.run(["bash", "-n", str(paths.script)], check=True)
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    # Two ranks on two cores: one thread each, so ranks never oversubscribe.
    assert "export OMP_NUM_THREADS=1\n" in text and "export OPENBLAS_NUM_THREADS=1\n" in text
    line = text.strip().splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:6] == ["mpirun", "-np", "2", "--map-by", "ppr:2:node:PE=1", "--bind-to"]
    assert "-x" in argv and "OMP_NUM_THREADS" in argv
    assert argv[-5:] == [sys.executable, "-m", "exabench.runner", "--spec", str(paths.spec.resolve())]
    spec = json.loads(paths.spec.read_text())
    assert spec["run_id"] == kmeans_run.run_id and spec["launch_line"] == line
    assert spec["layout"]["ranks"] == 2 and spec["paths"]["record"].endswith(f"records/{kmeans_run.run_id}.json")


def test_batch_render_writes_the_same_bytes_as_one_by_one(tmp_path, two_core_site):
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2], "k": [2, 3]}},
                                   {"name": "pca", "sweep": {"dtype": ["float64", "float32"]}}]}, "config", "c.yaml")
    runs = expand(cfg, two_core_site, "c.yaml")
    root = tmp_path / "results" / "local"

    def tree():
        return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode) for p in sorted(root.rglob("*"))
                if p.is_file()}

    for run in runs:
        write_run_files(run, two_core_site, RunPaths(root, run.run_id))
    one_by_one = tree()
    shutil.rmtree(root)
    write_runs_files(runs, two_core_site, root)
    assert len(one_by_one) == 2 * len(runs) == 12
    assert tree() == one_by_one
    shutil.rmtree(root)  # a large campaign's way: shares written by helper processes
    assert write_runs_files(runs, two_core_site, root, workers=3) == 12
    assert tree() == one_by_one
    assert write_runs_files(runs, two_core_site, root, workers=3) == 0  # nothing changed: nothing written


def test_a_helpers_render_error_reaches_the_caller_with_its_message(tmp_path, two_core_site):
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2], "k": [2, 3]}}]},
                   "config", "c.yaml")
    site = replace(two_core_site, launcher="local")  # one rank a run: the 2-rank runs cannot render
    runs = sorted(expand(cfg, two_core_site, "c.yaml"), key=lambda run: run.layout.ranks)
    root = tmp_path / "results" / "local"
    with pytest.raises(ExabenchError, match="ranks = 2.*launcher 'local'"):
        write_runs_files(runs, site, root, workers=2)  # this process's share renders; the helper's fails
    assert not list(root.rglob("*.tmp")) and not list(root.rglob(".*.tmp"))


KILLED_HELPER = """
import os, signal, sys
from pathlib import Path
from exabench.campaign import render_workers
from exabench.campaign.render import RunPaths, run_files
from exabench.io import _write_temp

def write(runs, site, root):  # half its share's temp files written, then killed as the OOM killer would
    for run in runs[: max(1, len(runs) // 2)]:
        for path, text, mode in run_files(run, site, RunPaths(root, run.run_id)):
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _write_temp(Path(path), text, mode, sync=False)
    os.kill(os.getpid(), signal.SIGKILL)

sys.exit(render_workers.serve(write))
"""


def test_a_helper_killed_mid_render_is_named_and_leaves_no_temp_file(tmp_path, two_core_site, monkeypatch):
    from exabench.campaign import render_workers
    from exabench.campaign.render import write_runs_files_here
    cfg = validate({"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2], "k": [2, 3, 4]}}]},
                   "config", "c.yaml")
    runs = expand(cfg, two_core_site, "c.yaml")
    (tmp_path / "killed_helper.py").write_text(KILLED_HELPER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    root = tmp_path / "results" / "local"
    with pytest.raises(ExabenchError) as caught:
        render_workers.write_shares(runs, two_core_site, root, 2, write_runs_files_here, helper="killed_helper")
    msg = str(caught.value)
    assert "render helper 2 of 2" in msg and "was killed by signal 9 (SIGKILL)" in msg, msg
    assert f"runs {runs[3].run_id} .. {runs[-1].run_id}" in msg and "render again" in msg, msg
    assert "temp file(s) it left removed" in msg and not msg.endswith("(0 temp file(s) it left removed); render again")
    assert not list(root.rglob(".*.tmp")), list(root.rglob(".*.tmp"))
    assert all(RunPaths(root, r.run_id).spec.is_file() for r in runs[:3])  # this process's share is whole


def test_run_to_dict_is_asdict_with_the_layouts_own_dict(two_core_site, kmeans_run):
    expected = dataclasses.asdict(kmeans_run)
    expected["layout"] = kmeans_run.layout.to_dict()
    # `resized` only where preset_sizes replaced a size: a plain run's spec (and its digest) is as before
    assert expected.pop("resized") == {}
    assert json.dumps(kmeans_run.to_dict()) == json.dumps(expected)  # same keys, values and order
    assert kmeans_run.to_dict()["params"] is not kmeans_run.params  # a copy, as asdict makes
    resized = replace(kmeans_run, resized={"size_per_node": "64GB"})
    assert resized.to_dict()["resized"] == {"size_per_node": "64GB"} and Run.from_dict(resized.to_dict()) == resized


def test_rendering_is_deterministic(tmp_path, two_core_site, kmeans_run):
    paths = RunPaths(tmp_path, kmeans_run.run_id)
    assert render_script(kmeans_run, two_core_site, paths) == render_script(kmeans_run, two_core_site, paths)


def test_torchrun_launcher(tmp_path, two_core_site, kmeans_run):
    site = replace(two_core_site, launcher="torchrun")
    _, line = render_script(kmeans_run, site, RunPaths(tmp_path, kmeans_run.run_id))
    argv = shlex.split(line)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[argv.index("--nproc-per-node") + 1] == "2" and "--standalone" in argv
    assert argv[-4:-2] == ["-m", "exabench.runner"]


def test_local_launcher_refuses_several_ranks(tmp_path, two_core_site, kmeans_run):
    site = replace(two_core_site, launcher="local")
    with pytest.raises(LayoutError, match="ranks = 2.*launcher 'local'"):
        render_script(kmeans_run, site, RunPaths(tmp_path, kmeans_run.run_id))


def test_site_env_values_are_quoted(tmp_path, two_core_site, kmeans_run):
    site = replace(two_core_site, env={"EVIL": "$(touch pwned); `touch pwned2`"})
    text, _ = render_script(kmeans_run, site, RunPaths(tmp_path, kmeans_run.run_id))
    assert "export EVIL='$(touch pwned); `touch pwned2`'" in text
