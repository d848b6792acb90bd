"""Point-to-point bandwidth and latency between two ranks over MPI (mpi4py), as OSU's osu_bw and
osu_latency measure them: the link test of a node pair.

Ranks 0 and 1 ping-pong a message back and forth (blocking Send/Recv): a round trip moves it
twice, so latency is half a round trip (small message) and bandwidth twice the message's
bytes per round trip (large message). Each sample times `iters` round trips after a barrier, the
two sizes in turn; the figures are the median samples. With `window_s`, sampling goes on until the
samples span that many seconds (rank 0's clock decides, every rank follows), so that a link that
comes and goes (throttled 3 s on, 3 s off) shows in them; the record keeps every sample. Ranks
beyond the first two wait at the barriers. The check: every message rank 0 gets back carries the
pattern it sent.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Check, Metric, Outcome, param
from exabench.benchmarks.timing import sample_window


@dataclass
class PingPongParams:
    large_bytes: int = param(4 * 2**20, "message of the bandwidth figure", minimum=1024)
    small_bytes: int = param(8, "message of the latency figure", minimum=1)
    iters_large: int = param(10, "round trips per bandwidth sample", minimum=1)
    iters_small: int = param(200, "round trips per latency sample", minimum=1)
    warmup: int = param(2, "untimed samples per message size", minimum=0)
    samples: int = param(7, "timed samples per message size", minimum=1)
    window_s: float = param(0.0, "keep sampling until the samples span this many seconds (a link fault that "
                                 "comes and goes shows in them); 0: `samples` only", minimum=0.0)


def round_trips(comm, rank: int, buf: np.ndarray, iters: int) -> float:
    """Seconds for `iters` round trips of `buf` between ranks 0 and 1 (others only meet the barrier)."""
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        if rank == 0:
            comm.Send(buf, dest=1, tag=1)
            comm.Recv(buf, source=1, tag=2)
        elif rank == 1:
            comm.Recv(buf, source=0, tag=1)
            comm.Send(buf, dest=0, tag=2)
    return time.perf_counter() - t0


@register
class PingPong(MicroBenchmark):
    name = "pingpong"
    headline = "bandwidth"
    metric_names = ("bandwidth", "latency")
    framework = "mpi4py"
    launcher_needs = "mpi"
    Params = PingPongParams
    communication = {"pattern": "point-to-point", "backend": "mpi"}
    presets = {
        "tiny": {"large_bytes": 2 * 2**20, "iters_large": 5, "iters_small": 100, "warmup": 1, "samples": 5},
        "small": {"large_bytes": 4 * 2**20, "iters_large": 10, "iters_small": 200, "warmup": 2, "samples": 7},
        "full": {"large_bytes": 16 * 2**20, "iters_large": 20, "iters_small": 1000, "warmup": 3, "samples": 20},
    }

    def run(self, p: PingPongParams, ctx) -> Outcome:
        if ctx.world.size < 2:
            return Outcome({}, [], {}, skipped="a ping-pong needs two ranks; this run has one")
        from mpi4py import MPI

        from exabench.training.distributed import world_comm
        comm = world_comm()
        rank = comm.Get_rank()
        sizes = ((p.small_bytes, p.iters_small), (p.large_bytes, p.iters_large))
        sent = {size: (np.arange(size) % 251).astype(np.uint8) for size, _ in sizes}
        bufs = {size: sent[size].copy() for size, _ in sizes}
        for _ in range(p.warmup):
            for size, iters in sizes:
                round_trips(comm, rank, bufs[size], iters)
        times = {size: [] for size, _ in sizes}
        # the two sizes in turn, so that both span the same window
        for _ in sample_window(p.samples, p.window_s, lambda done: comm.bcast(done, root=0)):
            for size, iters in sizes:
                times[size].append(round_trips(comm, rank, bufs[size], iters) / iters)
        intact = all(np.array_equal(bufs[size], sent[size]) for size, _ in sizes)
        timings = {size: comm.bcast(times[size], root=0) for size, _ in sizes}
        intact = bool(comm.bcast(intact, root=0))
        lat = [t / 2 * 1e6 for t in timings[p.small_bytes]]
        bw = [2 * p.large_bytes / t / 1e9 for t in timings[p.large_bytes]]
        metrics = {
            "bandwidth": Metric(statistics.median(bw), "GB/s", bw,
                                description=f"ranks 0-1, {p.large_bytes} B messages: 2 x bytes / round trip "
                                            "(median sample)"),
            "latency": Metric(statistics.median(lat), "us", lat, higher_is_better=False,
                              description=f"ranks 0-1, {p.small_bytes} B messages: half a round trip (median sample)"),
        }
        check = Check("messages intact", intact, "every message came back as sent" if intact
                      else "a message came back altered")
        return Outcome(metrics, [check], {"pair": [0, 1], "hosts": ctx.collectives.allgather(MPI.Get_processor_name())})
