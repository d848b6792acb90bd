"""The package works without the checkout around it (as inside a container): a wheel built from
the tree, installed into a fresh virtual environment outside the checkout, runs a tiny benchmark
through `python -m exabench.runner` and writes a record valid against the packaged schema.

The fresh environment gets the wheel alone (no dependencies from the network); the dependencies
the runner imports come from this environment's site-packages on PYTHONPATH, which does not
process .pth files, so the checkout's editable install stays out of it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(python of a fresh venv with the exabench wheel installed, its environment)."""
    root = tmp_path_factory.mktemp("wheel")
    # What the wheel is made of, copied: setuptools builds in the source tree (build/, *.egg-info).
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(REPO / "exabench", source / "exabench", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(root / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (root / "dist").glob("exabench-*.whl")
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    # pip of this environment installs into the fresh one (--prefix), no network, no dependencies
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
                              "-q", "--prefix", str(root / "venv"), str(wheel)], capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    return python, env, root


def test_the_installed_package_is_the_wheel_and_carries_its_data(installed):
    python, env, root = installed
    code = ("import exabench, importlib.resources as r; print(exabench.__file__); "
            "print(r.files('exabench.records').joinpath('record.schema.yaml').is_file())")
    out = subprocess.run([str(python), "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    where, has_schema = out.stdout.split()
    assert Path(where).is_relative_to(root / "venv") and has_schema == "True"


def test_a_tiny_benchmark_runs_from_the_wheel_outside_the_checkout(installed, two_core_site, tmp_path):
    from exabench.campaign.plan import expand
    from exabench.campaign.render import RunPaths, write_run_files
    from exabench.config import validate
    from exabench.records.record import read_record

    python, env, root = installed
    config = validate({"benchmarks": [{"name": "gemm"}]}, "config", "c.yaml")
    (run,) = expand(config, two_core_site, "c.yaml")
    paths = RunPaths(tmp_path / "results" / "local", run.run_id)
    write_run_files(run, two_core_site, paths)
    res = subprocess.run([str(python), "-m", "exabench.runner", "--spec", str(paths.spec)], cwd=root, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    rec = read_record(paths.record)  # valid against the schema, as the wheel wrote it
    assert rec["status"] == "ok", rec.get("error")
    assert rec["workload"]["headline"] == "tflops" and rec["metrics"]["tflops"]["value"] > 0
    spec = json.loads(paths.spec.read_text())
    assert spec["workload"] == rec["workload"]
