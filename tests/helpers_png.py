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


def shows_data(img: np.ndarray, min_pixels: int = 500) -> bool:
    """Data is drawn, not a blank canvas or a placeholder that only says something: at least
    `min_pixels` pixels in colour (a bar, a line, a marker in one of Matplotlib's C0..C9; axes,
    text and grids are black, white or grey)."""
    return not_blank(img) and int(coloured(img).sum()) >= min_pixels


def coloured(img: np.ndarray, saturation: float = 0.25) -> np.ndarray:
    """Mask of the pixels that are not black, white or grey (their channels differ by `saturation`)."""
    return (img.max(axis=2) - img.min(axis=2)) > saturation
