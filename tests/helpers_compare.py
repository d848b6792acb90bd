"""Shared fixtures of the comparison, acceptance, archive and report tests: the golden records."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
RECORDS = DATA / "records"
GOLDEN = DATA / "golden"
PLAN = RECORDS / "local" / "plan.json"


def record_paths(*sites: str) -> list[str]:
    sites = sites or ("local", "titan")
    return sorted(str(p) for s in sites for p in (RECORDS / s).glob("*.json") if p.name != "plan.json")


# -- a real, tiny local campaign (K-Means only), run once per test session -------------------------

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TINY_CONFIG = """\
campaign: tiny-compare
preset: tiny
repeats: 1
timeout_s: 300
benchmarks:
  - name: kmeans
    params: {size_per_node: 2000rows, repeats: 2}
    sweep:
      ranks_per_node: [1, 2]
      threads_per_rank: [1]
"""
_CAMPAIGN: dict = {}


def copy_workflow(dest: Path) -> Path:
    """The workflow (not the package: PYTHONPATH points at the repo) in a scratch directory,
    so a test campaign never writes into the repository's results/."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "profiles", "config", "requirements.txt", "requirements.lock"):
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, dirs_exist_ok=True)
        elif src.exists():
            shutil.copy2(src, dest / name)
    (dest / "tiny.yaml").write_text(TINY_CONFIG)
    return dest


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    return e


def snakemake(cwd: Path, *args: str, timeout: int = 280) -> subprocess.CompletedProcess:
    # Rerun on changed times only: a scratch copy of a finished campaign sits at another path,
    # which Snakemake's default triggers would take for changed inputs and run everything again.
    cmd = [sys.executable, "-m", "snakemake", "--rerun-triggers", "mtime", "--profile", "profiles/local",
           "--configfile", "tiny.yaml", "--cores", "2", *args]
    return subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)


def finished_campaign(tmp_path_factory) -> Path:
    """A scratch copy of the workflow with the tiny campaign run to completion (cached)."""
    if "dir" not in _CAMPAIGN:
        d = copy_workflow(tmp_path_factory.mktemp("campaign"))
        res = snakemake(d)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        _CAMPAIGN["dir"] = d
    return _CAMPAIGN["dir"]


def scratch_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, symlinks=True)
    return dest
