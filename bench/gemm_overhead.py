"""How much the GEMM benchmark's own machinery costs: its achieved FLOP/s against a bare
torch.matmul loop on the same shapes, operands and device, in one run.

    PYTHONPATH=. python bench/gemm_overhead.py [--shapes small] [--precision fp32] [--rounds 3]

Rounds alternate a whole benchmark run and the bare loop (each going first in turn), so
load from other processes hits both alike. The bare loop times, per shape, as many chunks of as many
back-to-back `torch.matmul(a, b, out=c)` calls as the benchmark's samples. Each side's
figure is total flops / the sum over shapes of the best (least disturbed) time per
call over all rounds; the same with medians is printed too. Overhead = 1 - benchmark
/ bare (negative: the benchmark was faster, i.e. within noise). Exits 1 when >= 2%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from exabench.benchmarks.micro.gemm import SHAPES, Gemm, GemmParams, operands, shape_label
from exabench.benchmarks.timing import dtype_of, inner_for, restore_tf32, set_tf32
from exabench.training.distributed import World
from exabench.runner import Context

LIMIT = 0.02


def bare_loop(shapes, precision: str, samples: int, seed: int) -> dict[str, list[float]]:
    """Seconds per call of a bare matmul loop, `samples` chunks per shape (same chunk sizing as the benchmark)."""
    dtype = dtype_of(torch, precision)
    before = set_tf32(torch, precision == "tf32")
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    gen = torch.Generator().manual_seed(seed)
    out = {}
    try:
        for m, n, k, a_t, b_t in shapes:
            a, b = operands(torch, m, n, k, a_t, b_t, dtype, device, gen)
            c = torch.empty((m, n), dtype=dtype, device=device)
            for _ in range(3):
                torch.matmul(a, b, out=c)
            t0 = time.perf_counter()
            torch.matmul(a, b, out=c)
            if cuda:
                torch.cuda.synchronize()
            calls = inner_for(time.perf_counter() - t0)
            times = []
            for _ in range(samples):
                t0 = time.perf_counter()
                for _ in range(calls):
                    torch.matmul(a, b, out=c)
                if cuda:
                    torch.cuda.synchronize()
                times.append((time.perf_counter() - t0) / calls)
            out[shape_label(m, n, k, a_t, b_t)] = times
    finally:
        restore_tf32(torch, before)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="small", choices=sorted(SHAPES))
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--samples", type=int, default=10, help="samples per shape (~10 ms each), both sides")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args(argv)
    ctx = Context(spec={"layout": {"threads_per_rank": args.threads}}, world=World(0, 1, 0, 1, "single", False),
                  run_dir=Path(tempfile.mkdtemp(prefix="gemm-overhead-")))
    params = GemmParams(shapes=args.shapes, precision=args.precision, samples=args.samples, check=False)
    shapes = SHAPES[args.shapes]
    flop = {shape_label(*s): 2.0 * s[0] * s[1] * s[2] for s in shapes}
    bench = {label: [] for label in flop}
    bare = {label: [] for label in flop}
    def run_bench():
        outcome = Gemm().run(params, ctx)
        for label in flop:
            bench[label].extend(flop[label] / (x * 1e12) for x in outcome.metrics[f"tflops.{label}"].samples)

    def run_bare():
        for label, times in bare_loop(shapes, args.precision, args.samples, params.seed).items():
            bare[label].extend(times)

    for i in range(args.rounds):  # alternate which side goes first, so neither always follows the other
        for side in ((run_bench, run_bare) if i % 2 == 0 else (run_bare, run_bench)):
            side()

    def gflops(per_shape, pick):
        return sum(flop.values()) / sum(pick(per_shape[label]) for label in flop) / 1e9

    b_best, r_best = gflops(bench, min), gflops(bare, min)
    b_med, r_med = gflops(bench, statistics.median), gflops(bare, statistics.median)
    overhead = 1 - b_best / r_best
    device = "cuda" if torch.cuda.is_available() else f"cpu ({args.threads} threads)"
    print(f"GEMM overhead, shapes '{args.shapes}' ({len(shapes)}), {args.precision}, {device}, {args.rounds} rounds "
          f"x {args.samples} samples per shape")
    print(f"  benchmark : best {b_best:9.2f} GFLOP/s   median {b_med:9.2f} GFLOP/s")
    print(f"  bare loop : best {r_best:9.2f} GFLOP/s   median {r_med:9.2f} GFLOP/s")
    print(f"  overhead  : {overhead * 100:+.2f} % best vs best (limit {LIMIT * 100:.0f} %), "
          f"{(1 - b_med / r_med) * 100:+.2f} % median vs median")
    return 0 if overhead < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
