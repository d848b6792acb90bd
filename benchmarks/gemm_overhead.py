"""How much the GEMM benchmark's own machinery costs: its achieved FLOP/s against a bare
torch.matmul loop on the same shapes, operands and device, in one run.

    PYTHONPATH=. python benchmarks/gemm_overhead.py [--shapes small] [--precision fp32] [--rounds 3]

Rounds alternate benchmark and bare loop so that load from other processes hits both
alike; each side's figure is its median over rounds. Overhead = 1 - benchmark / bare
(negative: the benchmark was faster, i.e. within noise). Exits 1 when it is >= 2%.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from exabench.benchmarks.gemm import SHAPES, Gemm, GemmParams, operands
from exabench.distributed import World
from exabench.runner import Context

LIMIT = 0.02


def bare_loop(shapes, precision: str, seconds_per_shape: float, seed: int) -> float:
    """TFLOP/s of `for _ in range(n): torch.matmul(a, b, out=c)` over all shapes (total flops / total time)."""
    from exabench.benchmarks.timing import dtype_of, restore_tf32, set_tf32
    dtype = dtype_of(torch, precision)
    before = set_tf32(torch, precision == "tf32")
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    gen = torch.Generator().manual_seed(seed)
    flop = elapsed = 0.0
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
            calls = max(1, int(seconds_per_shape / max(time.perf_counter() - t0, 1e-9)))
            t0 = time.perf_counter()
            for _ in range(calls):
                torch.matmul(a, b, out=c)
            if cuda:
                torch.cuda.synchronize()
            elapsed += time.perf_counter() - t0
            flop += 2.0 * m * n * k * calls
    finally:
        restore_tf32(torch, before)
    return flop / elapsed / 1e12


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="small", choices=sorted(SHAPES))
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--samples", type=int, default=10, help="benchmark samples per shape (~10 ms each)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args(argv)
    ctx = Context(spec={"layout": {"threads_per_rank": args.threads}}, world=World(0, 1, 0, 1, "single", False),
                  run_dir=Path(tempfile.mkdtemp(prefix="gemm-overhead-")))
    params = GemmParams(shapes=args.shapes, precision=args.precision, samples=args.samples, check=False)
    bench, bare = [], []
    for _ in range(args.rounds):
        outcome = Gemm().run(params, ctx)
        bench.append(outcome.metrics["tflops"].value)
        # Same time per shape as the benchmark spent timing it.
        per_shape = args.samples * 0.01
        bare.append(bare_loop(SHAPES[args.shapes], args.precision, per_shape, params.seed))
    b, r = statistics.median(bench), statistics.median(bare)
    overhead = 1 - b / r
    device = "cuda" if torch.cuda.is_available() else f"cpu ({args.threads} threads)"
    print(f"GEMM overhead, shapes '{args.shapes}' ({len(SHAPES[args.shapes])}), {args.precision}, {device}, "
          f"{args.rounds} rounds")
    print(f"  benchmark : {b * 1e3:9.2f} GFLOP/s  rounds {[round(x * 1e3, 2) for x in bench]}")
    print(f"  bare loop : {r * 1e3:9.2f} GFLOP/s  rounds {[round(x * 1e3, 2) for x in bare]}")
    print(f"  overhead  : {overhead * 100:+.2f} % (limit {LIMIT * 100:.0f} %)")
    return 0 if overhead < LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
