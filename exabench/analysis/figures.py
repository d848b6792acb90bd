"""What every picture shares: figures without pyplot, the grid of panels, byte-stable PNGs, and
`NothingToDraw`, which a plot raises instead of drawing a placeholder: the report's index then
names the picture and why it was not drawn, in one line.

Pictures are drawn in threads: Snakemake runs every `run:` job of the local profile, and each
cluster executor's local rules, in threads of its own process (the plots, the history pictures, the
archive's trial rebuild, side by side). So no picture uses pyplot, whose current figure and figure
list every thread shares, and laying out and rendering (text measured with shared fonts) take
`RENDERING`, one picture at a time; matplotlib is not thread-safe."""

from __future__ import annotations

import math
import threading
from pathlib import Path

PNG_META = {"Software": None}  # no version string: the bytes depend on the data only
RENDERING = threading.Lock()


class NothingToDraw(Exception):
    """The records do not support this picture; the message says why (one line, for the index)."""


def figure(figsize: tuple[float, float]):
    """A figure of its own (matplotlib.figure.Figure, in no pyplot list), imported when a plot is drawn:
    every Snakemake job loads the rule files and with them the plots, and most jobs draw nothing
    (matplotlib costs 0.3 s a job)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize)


def save(fig, path: str | Path, dpi: int = 100, layout: bool = False) -> Path:
    """The PNG (Agg), its layout first where asked: both under RENDERING."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with RENDERING:
        if layout:
            fig.tight_layout()
        fig.savefig(path, dpi=dpi, metadata=PNG_META)
    return path


def finish(fig, path: str | Path, title: str | None = None) -> Path:
    """A figure's last steps, the same for every plot: its title, the layout, the file."""
    if title is not None:
        fig.suptitle(title)
    return save(fig, path, layout=True)


def grid(n: int, width: float = 5.0, height: float = 3.6, cols: int = 2):
    cols = min(n, cols)
    rows = math.ceil(n / cols)
    fig = figure((width * cols, height * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
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
