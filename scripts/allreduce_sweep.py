"""Measure MPI allreduce times over message sizes (mpi4py), for fitting the alpha-beta model.

    mpirun -np 2 python scripts/allreduce_sweep.py --out sweep.csv [--min-bytes 8 --max-bytes 4194304]

Writes (rank 0) a CSV with the table exabench.perf.alphabeta.fit_link reads: n, nodes, ranks_per_node,
bytes, time_s. Each size: warmup, then `repeats` batches of `iters` Allreduce calls on float32
arrays; a batch's time per call is the slowest rank's, the size's time the median over batches
(`time_min_s`: the fastest batch, the least disturbed by other jobs on a shared machine).
This stands in for the allreduce micro-benchmark's records (see docs/perf.md).
"""

from __future__ import annotations

import argparse
import csv
import socket
import statistics
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=4 * 2**20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    hosts = comm.allgather(socket.gethostname())
    rows = []
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        count = max(1, nbytes // 4)
        send = np.full(count, comm.Get_rank() + 1, dtype=np.float32)
        recv = np.empty_like(send)
        iters = args.iters if nbytes < 2**20 else max(2, args.iters // 4)
        for _ in range(args.warmup):
            comm.Allreduce(send, recv, op=MPI.SUM)
        batches = []
        for _ in range(args.repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                comm.Allreduce(send, recv, op=MPI.SUM)
            batches.append(comm.allreduce((time.perf_counter() - t0) / iters, op=MPI.MAX))
        if not np.all(recv == n * (n + 1) / 2):
            raise SystemExit(f"allreduce of {count * 4} bytes: wrong sum")
        rows.append({"n": n, "nodes": len(set(hosts)), "ranks_per_node": n // len(set(hosts)),
                     "bytes": count * 4, "time_s": statistics.median(batches), "time_min_s": min(batches)})
        nbytes *= 2
    if comm.Get_rank() == 0:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
