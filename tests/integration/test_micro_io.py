"""I/O micro-benchmark: the generator writes valid JPEG, HDF5 and TFRecord data sets, reads
from the 'PFS' path and the staged local copy agree, and 2 ranks share the files out."""

from __future__ import annotations

import importlib.util
import os
import struct
import subprocess
import sys

import h5py
import numpy as np
import pytest
from helpers_micro import metric, run_in_process, run_launched
from PIL import Image

from exabench.benchmarks.micro.io_read import (crc32c_rows, generate, masked_crc, read_pass, read_tfrecord,
                                               verify_tfrecord, write_tfrecord)


def test_crc32c_known_value():
    rows = np.frombuffer(b"123456789" * 2, dtype=np.uint8).reshape(2, 9)
    assert crc32c_rows(rows).tolist() == [0xE3069283, 0xE3069283]
    assert crc32c_rows(np.zeros((1, 32), dtype=np.uint8))[0] == 0x8A9136AA  # RFC 3720 B.4 test vector


def test_tfrecord_round_trip_and_corruption_detected(tmp_path):
    rows = np.random.default_rng(0).integers(0, 256, (5, 100), dtype=np.uint8)
    path = tmp_path / "x.tfrecord"
    write_tfrecord(path, rows)
    assert [bytes(r) for r in read_tfrecord(path)] == [r.tobytes() for r in rows]
    assert path.stat().st_size == 5 * (8 + 4 + 100 + 4)
    with open(path, "rb") as f:
        header = f.read(12)
    assert struct.unpack("<I", header[8:])[0] == masked_crc(crc32c_rows(np.frombuffer(header[:8], np.uint8)[None]))[0]
    assert verify_tfrecord(path)
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # flip a payload byte of the first record
    path.write_bytes(bytes(data))
    assert not verify_tfrecord(path)


def test_generated_jpeg_and_hdf5_are_readable(tmp_path):
    jpeg = generate(tmp_path / "j", "jpeg", 3, 1, 0, 24, seed=1)
    assert len(jpeg["files"]) == 3
    with Image.open(tmp_path / "j" / jpeg["files"][0]) as img:
        assert img.format == "JPEG" and img.size == (24, 24)
    h5 = generate(tmp_path / "h", "hdf5", 10, 3, 16, 0, seed=1)
    with h5py.File(tmp_path / "h" / h5["files"][0]) as h:
        assert h["samples"].shape == (4, 16) and h["samples"].dtype == np.uint8
    assert read_pass("hdf5", [tmp_path / "h" / f for f in h5["files"]])[:2] == (10, 160)
    again = generate(tmp_path / "h", "hdf5", 10, 3, 16, 0, seed=2)  # complete data set: reused, not rewritten
    assert again == h5


@pytest.mark.parametrize("fmt", ["jpeg", "hdf5", "tfrecord"])
def test_read_pfs_vs_staged_local(tmp_path, fmt):
    local = tmp_path / "local"
    rec = run_in_process(tmp_path, "io_read", {"format": fmt, "samples": 12, "files": 3, "sample_bytes": 1000,
                                               "image_size": 16, "local_dir": str(local), "passes": 2})
    assert rec["status"] == "ok", rec["error"]
    assert all(c["passed"] for c in rec["checks"])
    for name in ("read_pfs", "read_local", "stage_time", "stage_bw", "samples_pfs", "local_speedup"):
        assert metric(rec, name) > 0
    assert rec["metrics"]["read_pfs"]["unit"] == "MB/s" and len(rec["metrics"]["read_local"]["samples"]) == 2
    if fmt != "jpeg":
        assert rec["info"]["payload_bytes"] == 12 * 1000
    assert list(local.iterdir()) == []  # the staged copy is removed afterwards


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_two_ranks_share_the_files(tmp_path):
    rec = run_launched(tmp_path, "io_read", {"format": "tfrecord", "samples": 20, "files": 4, "sample_bytes": 500,
                                             "local_dir": str(tmp_path / "local")}, ranks=2)
    assert rec["status"] == "ok", rec["error"]
    assert rec["checks"][0]["detail"].startswith("20 of 20")


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")
def test_tensorflow_reads_our_tfrecords(tmp_path):
    rows = np.random.default_rng(3).integers(0, 256, (3, 64), dtype=np.uint8)
    write_tfrecord(tmp_path / "x.tfrecord", rows)
    # TensorFlow in a child process: loaded beside torch in the pytest process it can crash later tests.
    script = ("import sys, tensorflow as tf\n"
              "for r in tf.data.TFRecordDataset(sys.argv[1]):\n"  # TF checks the CRCs while reading
              "    sys.stdout.write(r.numpy().hex() + '\\n')\n")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "x.tfrecord")], capture_output=True,
                         text=True, timeout=240, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [r.tobytes().hex() for r in rows]
