"""STREAM triad (McCalpin): a = b + s c over arrays larger than the caches, in GB/s.

Every rank times its own arrays (one GPU per rank, or its share of the CPU cores). The triad is
one fused pass, `torch.add(b, c, alpha=s, out=a)`: two arrays read, one written, so STREAM's
count of 3 x 8 bytes per element (float64; the write-allocate traffic is not counted, as in
STREAM). Samples of back-to-back triads (the device synchronised before each clock read); the
figure is the median sample on the slowest rank. With `window_s` the samples go on until they span
that many seconds, so that a fault that comes and goes shows in them (exabench.analysis.node_stability).
The sanity check compares a with b + s c computed once more, element by element, after the timing.
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Check, Metric, Outcome, param
from exabench.benchmarks.timing import measure, slowest, torch_device

ELEMENT_BYTES = 8      # float64, as STREAM
ARRAYS_MOVED = 3       # triad: read b and c, write a


@dataclass
class StreamParams:
    elements: int = param(20_000_000, "elements per array (each float64); STREAM asks for 4x the last-level "
                                      "cache over the three arrays", minimum=1024)
    scalar: float = param(3.0, "the triad's scalar s")
    warmup: int = param(2, "untimed triads before timing", minimum=0)
    samples: int = param(10, "timed samples (each of enough triads to last ~10 ms)", minimum=1)
    window_s: float = param(0.0, "keep sampling until the samples span this many seconds (a node fault that "
                                 "comes and goes shows in them); 0: `samples` only", minimum=0.0)


@register
class Stream(MicroBenchmark):
    name = "stream"
    headline = "triad_gbs"
    metric_names = ("triad_gbs", "triad_time_s")
    framework = "pytorch"
    Params = StreamParams
    communication = {"pattern": "none"}
    presets = {
        "tiny": {"elements": 2_000_000, "warmup": 2, "samples": 7},
        "small": {"elements": 20_000_000, "warmup": 2, "samples": 10},
        "full": {"elements": 80_000_000, "warmup": 3, "samples": 20},
    }

    def run(self, p: StreamParams, ctx) -> Outcome:
        dev = torch_device(ctx)
        torch = dev.torch
        b = torch.arange(p.elements, dtype=torch.float64, device=dev.device)
        c = torch.full((p.elements,), 0.5, dtype=torch.float64, device=dev.device)
        a = torch.empty_like(b)
        triad = functools.partial(torch.add, b, c, alpha=p.scalar, out=a)
        times = slowest(ctx, measure(triad, dev, p.warmup, p.samples, p.window_s))
        moved = ARRAYS_MOVED * ELEMENT_BYTES * p.elements
        rates = [moved / t / 1e9 for t in times]
        error = float((a - (b + p.scalar * c)).abs().max())
        metrics = {
            "triad_gbs": Metric(statistics.median(rates), "GB/s", rates, "fp64",
                                description="STREAM triad a = b + s c: 24 bytes per element / median time, "
                                            "slowest rank (samples: one per timed sample)"),
            "triad_time_s": Metric(statistics.median(times), "s", list(times), "fp64", higher_is_better=False,
                                   description="median seconds per triad, slowest rank"),
        }
        check = Check("triad result", error == 0.0, f"max |a - (b + s c)| = {error:g} over {p.elements} elements")
        return Outcome(metrics, [check], {**dev.describe(), "kernel": "stream-triad", "elements": p.elements,
                                          "bytes_per_triad": moved})
