"""Data-set read throughput: parallel file system versus staged node-local copy.

Staging time is reported too, for the DL formats in use: a JPEG folder, HDF5 files
and TFRecord files.

A small generator writes the data set once (untimed, reused by later runs) under
`pfs_dir`. Each rank reads its shard (files i, i+ranks, ...) the way a loader
would: a JPEG file at a time, an HDF5 row at a time, a TFRecord record at a time
(framing parsed). Before every read pass the files' pages are dropped from the
page cache with posix_fadvise(DONTNEED) so a pass reads the device, not memory
(a RAM-backed local directory such as /dev/shm stays in memory: the record names
each directory's file system). A pass's time is the slowest rank's. The sanity
check: every sample read, and the bytes read from the staged copy checksum equal
to those read from the PFS.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Check, Metric, Outcome, param
from exabench.data.tfrecord import crc32c_table

FORMATS = ("jpeg", "hdf5", "tfrecord")


# -- TFRecord framing: length, masked CRC-32C of the length, data, masked CRC-32C of the data ------------------
_CRC32C = np.array(crc32c_table(), dtype=np.uint32)


def crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-32C (Castagnoli) of every row of a uint8 array, vectorised across rows."""
    crc = np.full(rows.shape[0], 0xFFFFFFFF, dtype=np.uint32)
    for j in range(rows.shape[1]):
        crc = _CRC32C[(crc ^ rows[:, j]) & 0xFF] ^ (crc >> np.uint32(8))
    return crc ^ np.uint32(0xFFFFFFFF)


def masked_crc(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF).astype(np.uint32)


def write_tfrecord(path: Path, payloads: np.ndarray) -> None:
    """One TFRecord file whose records are the rows of `payloads` (raw bytes, as CosmoFlow's `x`)."""
    n, length = payloads.shape
    len_bytes = np.frombuffer(struct.pack("<Q", length) * n, dtype=np.uint8).reshape(n, 8)
    len_crc, data_crc = masked_crc(crc32c_rows(len_bytes)), masked_crc(crc32c_rows(payloads))
    with open(path, "wb") as f:
        for i in range(n):
            f.write(len_bytes[i].tobytes() + struct.pack("<I", len_crc[i]) + payloads[i].tobytes()
                    + struct.pack("<I", data_crc[i]))


def read_tfrecord(path: Path):
    """Yields each record's data (framing parsed; CRCs are checked separately, untimed)."""
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            data = f.read(length + 4)
            if len(data) != length + 4:
                raise ValueError(f"{path}: truncated record")
            yield data[:length]


def verify_tfrecord(path: Path, limit: int = 4) -> bool:
    """The data CRCs of the first `limit` records are right."""
    with open(path, "rb") as f:
        for _ in range(limit):
            header = f.read(12)
            if not header:
                return True
            (length,) = struct.unpack("<Q", header[:8])
            body = f.read(length + 4)
            data = np.frombuffer(body[:length], dtype=np.uint8)[None, :]
            if int(masked_crc(crc32c_rows(data))[0]) != struct.unpack("<I", body[length:])[0]:
                return False
    return True


