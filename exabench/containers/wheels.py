"""Local wheel sources for an image build (site key `container.wheels`): the image's pip reads its
wheels from folders or file:// indexes on the build machine instead of the network. Air-gapped
build hosts need this, and so does a host that reaches PyPI but not an extra index a recipe
names (the cpu stack's https://download.pytorch.org/whl/cpu).

Each `pip install` of %post is rewritten: the recipe's own index options (--index-url,
--extra-index-url, -i) are dropped, a folder becomes `--find-links DIR`, a file:// index
`--index-url`/`--extra-index-url`; with `wheels_only` (the default) the network's index is not
read at all (`--no-index` when no file:// index is given). The pinned `name==version`s are left
as they are: a source that lacks a pin fails the build with pip's error rather than installing
another version. A source may hold another build of the same version (PyPI's torch 2.14.1 is the
CUDA build, which runs on a CPU): build_labels' caller reads what was installed (installed_labels)
and labels the image with it.

The sources are bound read-only into the build's chroot at their own paths (a file:// index with
the folder above it, where its pages' relative links lead) and the empty mount points removed
afterwards, so the image holds only what pip installed from them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from exabench.errors import ConfigError

INDEX_OPTIONS = ("--index-url", "--extra-index-url", "-i")
VALID = ("an absolute folder of wheels (--find-links) or a file:///absolute/path index (PEP 503 simple index, "
         "its files reachable from the folder above it), one or a list")


@dataclass(frozen=True)
class WheelSources:
    folders: tuple[str, ...]
    indexes: tuple[str, ...]   # file:// URLs
    only: bool                 # the network's index is not read

    def pip_options(self) -> list[str]:
        opts = []
        if self.only and not self.indexes:
            opts.append("--no-index")
        for i, url in enumerate(self.indexes):
            opts += ["--index-url" if self.only and i == 0 else "--extra-index-url", url]
        for folder in self.folders:
            opts += ["--find-links", folder]
        return opts

    def mounts(self) -> list[str]:
        """Host folders bound into the build at the same path."""
        roots = list(self.folders) + [str(Path(url.removeprefix("file://")).parent) for url in self.indexes]
        return sorted(set(roots))

    def label(self) -> str:
        return " ".join([*self.indexes, *self.folders]) + (" (only)" if self.only else " (and the network's index)")


def wheel_sources(site) -> WheelSources | None:
    """The site's `container.wheels` (None when unset), each source checked to exist here."""
    container = site.container or {}
    raw = container.get("wheels") or []
    where = site.path or site.name
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise ConfigError(where, "container.wheels", raw, VALID)
    if not items:
        return None
    folders, indexes = [], []
    for item in items:
        path = item.removeprefix("file://") if item.startswith("file://") else item
        if not path.startswith("/") or "://" in path or not Path(path).is_dir():
            raise ConfigError(where, "container.wheels", item, VALID + " that exists on this machine")
        (indexes if item.startswith("file://") else folders).append(item)
    only = container.get("wheels_only", True)
    if not isinstance(only, bool):
        raise ConfigError(where, "container.wheels_only", only, "true (no network index) or false")
    return WheelSources(tuple(folders), tuple(indexes), only)


def _is_pip_install(words: list[str]) -> int | None:
    """Index of `install` in a pip command (pip, pip3, .../pip, python -m pip), else None."""
    for i, word in enumerate(words[:-1]):
        if words[i + 1] != "install":
            continue
        if re.fullmatch(r"(.*/)?pip3?(\.\d+)?", word) or (word == "pip" and i > 0 and words[i - 1] == "-m"):
            return i + 1
    return None


def rewrite_pip(command: str, sources: WheelSources | None) -> str:
    """The %post command with its pip install reading `sources`; other commands as they are."""
    if sources is None:
        return command
    words = shlex.split(command)
    at = _is_pip_install(words)
    if at is None:
        return command
    kept, skip = [], False
    for word in words[at + 1:]:
        if skip:
            skip = False
        elif word in INDEX_OPTIONS:
            skip = True
        elif not any(word.startswith(opt + "=") for opt in INDEX_OPTIONS):
            kept.append(word)
    return shlex.join(words[:at + 1] + sources.pip_options() + kept)


def installed_labels(root: Path) -> dict[str, str]:
    """What the image's torch is, read from its files: `org.exabench.torch.installed` =
    "<version> cuda <X.Y>" (or "cpu"), so that a CUDA build put in a CPU stack says so."""
    versions = sorted(root.glob("opt/venv/lib/python*/site-packages/torch/version.py"))
    if not versions:
        return {}
    text = versions[0].read_text()
    version = re.search(r"^__version__\s*=\s*'([^']*)'", text, re.M)
    cuda = re.search(r"^cuda\s*[:=].*?'([^']*)'", text, re.M)
    build = f"cuda {cuda.group(1)}" if cuda else "cpu"
    return {"org.exabench.torch.installed": f"{version.group(1) if version else '?'} {build}"}
