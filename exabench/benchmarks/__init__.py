"""The benchmark registry: benchmarks are found by name."""

from __future__ import annotations

from ..errors import ConfigError
from .base import Benchmark

REGISTRY: dict[str, type[Benchmark]] = {}


def register(cls: type[Benchmark]) -> type[Benchmark]:
    if cls.name in REGISTRY:
        raise ValueError(f"benchmark {cls.name!r} registered twice")
    REGISTRY[cls.name] = cls
    return cls


def get(name: str, file: str = "(config)", key: str = "name") -> type[Benchmark]:
    if name not in REGISTRY:
        raise ConfigError(file, key, name, "one of " + ", ".join(sorted(REGISTRY)), "is not a known benchmark")
    return REGISTRY[name]


# Importing the modules registers them; they import heavy frameworks lazily, in run().
from . import (allreduce, candle, conv, cosmoflow, deepcam, gemm, image_classification,  # noqa: E402,F401
               image_classification_keras, io_read, kmeans, pca, rnn, svm)