# -- the generator --------------------------------------------------------------------------------------------
def generate(root: Path, fmt: str, samples: int, files: int, sample_bytes: int, image_size: int, seed: int) -> dict:
    """Write the data set under root (skipped when a complete one is there); returns its description."""
    marker = root / "dataset.json"
    if marker.exists():
        return json.loads(marker.read_text())
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    if fmt == "jpeg":
        from PIL import Image
        for i in range(samples):
            # Smooth noise: compresses like a photograph rather than like white noise.
            small = rng.integers(0, 256, (image_size // 8 + 1, image_size // 8 + 1, 3), dtype=np.uint8)
            img = Image.fromarray(small).resize((image_size, image_size), Image.BILINEAR)
            img.save(root / f"img{i:07d}.jpg", quality=90)
    else:
        per_file = np.array_split(np.arange(samples), files)
        for f, idx in enumerate(per_file):
            rows = rng.integers(0, 256, (len(idx), sample_bytes), dtype=np.uint8)
            if fmt == "hdf5":
                import h5py
                with h5py.File(root / f"part{f:05d}.h5", "w") as h:
                    h.create_dataset("samples", data=rows, chunks=(1, sample_bytes))
            else:
                write_tfrecord(root / f"part{f:05d}.tfrecord", rows)
    desc = {"format": fmt, "samples": samples, "files": sorted(p.name for p in root.iterdir() if p != marker)}
    marker.write_text(json.dumps(desc))
    return desc


# -- reading --------------------------------------------------------------------------------------------------
def drop_cache(paths: list[Path]) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_pass(fmt: str, paths: list[Path]) -> tuple[int, int, int]:
    """(samples, payload bytes, checksum) of reading every sample of `paths` once."""
    samples = nbytes = checksum = 0
    for p in paths:
        if fmt == "jpeg":
            data = p.read_bytes()
            if data[:2] != b"\xff\xd8":
                raise ValueError(f"{p}: not a JPEG file (no SOI marker)")
            items = [data]
        elif fmt == "hdf5":
            import h5py
            with h5py.File(p, "r") as h:
                ds = h["samples"]
                items = [ds[i].tobytes() for i in range(ds.shape[0])]
        else:
            items = list(read_tfrecord(p))
        for data in items:
            samples += 1
            nbytes += len(data)
            checksum = (checksum + zlib.crc32(data)) & 0xFFFFFFFF
    return samples, nbytes, checksum


def stage(paths: list[Path], target: Path) -> list[Path]:
    """Copy files to node-local storage, flushed to it (the staging a job script would do)."""
    target.mkdir(parents=True, exist_ok=True)
    out = []
    for p in paths:
        q = target / p.name
        shutil.copyfile(p, q)
        fd = os.open(q, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        out.append(q)
    return out


def filesystem(path: Path) -> str:
    """The file system type of `path` (from /proc/mounts, longest mount point that contains it)."""
    best, kind = "", "unknown"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    except OSError:
        pass
    return kind


@dataclass
class IoReadParams:
    format: str = param("tfrecord", "data-set format: jpeg (a folder of files), hdf5, tfrecord", choices=FORMATS)
    samples: int = param(4096, "samples in the data set (all ranks together)", minimum=1)
    files: int = param(16, "files of an HDF5 or TFRecord data set (ranks share them out)", minimum=1)
    sample_bytes: int = param(131072, "bytes per HDF5 or TFRecord sample", minimum=1)
    image_size: int = param(224, "JPEG side in pixels", minimum=8)
    pfs_dir: str = param("", "where the data set lives (the parallel file system); empty: results/<site>/io-data")
    local_dir: str = param("", "node-local storage to stage into; empty: $TMPDIR or /tmp")
    passes: int = param(3, "timed read passes from each location (each a sample)", minimum=1)
    drop_cache: bool = param(True, "drop the files from the page cache before every pass")
    seed: int = param(3, "seed of the generated data")


@register
class IoRead(MicroBenchmark):
    name = "io_read"
    headline = "read_pfs"
    metric_names = ("read_pfs", "read_local", "samples_pfs", "samples_local", "stage_time", "stage_bw",
                    "local_speedup")
    framework = "python-h5py"
    Params = IoReadParams
    id_params = ("format",)
    presets = {
        "tiny": {"samples": 64, "files": 4, "sample_bytes": 8192, "image_size": 32, "passes": 2},
        "small": {"samples": 1024, "files": 8, "sample_bytes": 65536, "image_size": 128, "passes": 3},
        "full": {"samples": 16384, "files": 64, "sample_bytes": 131072, "image_size": 224, "passes": 3},
    }

    def run(self, p: IoReadParams, ctx) -> Outcome:
        world, coll = ctx.world, ctx.collectives
        size_tag = p.image_size if p.format == "jpeg" else f"{p.files}x{p.sample_bytes}"
        base = Path(p.pfs_dir) if p.pfs_dir else Path(ctx.run_dir).resolve().parents[1] / "io-data"
        root = base / f"{p.format}-{p.samples}-{size_tag}-seed{p.seed}"
        if world.rank == 0:
            generate(root, p.format, p.samples, p.files, p.sample_bytes, p.image_size, p.seed)
        coll.barrier()
        desc = json.loads((root / "dataset.json").read_text())
        mine = [root / name for name in desc["files"][world.rank::world.size]]
        local_base = Path(p.local_dir or os.environ.get("TMPDIR") or "/tmp")
        local = local_base / f"exabench-io-{os.environ.get('EXABENCH_RUN_ID', 'run')}-{os.getpid()}-r{world.rank}"

        def timed(fn):
            coll.barrier()
            t0 = time.perf_counter()
            out = fn()
            return coll.allreduce(time.perf_counter() - t0, "max"), out

        def passes(paths):
            times, results = [], []
            for _ in range(p.passes):
                if p.drop_cache:
                    drop_cache(paths)
                t, r = timed(lambda: read_pass(p.format, paths))
                times.append(t)
                results.append(r)
            return times, results

        try:
            pfs_times, pfs_results = passes(mine)
            if p.drop_cache:
                drop_cache(mine)
            stage_time, staged = timed(lambda: stage(mine, local))
            local_times, local_results = passes(staged)
            tf_ok = verify_tfrecord(staged[0]) if p.format == "tfrecord" and staged else True
        finally:
            shutil.rmtree(local, ignore_errors=True)
        n_pfs = coll.allreduce(pfs_results[0][0], "sum")
        bytes_total = coll.allreduce(pfs_results[0][1], "sum")
        files_bytes = coll.allreduce(sum(f.stat().st_size for f in mine), "sum")
        same = all(r == pfs_results[0] for r in pfs_results + local_results)
        same = coll.allreduce(int(same), "min") == 1
        tf_ok = coll.allreduce(int(tf_ok), "min") == 1
        mb = bytes_total / 1e6

        def bw(times):
            return [mb / t for t in times]

        metrics = {
            "read_pfs": Metric(statistics.median(bw(pfs_times)), "MB/s", bw(pfs_times),
                               description="payload MB / slowest rank's pass time, from pfs_dir"),
            "read_local": Metric(statistics.median(bw(local_times)), "MB/s", bw(local_times),
                                 description="payload MB / slowest rank's pass time, from the staged copy"),
            "samples_pfs": Metric(n_pfs / statistics.median(pfs_times), "samples/s", [n_pfs / t for t in pfs_times]),
            "samples_local": Metric(n_pfs / statistics.median(local_times), "samples/s",
                                    [n_pfs / t for t in local_times]),
            "stage_time": Metric(stage_time, "s", [stage_time], higher_is_better=False,
                                 description="copy of every rank's shard to local_dir, flushed, slowest rank"),
            "stage_bw": Metric(files_bytes / 1e6 / stage_time, "MB/s", [], description="file MB staged / stage_time"),
        }
        metrics["local_speedup"] = Metric(metrics["read_local"].value / metrics["read_pfs"].value, "x", [],
                                          description="read_local / read_pfs")
        checks = [Check("all_samples_read", n_pfs == p.samples, f"{n_pfs} of {p.samples} samples read per pass"),
                  Check("staged_copy_identical", same, "sample count, bytes and CRC-32 of every pass, both places")]
        if p.format == "tfrecord":
            checks.append(Check("tfrecord_crc", tf_ok, "CRC-32C of the first records of each rank's first file"))
        info = {"dataset": str(root), "local_dir": str(local_base), "pfs_fs": filesystem(root),
                "local_fs": filesystem(local_base), "payload_bytes": bytes_total, "file_bytes": files_bytes,
                "files": len(desc["files"]), "page_cache": "dropped before each pass" if p.drop_cache else "kept"}
        return Outcome(metrics, checks, info)
