"""What every micro-benchmark shares: the suite it is reported under (CORAL-2's deep-learning
micro-benchmarks). Each workload's other facts stay in its own module."""

from __future__ import annotations

from typing import ClassVar

from exabench.benchmarks.base import Benchmark


class MicroBenchmark(Benchmark):
    """A micro-benchmark: set `name`, `headline`, `framework`, `Params`, `presets` and `run`."""

    suite: ClassVar[str] = "coral2-dl-micro"
