"""The benchmark registry: benchmarks are found by name. Each benchmark module registers its
classes with `@register`; importing `exabench.benchmarks` imports every module of the suites."""

from __future__ import annotations

from exabench.benchmarks.base import Benchmark
from exabench.errors import ConfigError

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
