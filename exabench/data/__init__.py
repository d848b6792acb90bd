"""Synthetic data sets in the real formats, and their readers."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator


def split_folders(root, splits: tuple[str, ...], sizes: tuple[int, ...]) -> Iterator[tuple[str, int, Path]]:
    """Each split of a data set being generated under `root`: its name, its sample count and its
    folder, created."""
    for name, n in zip(splits, sizes):
        out = Path(root) / name
        out.mkdir(parents=True, exist_ok=True)
        yield name, n, out
