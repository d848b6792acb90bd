"""CosmoFlow data: synthetic universes written in the reference's two layouts, and readers.

- HDF5, as the raw release: one file per universe with `full` (S, S, S, 4) int16
  particle counts (four redshifts) and `unitPar` (4,) float32 targets; a universe
  is split into (S / D)^3 sub-volumes of D^3, all with the universe's targets.
- TFRecord, as the prepared release: one file per sub-volume holding one
  tf.train.Example with `x` (raw int16 bytes of a D x D x D x 4 volume, channels
  last) and `y` (float32[4]).

The synthetic universes are learnable: the counts in channel c are Poisson draws
with mean exp(LOG_MEAN + y_c + field_amplitude x g), g a smooth random field shared
by the channels (off by default), so after the reference log(x + 1) transform the
targets can be read off the volume. Low counts (mostly 0-5 per voxel, as in sparse
particle data) keep the inputs small: with large counts the common offset of
log(x + 1) made SGD on the reference network much slower to converge (measured).
Targets are drawn in [-1, 1] (the network's output is 1.2 tanh).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from exabench.data import split_folders
from exabench.data.tfrecord import CorruptFileError, encode_example, list_files, read_examples, write_tfrecords

CHANNELS = 4
TARGETS = 4
SPLITS = ("train", "validation")
LOG_MEAN = 0.5


def smooth_field(rng: np.random.Generator, size: int, scale: float = 4.0) -> np.ndarray:
    """A Gaussian random field (unit variance) with structure on about `scale` voxels."""
    noise = rng.standard_normal((size, size, size))
    k = np.fft.fftfreq(size)
    kz = np.fft.rfftfreq(size)
    k2 = k[:, None, None] ** 2 + k[None, :, None] ** 2 + kz[None, None, :] ** 2
    field = np.fft.irfftn(np.fft.rfftn(noise) * np.exp(-k2 * (np.pi * scale) ** 2), s=noise.shape,
                          axes=(0, 1, 2))
    return (field - field.mean()) / (field.std() + 1e-12)


def synthetic_universe(rng: np.random.Generator, size: int, target: np.ndarray,
                       field_amplitude: float = 0.0) -> np.ndarray:
    """(size, size, size, 4) int16 Poisson counts, channel c with log-mean LOG_MEAN + target[c]."""
    g = smooth_field(rng, size) if field_amplitude else np.zeros((size, size, size))
    lam = np.exp(LOG_MEAN + target[None, None, None, :] + field_amplitude * g[..., None])
    return np.minimum(rng.poisson(lam), np.iinfo(np.int16).max).astype(np.int16)


def sub_volumes(universe: np.ndarray, size: int):
    """Yield the (S / size)^3 sub-volumes of a universe, in C order of their corners."""
    n = universe.shape[0] // size
    for i in range(n):
        for j in range(n):
            for k in range(n):
                yield universe[i * size:(i + 1) * size, j * size:(j + 1) * size, k * size:(k + 1) * size]


def generate(root, n_train: int, n_validation: int, sample_size: int, split: int = 1,
             formats=("tfrecord", "hdf5"), seed: int = 0, gzip: bool = False,
             field_amplitude: float = 0.0) -> dict:
    """Write a synthetic set under root/{train,validation}; returns sample counts per split.

    `n_train`/`n_validation` count sub-volumes (samples); each universe gives split^3 of them
    (split 1 by default: a universe per sample, so a small set still has many distinct targets).
    """
    import h5py

    per_universe = split ** 3
    rng = np.random.default_rng(seed)
    counts = {}
    for name, n, out in split_folders(root, SPLITS, (n_train, n_validation)):
        universes = -(-n // per_universe)
        written = 0
        for u in range(universes):
            target = rng.uniform(-1.0, 1.0, TARGETS).astype(np.float32)
            universe = synthetic_universe(rng, sample_size * split, target, field_amplitude)
            if "hdf5" in formats:
                with h5py.File(out / f"univ_{u:05d}.h5", "w") as f:
                    f.create_dataset("full", data=universe)
                    f.create_dataset("unitPar", data=target)
            if "tfrecord" in formats:
                for s, vol in enumerate(sub_volumes(universe, sample_size)):
                    if written + s >= n:
                        break
                    ext = ".tfrecord.gz" if gzip else ".tfrecord"
                    rec = encode_example({"x": np.ascontiguousarray(vol).tobytes(), "y": target})
                    write_tfrecords(out / f"univ_{u:05d}_{s:03d}{ext}", [rec])
            written += per_universe
        counts[name] = min(n, universes * per_universe) if "tfrecord" in formats else universes * per_universe
    return counts


def decode_sample(example: dict, sample_size: int, path) -> tuple[np.ndarray, np.ndarray]:
    """(x int16 (D, D, D, 4), y float32 (4,)) from a decoded example; wrong sizes name the file."""
    want = sample_size ** 3 * CHANNELS * 2
    x, y = example.get("x"), example.get("y")
    if not isinstance(x, bytes) or len(x) != want:
        raise CorruptFileError(path, f"feature 'x' has {len(x) if isinstance(x, bytes) else x!r} bytes, "
                                     f"want {want} ({sample_size}^3 x {CHANNELS} int16)")
    if y is None or y.shape != (TARGETS,):
        raise CorruptFileError(path, f"feature 'y' is {y!r}, want float32[{TARGETS}]")
    return np.frombuffer(x, dtype="<i2").reshape(sample_size, sample_size, sample_size, CHANNELS), y


def log_transform(x: np.ndarray) -> np.ndarray:
    """The reference's apply_log: log(x + 1) in float32, channels first for the device."""
    return np.log1p(x.astype(np.float32)).transpose(3, 0, 1, 2).copy()


