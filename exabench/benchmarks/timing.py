"""What the torch micro-benchmarks share: the device of this rank, precisions by
name, a timed loop that synchronises the device before reading the clock, and the
float64 reference comparison behind their sanity checks."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from exabench.benchmarks.base import Check, Metric
from exabench.energy import timed_region

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")

# Normwise relative error allowed against a float64 result computed from the same
# (already rounded) inputs: accumulation and output rounding only, with margin.
# fp32 ~ 2^-24 x sqrt(K); tf32 multiplies with a 10-bit mantissa; fp16/bf16 round the output.
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 5e-3, "bf16": 3e-2}


@dataclass
class Device:
    """Where this rank computes, and how to wait for it."""

    torch: object
    device: object

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def describe(self) -> dict:
        t = self.torch
        d = {"device": str(self.device)}
        if self.cuda:
            d["gpu_model"] = t.cuda.get_device_name(self.device)
            d["cudnn"] = t.backends.cudnn.version()
        else:
            d["mkldnn"] = bool(t.backends.mkldnn.is_available())
        return d


def torch_device(ctx) -> Device:
    """The GPU of this rank (by local rank) when there is one, else the CPU with the rank's threads."""
    import torch

    from exabench.training import devices
    return Device(torch, devices.torch_device(ctx.world, ctx.threads)[0])


def dtype_of(torch, precision: str):
    """The storage dtype of a precision (tf32 stores fp32; its multiplies are rounded on the device)."""
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


def set_tf32(torch, enabled: bool) -> dict:
    """Allow (or forbid) TF32 in CUDA matmuls and cuDNN convolutions; returns the previous settings.

    TF32 exists only on NVIDIA GPUs (Ampere and later): on a CPU `tf32` runs as fp32, which
    the benchmarks record as `tf32_effective: false`."""
    before = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    return before


def restore_tf32(torch, before: dict) -> None:
    torch.backends.cuda.matmul.allow_tf32 = before["matmul"]
    torch.backends.cudnn.allow_tf32 = before["cudnn"]


def sample_window(samples: int, window_s: float = 0.0, agree: Callable[[bool], bool] | None = None):
    """Sample indices 0, 1, ... until at least `samples` were taken AND `window_s` seconds have passed
    since the first: samples that span a window of seconds show a fault that comes and goes (a link
    throttled 3 s on, 3 s off), which a run shorter than the fault's period may miss or catch whole.
    `agree` turns this rank's "done" into every rank's (a broadcast from rank 0), so that ranks that
    sample together stop together."""
    t0 = time.perf_counter()
    i = 0
    while True:
        done = i >= samples and time.perf_counter() - t0 >= window_s
        if agree is not None:
            done = agree(done)
        if done:
            return
        yield i
        i += 1


def timed_samples(fn: Callable[[], object], dev: Device, warmup: int, samples: int, inner: int = 1,
                  window_s: float = 0.0) -> list[float]:
    """Seconds per call of `fn`: `warmup` untimed calls, then timings of `inner` calls each (device
    synchronised before each clock read), each divided by `inner`: `samples` of them, or more until
    they span `window_s` seconds (sample_window).

    `inner` > 1 amortises the synchronisation of very short kernels, as a bare loop would."""
    for _ in range(warmup):
        fn()
    dev.sync()
    out = []
    with timed_region():  # the energy meter's timed region: the timed samples, not the warm-up
        for _ in sample_window(samples, window_s):
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            dev.sync()
            out.append((time.perf_counter() - t0) / inner)
    return out


def measure(fn: Callable[[], object], dev: Device, warmup: int, samples: int, window_s: float = 0.0) -> list[float]:
    """Seconds per call: warm up, time one call to size the samples (~10 ms each), then time them
    (`samples`, or more until they span `window_s` seconds)."""
    probe = timed_samples(fn, dev, warmup, 1)[0]
    return timed_samples(fn, dev, 0, samples, inner_for(probe), window_s)


def inner_for(seconds_per_call: float, target_s: float = 0.01) -> int:
    """Calls per sample so that one sample lasts about `target_s` (at least one call)."""
    return max(1, min(1000, int(target_s / max(seconds_per_call, 1e-9))))


def relative_error(torch, result, reference) -> float:
    """||result - reference||_F / ||reference||_F, computed in float64 on the result's device (a copy
    of the largest products to the host cost seconds of a GPU check)."""
    r = result.detach().double()
    ref = reference.detach().double().to(r.device)
    return float(torch.linalg.vector_norm(r - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-300))


def slowest(ctx, values: list[float]) -> list[float]:
    """Element-wise max over ranks (the slowest rank sets each figure); ranks that sampled a window
    may hold different counts: the shortest sets how many."""
    gathered = ctx.collectives.allgather(list(values))
    return [max(col) for col in zip(*gathered)]



def rows_to_metrics(ctx, rows: list[dict], key: str, precision: str, flop_rule: str) -> dict[str, Metric]:
    """TFLOP/s per row: each row holds `flop` and its timing `samples`; its time is the median on the slowest
    rank. Sets `time_s` and `tflops` in every row (and drops the samples); names the metrics tflops.<row[key]>."""
    worst = slowest(ctx, [statistics.median(r["samples"]) for r in rows])
    metrics = {}
    for row, t in zip(rows, worst):
        row["time_s"] = t
        row["tflops"] = row["flop"] / t / 1e12
        metrics[f"tflops.{row[key]}"] = Metric(row["tflops"], "TFLOP/s",
                                               [row["flop"] / s / 1e12 for s in row.pop("samples")], precision,
                                               description=f"{flop_rule} / median time, slowest rank")
    return metrics


def float64_check(errors: list[tuple[str, float]], precision: str, tolerance: dict = TOLERANCE) -> Check:
    """One check over (label, relative error vs float64) pairs: all within the precision's tolerance."""
    tol = tolerance[precision]
    bad = [f"{label}: {e:.2e}" for label, e in errors if not e <= tol]  # `not <=` also catches NaN
    worst = max((e for _, e in errors), default=0.0)
    return Check("matches_float64", not bad, f"max relative error {worst:.2e} over {len(errors)} results "
                 f"(tolerance {tol:g} for {precision})" + (f"; over tolerance: {', '.join(bad)}" if bad else ""))
