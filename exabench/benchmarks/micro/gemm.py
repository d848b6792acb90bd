"""DeepBench-style GEMM: C = op(A) op(B) over a sweep of (M, N, K, transposes), in TFLOP/s.

Every rank times its own device (one GPU per rank, or its share of the CPU cores):
each shape is warmed up, then timed in samples of back-to-back calls (the device
synchronised before each clock read), 2MNK flops per call. A shape's figure is its
median sample on the slowest rank. The operands are drawn on the device (a host generator
and copy cost most of a GPU check's GEMM part). The sanity check compares each product
with a float64 product of the same (already rounded) inputs, on the device; above
FULL_CHECK_MAX multiply-adds it compares sampled entries, each a float64 dot product of a
row of A and a column of B, instead of the whole product.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Metric, Outcome, param
from exabench.benchmarks.timing import (PRECISIONS, dtype_of, float64_check, measure, relative_error, restore_tf32,
                                        rows_to_metrics, set_tf32, torch_device)

# (M, N, K, A transposed, B transposed), from DeepBench's gemm_problems.h training set (a subset)
# and small shapes of the same aspect ratios for a laptop.
SHAPES = {
    "tiny": [(64, 16, 64, False, False), (128, 128, 128, False, False), (128, 64, 128, True, False),
             (96, 128, 64, False, True)],
    "small": [(512, 16, 512, False, False), (1024, 700, 512, False, False), (1024, 700, 512, True, False),
              (1760, 128, 1760, False, False), (2048, 2048, 2048, False, False), (512, 1500, 1024, False, True)],
    "deepbench": [(1760, 16, 1760, False, False), (1760, 128, 1760, False, False), (1760, 7000, 1760, False, False),
                  (2048, 7000, 2048, False, False), (2560, 7000, 2560, False, False), (4096, 7000, 4096, False, False),
                  (1760, 7000, 1760, True, False), (4096, 7000, 4096, True, False), (1760, 7133, 1760, False, True),
                  (4096, 7133, 4096, False, True), (5124, 9124, 2560, False, False), (35, 8457, 2560, False, False),
                  (7680, 128, 2560, False, False), (3072, 128, 1024, True, False), (512, 16, 500000, False, False),
                  (1024, 700, 512, False, False), (7680, 24000, 2560, False, False),
                  (8448, 48000, 2816, False, False)],
}


def shape_label(m: int, n: int, k: int, a_t: bool, b_t: bool) -> str:
    return f"{m}x{n}x{k}.{'T' if a_t else 'N'}{'T' if b_t else 'N'}"


# Above this many multiply-adds (m n k) the check samples entries: a float64 product of the largest
# shapes (8448 x 48000 x 2816) takes seconds even on a GPU, and as long again on a host.
FULL_CHECK_MAX = 2**31
# Elements of float64 rows and columns a sampled check may hold (256 MiB each side).
SAMPLE_ELEMENTS = 2**25


def operands(torch, m: int, n: int, k: int, a_t: bool, b_t: bool, dtype, device, gen):
    """A (m x k) and B (k x n) as the product sees them, stored transposed when asked (views, no copies),
    drawn by `gen`, a generator on `device`."""
    a = torch.randn((k, m) if a_t else (m, k), generator=gen, device=device).to(dtype=dtype)
    b = torch.randn((n, k) if b_t else (k, n), generator=gen, device=device).to(dtype=dtype)
    return (a.t() if a_t else a), (b.t() if b_t else b)


def product_error(torch, a, b, c, gen) -> float:
    """Relative error of c = a b against float64 on the device: the whole product, or for shapes above
    FULL_CHECK_MAX a sample of entries (rows and columns drawn by `gen`), each its own float64 dot product."""
    m, k = a.shape
    n = b.shape[1]
    if m * n * k <= FULL_CHECK_MAX:
        return relative_error(torch, c, a.double() @ b.double())
    count = max(16, min(1024, SAMPLE_ELEMENTS // k))
    rows = torch.randint(m, (count,), generator=gen, device=c.device)
    cols = torch.randint(n, (count,), generator=gen, device=c.device)
    want = (a[rows].double() * b[:, cols].t().double()).sum(dim=1)
    return relative_error(torch, c[rows, cols], want)


@dataclass
class GemmParams:
    shapes: str = param("deepbench", "shape set: " + ", ".join(SHAPES), choices=tuple(SHAPES))
    precision: str = param("fp32", "input and output precision (tf32: fp32 storage, TF32 multiplies on NVIDIA GPUs)",
                           choices=PRECISIONS)
    warmup: int = param(3, "untimed calls per shape before timing", minimum=0)
    samples: int = param(10, "timed samples per shape (each of enough calls to last ~10 ms)", minimum=1)
    peak_tflops: float = param(0.0, "the device's peak TFLOP/s at this precision, for fraction of peak "
                                    "(the site schema has no peak yet); 0: unknown", minimum=0.0)
    check: bool = param(True, "compare every product with float64 on the device (sampled entries above "
                              "FULL_CHECK_MAX multiply-adds; sanity check)")
    seed: int = param(7, "seed of the operands")


@register
class Gemm(MicroBenchmark):
    name = "gemm"
    headline = "tflops"
    metric_names = ("tflops", "tflops_total", "peak_fraction", "tflops.*")
    framework = "pytorch"
    Params = GemmParams
    id_params = ("precision",)
    presets = {
        "tiny": {"shapes": "tiny", "warmup": 2, "samples": 5},
        "small": {"shapes": "small", "warmup": 3, "samples": 10},
        "full": {"shapes": "deepbench", "warmup": 5, "samples": 20},
    }

    def run(self, p: GemmParams, ctx) -> Outcome:
        dev = torch_device(ctx)
        torch = dev.torch
        dtype = dtype_of(torch, p.precision)
        before = set_tf32(torch, p.precision == "tf32")
        gen = torch.Generator(device=dev.device).manual_seed(p.seed + ctx.world.rank)
        rows, errors = [], []
        try:
            for m, n, k, a_t, b_t in SHAPES[p.shapes]:
                a, b = operands(torch, m, n, k, a_t, b_t, dtype, dev.device, gen)
                c = torch.empty((m, n), dtype=dtype, device=dev.device)
                call = functools.partial(torch.matmul, a, b, out=c)  # the timed kernel, nothing else
                times = measure(call, dev, p.warmup, p.samples)
                if p.check:
                    errors.append(product_error(torch, a, b, c, gen))
                rows.append({"shape": shape_label(m, n, k, a_t, b_t), "m": m, "n": n, "k": k, "a_t": a_t, "b_t": b_t,
                             "flop": 2.0 * m * n * k, "samples": times})
        finally:
            restore_tf32(torch, before)
        metrics = rows_to_metrics(ctx, rows, "shape", p.precision, "2MNK")
        total_flop = sum(r["flop"] for r in rows)
        sweep_time = sum(r["time_s"] for r in rows)
        metrics["tflops"] = Metric(total_flop / sweep_time / 1e12, "TFLOP/s", [r["tflops"] for r in rows], p.precision,
                                   description="all shapes: total flops / total median time, per device "
                                               "(samples: one per shape)")
        metrics["tflops_total"] = Metric(ctx.world.size * total_flop / sweep_time / 1e12, "TFLOP/s", [], p.precision,
                                         description="all ranks together: ranks x flops / slowest rank's time")
        if p.peak_tflops > 0:
            metrics["peak_fraction"] = Metric(metrics["tflops"].value / p.peak_tflops, "1", [], p.precision,
                                              description=f"tflops / peak_tflops ({p.peak_tflops:g})")
            for r in rows:
                r["peak_fraction"] = r["tflops"] / p.peak_tflops
        checks = []
        if p.check:
            for r, e in zip(rows, errors):
                r["rel_error"] = e
            checks.append(float64_check([(r["shape"], e) for r, e in zip(rows, errors)], p.precision))
        info = {**dev.describe(), "kernel": "gemm", "algorithm": "torch.matmul", "shapes": rows,
                "tf32_effective": p.precision == "tf32" and dev.cuda}
        return Outcome(metrics, checks, info)