@dataclass(frozen=True)
class SampleRef:
    path: str
    index: int  # record index (TFRecord) or sub-volume index (HDF5)


def list_samples(directory, data_format: str, sample_size: int) -> list[SampleRef]:
    """Every sample of one split, in a stable order."""
    directory = Path(directory)
    if data_format == "tfrecord":
        files = list_files(directory)
        refs = [SampleRef(str(p), 0) for p in files]  # the prepared layout: one sample per file
    elif data_format == "hdf5":
        import h5py
        refs = []
        for p in sorted(directory.glob("*.h5")):
            try:
                with h5py.File(p, "r") as f:
                    n = f["full"].shape[0] // sample_size
            except (OSError, KeyError) as exc:
                raise CorruptFileError(p, f"not a CosmoFlow universe file (want dataset 'full'): {exc}") from exc
            refs += [SampleRef(str(p), i) for i in range(n ** 3)]
    else:
        raise ValueError(f"data_format {data_format!r}: valid: tfrecord, hdf5")
    if not refs:
        raise FileNotFoundError(f"{directory}: no {data_format} CosmoFlow samples")
    return refs


def load_sample(ref: SampleRef, data_format: str, sample_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(x int16 (D, D, D, 4), y float32 (4,)) of one sample; any damage raises CorruptFileError(path)."""
    if data_format == "tfrecord":
        for i, example in enumerate(read_examples(ref.path)):
            if i == ref.index:
                return decode_sample(example, sample_size, ref.path)
        raise CorruptFileError(ref.path, f"has no record {ref.index}")
    import h5py
    try:
        with h5py.File(ref.path, "r") as f:
            n = f["full"].shape[0] // sample_size
            i, j, k = ref.index // (n * n), ref.index // n % n, ref.index % n
            d = sample_size
            x = f["full"][i * d:(i + 1) * d, j * d:(j + 1) * d, k * d:(k + 1) * d, :]
            y = np.asarray(f["unitPar"][...], dtype=np.float32)
    except (OSError, KeyError, ValueError) as exc:
        raise CorruptFileError(ref.path, f"cannot read sub-volume {ref.index}: {exc}") from exc
    return x, y
