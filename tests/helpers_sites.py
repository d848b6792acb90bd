"""Shared helpers for the site/launcher tests: load a profile's site, render a run's script
under a fixed results root so golden files do not depend on where the checkout lives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from exabench.config import load_and_validate
from exabench.campaign.render import RunPaths, render_script
from exabench.campaign.plan import expand
from exabench.campaign.site import Site, load_site

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).resolve().parent / "golden"
PROFILES = sorted(p.parent.name for p in (REPO / "profiles").glob("*/site.yaml"))
# Profiles of this machine (no scheduler; the loopback Slurm; the N-node Slurm of network namespaces),
# not of a real site: no published queues, no machine-scale campaign.
TINY_SITES = ("local", "slurm-local", "slurm-cluster")
REAL_SITES = tuple(p for p in PROFILES if p not in TINY_SITES)
FIXED_ROOT = "/scratch/exabench/results"


def site(name: str, **changes) -> Site:
    s = load_site(REPO / "profiles" / name / "site.yaml")
    return dataclasses.replace(s, **changes) if changes else s


def plan_config(path: Path, site_obj: Site, text: str | None = None) -> list:
    """The runs a config file plans on a site, as `exabench plan` expands them; with `text`, the file is
    written with it first."""
    if text is not None:
        path.write_text(text)
    return expand(load_and_validate(path, "config"), site_obj, str(path))


def render_config(config_path: Path, site_obj: Site, root: str = FIXED_ROOT) -> list[tuple[str, str, str]]:
    """[(run_id, script, launch line)] for every run of a config on a site."""
    config = load_and_validate(config_path, "config")
    out = []
    for run in expand(config, site_obj, str(config_path)):
        text, line = render_script(run, site_obj, RunPaths(Path(root) / site_obj.name, run.run_id))
        out.append((run.run_id, text, line))
    return out


def write_site_with(tmp_path: Path, base: str, **changes) -> Path:
    """profiles/<base>/site.yaml with dotted keys changed (node.gpus=...), written to tmp_path."""
    raw = yaml.safe_load((REPO / "profiles" / base / "site.yaml").read_text())
    for key, value in changes.items():
        target = raw
        *parents, last = key.split(".")
        for p in parents:
            target = target.setdefault(p, {})
        target[last] = value
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path
