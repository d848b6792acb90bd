"""One K-Means run planned and rendered on a site, for the tests that replace its job script with a
stand-in (a sleeper, a failing launcher, ranks that outlive it)."""

from __future__ import annotations

from pathlib import Path

from exabench.campaign.plan import Run, expand
from exabench.campaign.render import RunPaths, write_run_files
from exabench.config import validate


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
