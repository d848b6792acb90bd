"""DeepBench-style 2-D convolution: forward, backward-data and backward-filter, in TFLOP/s.

The shapes are the Summit slides' (input 112x112x64, filter 3x3x128, batch 16 and
8; both are DeepBench training entries) and a DeepBench subset. Each direction is a
direct call of torch's convolution kernels (`aten.convolution_backward` with one
output asked for), timed like the GEMM benchmark. On CUDA the cuDNN algorithm is
chosen by `algorithm`: cuDNN's heuristic, `benchmark` (cuDNN times its algorithms,
Winograd non-fused and implicit precomputed GEMM among them, and keeps the
fastest) or `deterministic`; torch does not say which algorithm cuDNN picked,
so the record names the selection mode and the cuDNN version. The sanity check
compares every direction with float64 on the same rounded inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Metric, Outcome, param
from exabench.benchmarks.timing import (PRECISIONS, dtype_of, float64_check, measure, relative_error, restore_tf32,
                                        rows_to_metrics, set_tf32, torch_device)

# DeepBench's tuple order: (w, h, c, n, k, filter_w, filter_h, pad_w, pad_h, stride_w, stride_h).
SHAPES = {
    "tiny": [(16, 16, 8, 2, 16, 3, 3, 1, 1, 1, 1), (20, 12, 4, 2, 8, 5, 3, 0, 0, 2, 2)],
    "small": [(28, 28, 64, 4, 128, 3, 3, 1, 1, 1, 1), (56, 56, 64, 2, 128, 3, 3, 1, 1, 1, 1),
              (175, 40, 16, 2, 32, 5, 5, 1, 1, 2, 2)],
    "summit": [(112, 112, 64, 16, 128, 3, 3, 1, 1, 1, 1), (112, 112, 64, 8, 128, 3, 3, 1, 1, 1, 1)],
    "deepbench": [(112, 112, 64, 16, 128, 3, 3, 1, 1, 1, 1), (112, 112, 64, 8, 128, 3, 3, 1, 1, 1, 1),
                  (700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2), (341, 79, 32, 4, 32, 10, 5, 0, 0, 2, 2),
                  (480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1), (224, 224, 3, 16, 64, 7, 7, 3, 3, 2, 2),
                  (56, 56, 64, 16, 256, 1, 1, 0, 0, 2, 2), (28, 28, 128, 16, 128, 3, 3, 1, 1, 1, 1),
                  (14, 14, 256, 16, 256, 3, 3, 1, 1, 1, 1), (7, 7, 512, 16, 512, 3, 3, 1, 1, 1, 1),
                  (350, 80, 64, 16, 128, 5, 5, 1, 1, 2, 2), (28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1)],
}
DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")
ALGORITHMS = ("heuristic", "benchmark", "deterministic")


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad: tuple
    stride: tuple

    @classmethod
    def from_deepbench(cls, t):
        w, h, c, n, k, fw, fh, pw, ph, sw, sh = t
        return cls(n, c, h, w, k, fh, fw, (ph, pw), (sh, sw))

    @property
    def out_hw(self) -> tuple[int, int]:
        return ((self.h + 2 * self.pad[0] - self.r) // self.stride[0] + 1,
                (self.w + 2 * self.pad[1] - self.s) // self.stride[1] + 1)

    @property
    def flop(self) -> float:
        """Multiply-adds x 2 of one direction (the three directions do the same work)."""
        p, q = self.out_hw
        return 2.0 * self.n * self.k * p * q * self.c * self.r * self.s

    @property
    def label(self) -> str:
        return (f"n{self.n}c{self.c}h{self.h}w{self.w}k{self.k}r{self.r}s{self.s}"
                f"p{self.pad[0]}{self.pad[1]}u{self.stride[0]}{self.stride[1]}")


def conv_directions(torch, x, wt, shape: ConvShape, grad_out) -> dict:
    """One callable per direction, each running exactly one convolution kernel."""
    aten = torch.ops.aten
    common = (shape.stride, shape.pad, (1, 1), False, (0, 0), 1)
    return {
        "fwd": lambda: aten.convolution(x, wt, None, *common),
        "bwd_data": lambda: aten.convolution_backward(grad_out, x, wt, None, *common, (True, False, False))[0],
        "bwd_filter": lambda: aten.convolution_backward(grad_out, x, wt, None, *common, (False, True, False))[1],
    }


@dataclass
class ConvParams:
    shapes: str = param("summit", "shape set: " + ", ".join(SHAPES), choices=tuple(SHAPES))
    precision: str = param("fp32", "tensor precision (tf32: fp32 storage, TF32 math in cuDNN)", choices=PRECISIONS)
    algorithm: str = param("benchmark", "cuDNN algorithm selection on CUDA: heuristic, benchmark (time all, keep the "
                                        "fastest), deterministic; on CPU torch's oneDNN/native kernels, recorded",
                           choices=ALGORITHMS)
    channels_last: bool = param(False, "NHWC memory format (tensor cores prefer it for fp16/bf16)")
    warmup: int = param(3, "untimed calls per shape and direction (with algorithm=benchmark the first searches)",
                        minimum=1)
    samples: int = param(10, "timed samples per shape and direction", minimum=1)
    check: bool = param(True, "compare every direction with float64 (sanity check)")
    seed: int = param(11, "seed of the tensors")


@register
class Conv(MicroBenchmark):
    name = "conv"
    headline = "tflops"
    metric_names = ("tflops", "time_fwd_bwd", "tflops.*")
    framework = "pytorch"
    Params = ConvParams
    id_params = ("precision", "algorithm")
    presets = {
        "tiny": {"shapes": "tiny", "warmup": 1, "samples": 5},
        "small": {"shapes": "small", "warmup": 2, "samples": 5},
        "full": {"shapes": "deepbench", "warmup": 3, "samples": 20},
    }

    def run(self, p: ConvParams, ctx) -> Outcome:
        dev = torch_device(ctx)
        torch = dev.torch
        dtype = dtype_of(torch, p.precision)
        fmt = torch.channels_last if p.channels_last else torch.contiguous_format
        cudnn = torch.backends.cudnn
        saved = (cudnn.benchmark, cudnn.deterministic)
        cudnn.benchmark, cudnn.deterministic = p.algorithm == "benchmark", p.algorithm == "deterministic"
        before = set_tf32(torch, p.precision == "tf32")
        gen = torch.Generator().manual_seed(p.seed + ctx.world.rank)
        rows, errors = [], []
        try:
            for t in SHAPES[p.shapes]:
                sh = ConvShape.from_deepbench(t)
                pq = sh.out_hw
                make = lambda *size: torch.randn(*size, generator=gen).to(dev.device, dtype)  # noqa: E731
                x = make(sh.n, sh.c, sh.h, sh.w).contiguous(memory_format=fmt)
                wt = make(sh.k, sh.c, sh.r, sh.s).contiguous(memory_format=fmt)
                gy = make(sh.n, sh.k, *pq).contiguous(memory_format=fmt)
                calls = conv_directions(torch, x, wt, sh, gy)
                for direction, call in calls.items():
                    times = measure(call, dev, p.warmup, p.samples)
                    rows.append({"shape": sh.label, "direction": direction, "flop": sh.flop, "samples": times})
                if p.check:
                    ref = conv_directions(torch, x.double(), wt.double(), sh, gy.double())
                    for direction in DIRECTIONS:
                        errors.append((sh.label, direction, relative_error(torch, calls[direction](),
                                                                           ref[direction]())))
                del x, wt, gy, calls
        finally:
            restore_tf32(torch, before)
            cudnn.benchmark, cudnn.deterministic = saved
        for r in rows:
            r["label"] = f"{r['shape']}.{r['direction']}"
        metrics = rows_to_metrics(ctx, rows, "label", p.precision, "2NKPQCRS")
        for direction in DIRECTIONS:
            mine = [r for r in rows if r["direction"] == direction]
            metrics[f"tflops.{direction}"] = Metric(
                sum(r["flop"] for r in mine) / sum(r["time_s"] for r in mine) / 1e12, "TFLOP/s",
                [r["tflops"] for r in mine], p.precision, description=f"{direction}, all shapes: flops / time")
        metrics["tflops"] = Metric(sum(r["flop"] for r in rows) / sum(r["time_s"] for r in rows) / 1e12, "TFLOP/s",
                                   [], p.precision, description="forward + both backward passes, all shapes")
        metrics["time_fwd_bwd"] = Metric(sum(r["time_s"] for r in rows), "s", [], p.precision, higher_is_better=False,
                                         description="one forward and backward (data + filter) of every shape")
        checks = []
        if p.check:
            for s, d, e in errors:
                next(r for r in rows if r["shape"] == s and r["direction"] == d)["rel_error"] = e
            checks.append(float64_check([(f"{s} {d}", e) for s, d, e in errors], p.precision))
        info = {**dev.describe(), "kernel": "conv", "shapes": rows,
                "tf32_effective": p.precision == "tf32" and dev.cuda,
                "algorithm_selection": (f"cudnn.benchmark={p.algorithm == 'benchmark'}, "
                                        f"cudnn.deterministic={p.algorithm == 'deterministic'}") if dev.cuda else
                "CPU: torch chooses oneDNN or its native kernels (the algorithm parameter has no effect)",
                "memory_format": "channels_last" if p.channels_last else "contiguous (NCHW)"}
        return Outcome(metrics, checks, info)
