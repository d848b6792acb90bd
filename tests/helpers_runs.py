"""One K-Means run planned and rendered on a site, for the tests that replace its job script with a
stand-in (a sleeper, a failing launcher, ranks that outlive it); and, for campaigns run through
Snakemake (whose run jobs render their own job scripts again), a site whose ranks start a stand-in."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import yaml

from exabench.campaign.plan import Run, expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate

REPO = Path(__file__).resolve().parents[1]

# The Python a stand-in site's ranks start: the run's own `stand-in.sh`, beside its spec (the last
# argument), with the same arguments; the real Python where the run has none.
STAND_IN_PYTHON = """#!/usr/bin/env bash
stand_in="$(dirname "${{@: -1}}")/stand-in.sh"
[ -e "$stand_in" ] && exec bash "$stand_in" "$@"
exec {python} "$@"
"""


def rendered_kmeans(tmp_path: Path, site, script: str | None = None, **entry) -> tuple[Run, RunPaths]:
    """The first run of a `kmeans` campaign (config keys `entry`, e.g. timeout_s) rendered under
    tmp_path/results/local; `script`, when given, replaces its job script."""
    benchmark = {"name": "kmeans", **({"sweep": entry.pop("sweep")} if "sweep" in entry else {})}
    cfg = validate({"benchmarks": [benchmark], **entry}, "config", "c.yaml")
    run = expand(cfg, site, "c.yaml")[0]
    paths = RunPaths(tmp_path / "results" / "local", run.run_id)
    write_run_files(run, site, paths)
    if script is not None:
        paths.script.write_text(script)
    return run, paths


def stand_in_site(tmp_path: Path, launcher: str = "local") -> Path:
    """The local site with STAND_IN_PYTHON as the Python its ranks start: each run runs the
    `stand-in.sh` a test puts in its run folder (else the real runner), from the rendered job script
    (which the run job may render again). With launcher `local` (one rank, non-MPI benchmarks) no
    launcher sits between: the stand-in runs in the job's process group."""
    program = tmp_path / "stand-in-python"
    program.write_text(STAND_IN_PYTHON.format(python=shlex.quote(sys.executable)))
    program.chmod(0o755)
    raw = yaml.safe_load((REPO / "profiles" / "local" / "site.yaml").read_text())
    site = tmp_path / "stand-in-site.yaml"
    site.write_text(yaml.safe_dump({**raw, "python": str(program), "launcher": launcher}))
    return site
