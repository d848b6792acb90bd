"""The allreduce benchmark's busbw for 2 ranks against mpi4py's own Allreduce timed by a
plain loop, on the same message sizes, in one run.

    PYTHONPATH=. mpirun --allow-run-as-root --oversubscribe -np 2 python bench/allreduce_vs_mpi4py.py \
        [--backend mpi] [--max-bytes 16777216]

The benchmark (exabench allreduce: a barrier, then one timed allreduce per iteration,
the slowest rank's time, the median) against the plain loop (a barrier, then `iters`
back-to-back comm.Allreduce(IN_PLACE, buf), total time / iters, max over ranks).
busbw = algbw x 2(n-1)/n for both; ratio = benchmark / plain loop, printed per size, and
again with the benchmark's mean iteration time (the plain loop's figure is a mean: total / iters).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from exabench.benchmarks.micro.allreduce import Allreduce, AllreduceParams, bus_factor, message_counts
from exabench.training.distributed import detect_world
from exabench.runner import Context


def plain_loop(comm, count: int, iters: int, warmup: int) -> float:
    """Seconds per Allreduce of `count` floats: back-to-back loop, slowest rank."""
    buf = np.ones(count, dtype=np.float32)
    for _ in range(warmup):
        comm.Allreduce(MPI.IN_PLACE, buf)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(MPI.IN_PLACE, buf)
    return comm.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="mpi", choices=("mpi", "gloo"))
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=2**24)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--iters-large", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3, help="alternate benchmark and plain loop; medians")
    args = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    world = detect_world()
    run_dir = Path(comm.bcast(tempfile.mkdtemp(prefix="ar-vs-mpi4py-") if comm.rank == 0 else None))
    ctx = Context(spec={"layout": {"threads_per_rank": 1}}, world=world, run_dir=run_dir)
    params = AllreduceParams(backend=args.backend, sizes="doubling", min_bytes=args.min_bytes,
                             max_bytes=args.max_bytes, warmup=5, iters=args.iters, iters_large=args.iters_large)
    counts = message_counts("doubling", args.min_bytes, args.max_bytes)
    bench = {c: [] for c in counts}
    plain = {c: [] for c in counts}
    for _ in range(args.rounds):
        outcome = Allreduce().run(params, ctx)
        if outcome.failed_checks or outcome.skipped:
            raise SystemExit(f"benchmark run not ok: {outcome.skipped or outcome.failed_checks}")
        for row in outcome.info["sizes"]:
            per_iter = outcome.metrics[f"time.{row['bytes']}B"].samples
            bench[row["count"]].append((row["time_us"] * 1e-6, statistics.fmean(per_iter) * 1e-6))
        for c in counts:
            large = c * 4 >= params.large_bytes
            plain[c].append(plain_loop(comm, c, args.iters_large if large else args.iters, 5))
    if comm.rank == 0:
        n = comm.size
        print(f"allreduce busbw, {n} ranks: exabench ({args.backend}) vs mpi4py plain loop; "
              f"median of {args.rounds} rounds; busbw = algbw x {bus_factor(n):g}")
        print(f"{'bytes':>10} {'bench us':>10} {'mean us':>10} {'plain us':>10} {'bench GB/s':>11} "
              f"{'plain GB/s':>11} {'ratio':>7} {'ratio(mean)':>11}")
        ratios, ratios_mean = [], []
        for c in counts:
            tb = statistics.median(t for t, _ in bench[c])
            tm = statistics.median(m for _, m in bench[c])
            tp = statistics.median(plain[c])
            bb, bp = c * 4 / tb / 1e9 * bus_factor(n), c * 4 / tp / 1e9 * bus_factor(n)
            ratios.append(bb / bp)
            ratios_mean.append(tp / tm)
            print(f"{c * 4:>10} {tb * 1e6:>10.2f} {tm * 1e6:>10.2f} {tp * 1e6:>10.2f} {bb:>11.4f} {bp:>11.4f} "
                  f"{bb / bp:>7.3f} {tp / tm:>11.3f}")

        def gmean(xs):
            return float(np.exp(np.mean(np.log(xs))))

        big = [i for i, c in enumerate(counts) if c * 4 >= params.large_bytes]
        print(f"busbw ratio benchmark / plain loop (geometric mean): {gmean(ratios):.3f} over all sizes"
              + (f", {gmean([ratios[i] for i in big]):.3f} from {params.large_bytes} B on" if big else ""))
        print(f"same with the benchmark's mean iteration time (as the plain loop's total / iters): "
              f"{gmean(ratios_mean):.3f} over all sizes"
              + (f", {gmean([ratios_mean[i] for i in big]):.3f} from {params.large_bytes} B on" if big else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
