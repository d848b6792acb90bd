"""TFRecord files of tf.train.Example records, read and written without TensorFlow.

The framing is TensorFlow's: per record a little-endian uint64 length, the masked
CRC-32C of those 8 bytes, the payload, and the masked CRC-32C of the payload. The
payload is a protobuf `tf.train.Example`; only the subset the MLPerf-HPC data sets
use is encoded (bytes, float and int64 lists). Files may be gzip-compressed, as the
CosmoFlow v1.0 release is. CRC-32C comes from google-crc32c (C) when installed, else
from a table in pure Python (correct, but about 1000x slower).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from exabench.errors import ExabenchError


class CorruptFileError(ExabenchError):
    """A data file that cannot be read as its format says; names the file and where it broke."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        super().__init__(f"{path}: {problem}")


# ---- CRC-32C (Castagnoli), masked as TFRecord wants -------------------------------------
def crc32c_table() -> list[int]:
    """CRC-32C's byte-at-a-time lookup table (reflected polynomial 0x82F63B78)."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


try:
    import google_crc32c as _gcrc

    def crc32c(data: bytes) -> int:
        return _gcrc.value(bytes(data))
except ImportError:  # pragma: no cover - exercised only where the C package is missing
    _TABLE = crc32c_table()

    def crc32c(data: bytes) -> int:
        crc = 0xFFFFFFFF
        for b in bytes(data):
            crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- framing ---------------------------------------------------------------------------
def _open(path, mode: str, compression: str | None):
    if compression is None and str(path).endswith(".gz"):
        compression = "gzip"
    return gzip.open(path, mode) if compression == "gzip" else open(path, mode)


def write_tfrecords(path, records: Iterable[bytes], compression: str | None = None) -> int:
    """Write `records` (serialized protobufs) to `path`; gzip if asked or named *.gz. Returns the count."""
    n = 0
    with _open(path, "wb", compression) as f:
        for rec in records:
            header = struct.pack("<Q", len(rec))
            f.write(header + struct.pack("<I", masked_crc(header)) + rec + struct.pack("<I", masked_crc(rec)))
            n += 1
    return n


def read_tfrecords(path, verify: bool = True, compression: str | None = None) -> Iterator[bytes]:
    """Yield the payload of each record; a short read or a CRC mismatch raises CorruptFileError(path)."""
    offset = 0
    try:
        with _open(path, "rb", compression) as f:
            while True:
                header = f.read(12)
                if not header:
                    return
                if len(header) < 12:
                    raise CorruptFileError(path, f"truncated record header at byte {offset} "
                                                 f"({len(header)} of 12 bytes)")
                length, hcrc = struct.unpack("<QI", header)
                if verify and masked_crc(header[:8]) != hcrc:
                    raise CorruptFileError(path, f"length CRC mismatch at byte {offset}")
                body = f.read(length + 4)
                if len(body) < length + 4:
                    raise CorruptFileError(path, f"truncated record at byte {offset}: {len(body)} of "
                                                 f"{length + 4} bytes")
                data = body[:length]
                if verify and masked_crc(data) != struct.unpack("<I", body[length:])[0]:
                    raise CorruptFileError(path, f"data CRC mismatch in record at byte {offset}")
                offset += 12 + length + 4
                yield data
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise CorruptFileError(path, f"unreadable after byte {offset}: {exc}") from exc


# ---- tf.train.Example (protobuf wire format, the subset needed) -------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:  # length-delimited (wire type 2)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: dict) -> bytes:
    """features: name -> bytes (BytesList), float array/list (FloatList) or int list (Int64List)."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, (bytes, bytearray)):
            feature = _field(1, _field(1, bytes(value)))
        else:
            arr = np.asarray(value)
            if arr.dtype.kind == "f":
                feature = _field(2, _field(1, arr.astype("<f4").tobytes()))
            elif arr.dtype.kind in "iu":
                feature = _field(3, _field(1, b"".join(_varint(int(v)) for v in arr.ravel())))
            else:
                raise TypeError(f"feature {name!r}: unsupported type {arr.dtype}")
        entries += _field(1, _field(1, name.encode()) + _field(2, feature))
    return _field(1, entries)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one message: value is bytes for type 2, int otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            if pos + n > len(buf):
                raise ValueError("length-delimited field runs past the end")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _decode_feature(buf: bytes):
    for kind, _, payload in _fields(buf):
        if kind == 1:
            return b"".join(v for n, _, v in _fields(payload) if n == 1)
        if kind == 2:  # packed (wire 2) or one-by-one (wire 5) floats
            return np.frombuffer(b"".join(v for n, _, v in _fields(payload) if n == 1), dtype="<f4").copy()
        if kind == 3:
            vals = []
            for n, wire, v in _fields(payload):
                if n != 1:
                    continue
                if wire == 2:
                    pos = 0
                    while pos < len(v):
                        x, pos = _read_varint(v, pos)
                        vals.append(x)
                else:
                    vals.append(v)
            return np.array([x - (1 << 64) if x >= 1 << 63 else x for x in vals], dtype=np.int64)
    return None


def decode_example(data: bytes) -> dict:
    """The features of a serialized tf.train.Example: name -> bytes or numpy array."""
    out = {}
    for n, _, features in _fields(data):
        if n != 1:
            continue
        for m, _, entry in _fields(features):
            if m != 1:
                continue
            key = value = None
            for k, _, v in _fields(entry):
                if k == 1:
                    key = v.decode()
                elif k == 2:
                    value = _decode_feature(v)
            out[key] = value
    return out


def read_examples(path, verify: bool = True) -> Iterator[dict]:
    """Decoded examples of one file; a malformed protobuf raises CorruptFileError(path)."""
    for i, rec in enumerate(read_tfrecords(path, verify)):
        try:
            yield decode_example(rec)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptFileError(path, f"record {i} is not a tf.train.Example: {exc}") from exc


def list_files(directory, patterns=("*.tfrecord", "*.tfrecord.gz")) -> list[Path]:
    return sorted(p for pat in patterns for p in Path(directory).glob(pat))
