"""What a written plot shows, read back from its pixels: its size, that it is not blank, and where a
series of a given colour was drawn (a PNG's signature says none of this)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def pixels(path: str | Path) -> np.ndarray:
    """The image as rows x columns x RGB floats in [0, 1]."""
    from matplotlib import image
    return image.imread(str(path))[..., :3]


def not_blank(img: np.ndarray) -> bool:
    """Something is drawn: the pixels are not all one shade (a blank canvas has no spread)."""
    return float(img.std()) > 0.05


def drawn_in(img: np.ndarray, colour: str, tolerance: float = 0.02) -> np.ndarray:
    """(row, column) of every pixel of `colour` (a Matplotlib colour: "C0", "#1f77b4"), within
    `tolerance` on each channel."""
    from matplotlib import colors
    rgb = np.array(colors.to_rgb(colour))
    return np.argwhere(np.abs(img - rgb).max(axis=2) < tolerance)
