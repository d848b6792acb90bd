"""What every picture shares: pyplot on Agg, the grid of panels, byte-stable PNGs, and
`NothingToDraw`, which a plot raises instead of drawing a placeholder: the report's index then
names the picture and why it was not drawn, in one line."""

from __future__ import annotations

import math
from pathlib import Path

PNG_META = {"Software": None}  # no version string: the bytes depend on the data only


class NothingToDraw(Exception):
    """The records do not support this picture; the message says why (one line, for the index)."""


def pyplot():
    """pyplot on the Agg backend, imported when a plot is drawn: every Snakemake job loads the rule
    files and with them the plots, and most jobs draw nothing (matplotlib costs 0.3 s a job)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata=PNG_META)
    pyplot().close(fig)
    return path


def finish(fig, path: str | Path, title: str | None = None) -> Path:
    """A figure's last steps, the same for every plot: its title, the layout, the file."""
    if title is not None:
        fig.suptitle(title)
    fig.tight_layout()
    return save(fig, path)


def grid(n: int, width: float = 5.0, height: float = 3.6, cols: int = 2):
    cols = min(n, cols)
    rows = math.ceil(n / cols)
    fig, axes = pyplot().subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    return fig, list(axes.flat)


def spread(value: float, samples: list[float]) -> tuple[float, float]:
    """(below, above) `value` for an error bar: the range of the per-step samples. A headline
    (images over elapsed time) is a mean of the per-step rates, so it lies inside their range;
    without samples the bar has no spread."""
    finite = [s for s in samples if s == s]
    if not finite or value != value:
        return 0.0, 0.0
    return max(0.0, value - min(finite)), max(0.0, max(finite) - value)
