"""DeepCAM climate data: synthetic samples in the reference layout, and the reader.

One HDF5 file per sample with `climate/data` (H, W, 16) float32 and
`climate/labels_0` (H, W) in {0: background, 1: tropical cyclone, 2: atmospheric
river}; `stats.h5` beside the splits holds `climate/minval` and `climate/maxval`
(per channel), used for min-max normalisation as the reference does:
(x - min) / (max - min), then channels first.

The synthetic samples are learnable: cyclones are discs where channel 0 dips and
channel 1 peaks, rivers are long tilted bands where channel 2 rises, over smooth
noise on all 16 channels (different offsets and scales per channel, so the
normalisation matters).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exabench.data import split_folders
from exabench.data.tfrecord import CorruptFileError

CHANNELS = 16
CLASSES = 3
SPLITS = ("train", "validation")


def _smooth_noise(rng, h: int, w: int, scale: float) -> np.ndarray:
    ky, kx = np.fft.fftfreq(h)[:, None], np.fft.rfftfreq(w)[None, :]
    f = np.fft.irfft2(np.fft.rfft2(rng.standard_normal((h, w))) * np.exp(-(ky ** 2 + kx ** 2) * (np.pi * scale) ** 2),
                      s=(h, w), axes=(0, 1))
    return (f - f.mean()) / (f.std() + 1e-12)


def synthetic_sample(rng: np.random.Generator, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    """(data (h, w, 16) float32, labels (h, w) int32) with 0-2 cyclones and 0-2 rivers."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    labels = np.zeros((h, w), np.int32)
    scale = min(h, w)
    for _ in range(rng.integers(0, 3)):  # atmospheric rivers: bands of width ~ scale/10
        angle = rng.uniform(-0.6, 0.6)
        y0 = rng.uniform(0.2, 0.8) * h
        dist = np.abs((yy - y0) * np.cos(angle) - (xx - w / 2) * np.sin(angle))
        x_from, x_to = sorted(rng.uniform(0, w, 2))
        labels[(dist < scale * rng.uniform(0.06, 0.1)) & (xx >= min(x_from, w * 0.3)) & (xx <= max(x_to, w * 0.7))] = 2
    for _ in range(rng.integers(0, 3)):  # tropical cyclones: discs of radius ~ scale/8
        cy, cx, r = rng.uniform(0.15, 0.85) * h, rng.uniform(0.1, 0.9) * w, scale * rng.uniform(0.09, 0.14)
        labels[(yy - cy) ** 2 + (xx - cx) ** 2 < r * r] = 1
    data = np.empty((h, w, CHANNELS), np.float32)
    for c in range(CHANNELS):
        data[..., c] = 0.5 * _smooth_noise(rng, h, w, 6.0) + 0.2 * rng.standard_normal((h, w))
    data[..., 0] -= 3.0 * (labels == 1)   # pressure-like low at cyclones
    data[..., 1] += 3.0 * (labels == 1)   # wind-like high
    data[..., 2] += 3.0 * (labels == 2)   # water-vapour-like high in rivers
    offsets = np.linspace(-50, 1e3, CHANNELS, dtype=np.float32)  # physical units differ per channel
    scales = np.geomspace(0.01, 100, CHANNELS).astype(np.float32)
    return data * scales + offsets, labels


def generate(root, n_train: int, n_validation: int, height: int, width: int, seed: int = 0) -> dict:
    """Write root/{train,validation}/data-NNNNN.h5 and root/stats.h5; returns sample counts."""
    import h5py

    rng = np.random.default_rng(seed)
    lo = np.full(CHANNELS, np.inf, np.float64)
    hi = np.full(CHANNELS, -np.inf, np.float64)
    counts = {}
    for name, n, out in split_folders(root, SPLITS, (n_train, n_validation)):
        for i in range(n):
            data, labels = synthetic_sample(rng, height, width)
            if name == "train":  # statistics from the training split only, as the reference's
                lo = np.minimum(lo, data.min(axis=(0, 1)))
                hi = np.maximum(hi, data.max(axis=(0, 1)))
            with h5py.File(out / f"data-{i:05d}.h5", "w") as f:
                f.create_dataset("climate/data", data=data)
                f.create_dataset("climate/labels_0", data=labels)
        counts[name] = n
    with h5py.File(Path(root) / "stats.h5", "w") as f:
        f.create_dataset("climate/minval", data=lo.astype(np.float32))
        f.create_dataset("climate/maxval", data=hi.astype(np.float32))
    return counts


def read_stats(path) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) per channel: x_normalised = scale * (x - shift)."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            lo = np.asarray(f["climate/minval"][...], np.float32)
            hi = np.asarray(f["climate/maxval"][...], np.float32)
    except (OSError, KeyError) as exc:
        raise CorruptFileError(path, f"not a DeepCAM stats file (want climate/minval, climate/maxval): {exc}") \
            from exc
    return lo, 1.0 / (hi - lo)


def list_samples(directory) -> list[str]:
    files = sorted(str(p) for p in Path(directory).glob("*.h5"))
    if not files:
        raise FileNotFoundError(f"{directory}: no DeepCAM *.h5 samples")
    return files


def load_sample(path, shift: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(data (16, H, W) float32 normalised, labels (H, W) int64); damage raises CorruptFileError(path)."""
    import h5py
    try:
        with h5py.File(path, "r") as f:
            data = np.asarray(f["climate/data"][...], np.float32)
            labels = np.asarray(f["climate/labels_0"][...]).astype(np.int64)
    except (OSError, KeyError, ValueError) as exc:
        raise CorruptFileError(path, f"cannot read climate/data and climate/labels_0: {exc}") from exc
    if data.ndim != 3 or data.shape[-1] != shift.shape[0] or labels.shape != data.shape[:2]:
        raise CorruptFileError(path, f"shapes data {data.shape}, labels {labels.shape}; want (H, W, "
                                     f"{shift.shape[0]}) and (H, W)")
    return np.ascontiguousarray((scale * (data - shift)).transpose(2, 0, 1)), labels
