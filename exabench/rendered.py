"""What a run's job script and spec were rendered from, as one digest kept in its spec
(`rendered_from`): its plan entry, its site file, the batch templates, where its spec lives and the
Python that renders (a site's `python: auto`). A run job renders its own files again only when the
digest differs (exabench execute --render-site): rendering imports the campaign stage (Jinja, the
launchers, every benchmark's facts), about half a second a run, where this reads a few files.

Apart from exabench.campaign.render so that a run job that finds its files current imports this
module alone (hashlib, json), not the campaign stage.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "workflow" / "templates"


@functools.lru_cache(maxsize=1)
def _templates_digest() -> bytes:
    h = hashlib.sha256()
    for path in sorted(TEMPLATE_DIR.rglob("*.j2")):
        h.update(str(path.relative_to(TEMPLATE_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.digest()


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, mtime_ns: int) -> bytes:
    return hashlib.sha256(Path(path).read_bytes()).digest()


@functools.lru_cache(maxsize=64)
def _resolved(path: str) -> str:
    return str(Path(path).resolve())


def source_digest(run: dict, site_path: str | Path, spec_path: str | Path, spec_resolved: bool = False) -> str | None:
    """The digest of what the run's files are rendered from; None without a site file to read (a
    site made in code), where the files are always rendered. `spec_resolved`: `spec_path` is already
    absolute with no link in it (the batch render's paths: resolving 10,000 of them took a second)."""
    if not site_path:
        return None
    try:
        st = os.stat(site_path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    h = hashlib.sha256(json.dumps(run, sort_keys=True, default=str).encode())
    h.update(_file_digest(_resolved(str(site_path)), st.st_mtime_ns))
    h.update(_templates_digest())
    h.update((str(spec_path) if spec_resolved else str(Path(spec_path).resolve())).encode() + b"\0"
             + sys.executable.encode())
    return h.hexdigest()[:16]


def is_current(spec_path: str | Path, run: dict, site_path: str | Path) -> bool:
    """The run's spec and job script exist and were rendered from exactly these sources."""
    spec_path = Path(spec_path)
    try:
        held = json.loads(spec_path.read_text()).get("rendered_from")
    except (OSError, ValueError, AttributeError):
        return False
    return held is not None and spec_path.with_name("job.sh").is_file() and \
        held == source_digest(run, site_path, spec_path)
