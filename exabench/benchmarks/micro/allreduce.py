"""Allreduce message-size sweep over Gloo, NCCL, MPI (mpi4py) and Horovod, nccl-tests figures.

Time, algbw and busbw with the nccl-tests definitions, checked exactly per size.

Sizes: the DeepBench allreduce sizes (in floats) and/or a doubling sweep. Every
iteration starts from the same integer-valued float32 pattern (reset untimed), the
ranks meet at a barrier, and one in-place sum allreduce is timed to completion on
the device; an iteration's time is the slowest rank's and a size's time the
median. algbw = bytes / time (GB = 1e9); busbw = algbw x 2(n-1)/n. After the timed
iterations each rank's buffer must equal the exact sum (small integers are exact
in float32). Beside this per-op figure, each size is also timed as nccl-tests times it
(`back_to_back`: after the per-op iterations, the ranks meet at a barrier, issue the same
number of allreduces back to back on one buffer, synchronise once and divide the elapsed
time; the slowest rank's), and where the ranks drive CUDA GPUs over NCCL, once more with
those allreduces captured in one CUDA graph and replayed (`cuda_graph`). The per-op figure
includes a barrier and a synchronisation per op: for small messages it is the method's
floor, not the collective's latency. `hierarchical` reduces within each node, allreduces between one
leader per node, then broadcasts within the node (for Horovod it sets
HOROVOD_HIERARCHICAL_ALLREDUCE=1); with one node it degenerates to reduce +
broadcast, and the record says so.
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from dataclasses import dataclass

import numpy as np

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Check, Metric, Outcome, param
from exabench.benchmarks.timing import torch_device

DEEPBENCH_FLOATS = (100_000, 3_097_600, 4_194_304, 6_553_600, 16_777_217, 38_360_000, 64_500_000)
BACKENDS = ("gloo", "nccl", "mpi", "horovod")
FLOAT_BYTES = 4


def message_counts(sizes: str, min_bytes: int, max_bytes: int) -> list[int]:
    """Float counts of the sweep: doubling from min_bytes to max_bytes, DeepBench's, or both."""
    counts = set()
    if sizes in ("doubling", "both"):
        b = min_bytes
        while b <= max_bytes:
            counts.add(max(1, b // FLOAT_BYTES))
            b *= 2
    if sizes in ("deepbench", "both"):
        counts.update(DEEPBENCH_FLOATS)
    return sorted(counts)


def bus_factor(ranks: int) -> float:
    """nccl-tests: allreduce busbw = algbw x 2(n-1)/n."""
    return 2.0 * (ranks - 1) / ranks


def pattern(count: int, rank: int) -> np.ndarray:
    """Small positive integers (exact in float32 and in their sum over ranks)."""
    i = np.arange(count, dtype=np.int64)
    return ((i * 7 + rank * 3) % 17 + 1).astype(np.float32)


def expected_sum(count: int, ranks: int) -> np.ndarray:
    return sum(pattern(count, r).astype(np.float64) for r in range(ranks)).astype(np.float32)


def host_groups(hosts: list[str]) -> tuple[list[list[int]], list[int]]:
    """Ranks per host (in order of first appearance) and the leader (lowest rank) of each."""
    groups: dict[str, list[int]] = {}
    for rank, h in enumerate(hosts):
        groups.setdefault(h, []).append(rank)
    members = list(groups.values())
    return members, [g[0] for g in members]


class _Torch:
    """torch.distributed (Gloo or NCCL), flat or hierarchical."""

    def __init__(self, dist, torch, device, hosts: list[str], rank: int, hierarchical: bool):
        self.dist, self.torch, self.device = dist, torch, device
        self.hier = None
        if hierarchical:
            members, leaders = host_groups(hosts)
            node_groups = [dist.new_group(g) for g in members]  # every rank creates every group, same order
            leader_group = dist.new_group(leaders)
            mine = next(i for i, g in enumerate(members) if rank in g)
            self.hier = (node_groups[mine], members[mine][0], leader_group if rank in leaders else None)

    def buffer(self, values: np.ndarray):
        return self.torch.from_numpy(values).to(self.device, copy=True)

    def reset(self, buf, values) -> None:
        buf.copy_(values)

    def to_numpy(self, buf) -> np.ndarray:
        return buf.cpu().numpy()

    def allreduce(self, buf) -> None:
        if self.hier is None:
            self.dist.all_reduce(buf)
            return
        node, leader, leaders = self.hier
        self.dist.reduce(buf, dst=leader, group=node)
        if leaders is not None:
            self.dist.all_reduce(buf, group=leaders)
        self.dist.broadcast(buf, src=leader, group=node)

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        self.dist.barrier()

    def graph_time(self, buf, iters: int) -> tuple[float | None, str]:
        """(seconds per allreduce, why not): `iters` allreduces captured in one CUDA graph, replayed
        once warm, then once timed (one synchronisation)."""
        torch = self.torch
        if self.device.type != "cuda":
            return None, "no CUDA graphs: the buffers are in host memory"
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # capture wants its collectives warmed up on a side stream
            for _ in range(3):
                self.allreduce(buf)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:  # the same on every rank of one machine: all capture, or none does
            with torch.cuda.graph(graph):
                for _ in range(iters):
                    self.allreduce(buf)
        except RuntimeError as exc:
            return None, f"CUDA graph capture of the allreduce failed: {exc}"[:300]
        graph.replay()
        self.sync()
        self.barrier()
        t0 = time.perf_counter()
        graph.replay()
        self.sync()
        return (time.perf_counter() - t0) / iters, ""


def back_to_back_time(comm, buf, iters: int) -> float:
    """nccl-tests' timing: one barrier, `iters` allreduces issued back to back, one synchronisation,
    elapsed / iters (seconds per allreduce on this rank)."""
    comm.sync()
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.allreduce(buf)
    comm.sync()
    return (time.perf_counter() - t0) / iters


METHODS = {
    "per_op": "barrier, then one allreduce to completion per iteration (buffer reset untimed); median over "
              "iterations of the slowest rank's time",
    "back_to_back": "nccl-tests: barrier, the iterations issued back to back, one synchronisation, elapsed / "
                    "iterations; the slowest rank's",
    "cuda_graph": "as back_to_back, the allreduces captured in one CUDA graph and replayed (NCCL on CUDA only)",
}


class _Mpi:
    """mpi4py on host buffers, flat or hierarchical (shared-memory node communicator + leaders)."""

    def __init__(self, hierarchical: bool):
        from mpi4py import MPI

        from exabench.training.distributed import world_comm
        self.MPI, self.comm = MPI, world_comm()
        self.hier = None
        if hierarchical:
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.comm.Get_rank())
            leaders = self.comm.Split(0 if node.Get_rank() == 0 else MPI.UNDEFINED, key=self.comm.Get_rank())
            self.hier = (node, leaders if leaders != MPI.COMM_NULL else None)

    def buffer(self, values: np.ndarray) -> np.ndarray:
        return values.copy()

    def reset(self, buf, values) -> None:
        np.copyto(buf, values)

    def to_numpy(self, buf) -> np.ndarray:
        return buf

    def allreduce(self, buf) -> None:
        in_place = self.MPI.IN_PLACE
        if self.hier is None:
            self.comm.Allreduce(in_place, buf)
            return
        node, leaders = self.hier
        if node.Get_rank() == 0:
            node.Reduce(in_place, buf, root=0)
            leaders.Allreduce(in_place, buf)
        else:
            node.Reduce(buf, None, root=0)
        node.Bcast(buf, root=0)

    def sync(self) -> None:
        pass

    def barrier(self) -> None:
        self.comm.Barrier()


class _Horovod:
    def __init__(self, hvd, torch, device):
        self.hvd, self.torch, self.device = hvd, torch, device

    buffer = _Torch.buffer
    reset = _Torch.reset
    to_numpy = _Torch.to_numpy
    sync = _Torch.sync

    def allreduce(self, buf) -> None:
        self.hvd.allreduce_(buf, op=self.hvd.Sum)

    def barrier(self) -> None:
        self.hvd.barrier()


@dataclass
class AllreduceParams:
    backend: str = param("gloo", "gloo, nccl (torch.distributed), mpi (mpi4py), horovod", choices=BACKENDS)
    sizes: str = param("both", "message sizes: doubling, deepbench (DeepBench's float counts) or both",
                       choices=("doubling", "deepbench", "both"))
    min_bytes: int = param(8, "smallest message of the doubling sweep", minimum=4)
    max_bytes: int = param(128 * 2**20, "largest message of the doubling sweep", minimum=4)
    warmup: int = param(5, "untimed iterations per size", minimum=0)
    iters: int = param(50, "timed iterations per size below large_bytes", minimum=1)
    iters_large: int = param(10, "timed iterations per size from large_bytes on", minimum=1)
    large_bytes: int = param(2**20, "messages from this size on use iters_large", minimum=4)
    hierarchical: bool = param(False, "reduce within nodes, allreduce between node leaders, broadcast within nodes")


@register
class Allreduce(MicroBenchmark):
    name = "allreduce"
    headline = "busbw"
    metric_names = ("busbw", "algbw", "busbw_avg", "busbw_b2b", "latency_small", "latency_small_b2b",
                    "latency_small_graph", "time.*", "busbw.*", "time_b2b.*", "time_graph.*")
    communication = {"pattern": "allreduce"}
    framework = "pytorch-mpi4py-horovod"
    Params = AllreduceParams
    id_params = ("backend",)
    presets = {
        "tiny": {"sizes": "doubling", "min_bytes": 8, "max_bytes": 2**18, "warmup": 2, "iters": 10,
                 "iters_large": 5},
        "small": {"sizes": "doubling", "min_bytes": 8, "max_bytes": 2**24, "warmup": 5, "iters": 50,
                  "iters_large": 10},
        "full": {"sizes": "both", "min_bytes": 8, "max_bytes": 2**27, "warmup": 5, "iters": 100,
                 "iters_large": 20},
    }

    def run(self, p: AllreduceParams, ctx) -> Outcome:
        world = ctx.world
        # Host names need a channel: MPI (or none, alone) now, torch.distributed once it is up.
        self.hosts = ctx.collectives.allgather(socket.gethostname()) if world.mpi or world.size == 1 else None
        comm, skipped, cleanup, device = self._open(p, ctx)
        if skipped:
            return Outcome({}, [], {"backend": p.backend}, skipped=skipped)
        try:
            rows = [self._one_size(comm, count, p, ctx) for count in message_counts(p.sizes, p.min_bytes,
                                                                                    p.max_bytes)]
            # The outcome gathers over ranks: over torch.distributed when there is no MPI, so the
            # group is shut only after it.
            return self._outcome(rows, p, ctx, self.hosts, device)
        finally:
            cleanup()

    def _open(self, p: AllreduceParams, ctx):
        """(communicator, reason to skip or None, cleanup, device description)."""
        world = ctx.world
        if p.backend == "mpi":
            if world.size > 1 and not world.mpi:
                return None, f"backend mpi needs an MPI launcher; ranks were started by {world.source}", None, None
            return _Mpi(p.hierarchical), None, lambda: None, "cpu (host memory)"
        import torch
        dev = torch_device(ctx)
        device, cuda = dev.device, dev.cuda
        if p.backend == "horovod":
            try:
                if p.hierarchical:
                    os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
                import horovod.torch as hvd
            except ImportError as exc:
                return None, f"horovod.torch is not importable here ({exc}); install Horovod to run this", None, None
            from exabench.training.distributed import init_horovod
            init_horovod(hvd)
            if hvd.size() != world.size:
                raise RuntimeError(f"Horovod sees {hvd.size()} ranks but the launcher started {world.size}")
            return _Horovod(hvd, torch, device), None, hvd.shutdown, str(device)
        if p.backend == "nccl" and not cuda:
            return None, "backend nccl needs a CUDA GPU per rank; torch.cuda.is_available() is False here", None, None
        import torch.distributed as dist

        from exabench.training.distributed import init_torch, shutdown_torch
        init_torch(world, p.backend, ctx.run_dir)
        if self.hosts is None:
            self.hosts = ctx.collectives.allgather(socket.gethostname())
        return _Torch(dist, torch, device if p.backend == "nccl" else torch.device("cpu"), self.hosts, world.rank,
                      p.hierarchical), None, shutdown_torch, str(device if p.backend == "nccl" else "cpu")

    @staticmethod
    def _one_size(comm, count: int, p: AllreduceParams, ctx) -> dict:
        values = pattern(count, ctx.world.rank)
        buf = comm.buffer(values)
        src = comm.buffer(values)
        iters = p.iters if count * FLOAT_BYTES < p.large_bytes else p.iters_large
        times = []
        for it in range(p.warmup + iters):
            comm.reset(buf, src)
            comm.sync()
            comm.barrier()
            t0 = time.perf_counter()
            comm.allreduce(buf)
            comm.sync()
            if it >= p.warmup:
                times.append(time.perf_counter() - t0)
        got = comm.to_numpy(buf)
        want = expected_sum(count, ctx.world.size)
        bad = int(np.count_nonzero(got != want))
        # zeros stay zeros however often they are summed: no overflow over back-to-back ops
        zeros = comm.buffer(np.zeros(count, dtype=np.float32))
        b2b = back_to_back_time(comm, zeros, iters)
        graph, no_graph = (comm.graph_time(zeros, iters) if hasattr(comm, "graph_time")
                           else (None, "no CUDA graphs for this backend"))
        return {"count": count, "bytes": count * FLOAT_BYTES, "samples": times, "wrong_elements": bad,
                "back_to_back": b2b, "cuda_graph": graph, "no_graph": no_graph}

    @staticmethod
    def _outcome(rows: list[dict], p: AllreduceParams, ctx, hosts, device) -> Outcome:
        n = ctx.world.size
        # The slowest rank sets every iteration's time; wrong elements are summed over ranks.
        gathered = ctx.collectives.allgather([(r["samples"], r["wrong_elements"], r["back_to_back"],
                                               r["cuda_graph"]) for r in rows])
        metrics, table = {}, []
        for i, row in enumerate(rows):
            per_iter = [max(col) for col in zip(*(g[i][0] for g in gathered))]
            wrong = sum(g[i][1] for g in gathered)
            b2b = max(g[i][2] for g in gathered)
            graphs = [g[i][3] for g in gathered]
            graph = max(graphs) if all(x is not None for x in graphs) else None
            t = statistics.median(per_iter)
            algbw = row["bytes"] / t / 1e9
            size = f"{row['bytes']}B"
            metrics[f"time.{size}"] = Metric(t * 1e6, "us", [x * 1e6 for x in per_iter], "fp32", higher_is_better=False,
                                             description=f"allreduce of {row['bytes']} bytes, slowest rank, median")
            metrics[f"busbw.{size}"] = Metric(algbw * bus_factor(n), "GB/s",
                                              [row["bytes"] / x / 1e9 * bus_factor(n) for x in per_iter], "fp32",
                                              description="algbw x 2(n-1)/n (nccl-tests)")
            metrics[f"time_b2b.{size}"] = Metric(b2b * 1e6, "us", [b2b * 1e6], "fp32", higher_is_better=False,
                                                 description=f"allreduce of {row['bytes']} bytes, "
                                                             f"{METHODS['back_to_back']}")
            if graph is not None:
                metrics[f"time_graph.{size}"] = Metric(graph * 1e6, "us", [graph * 1e6], "fp32",
                                                       higher_is_better=False,
                                                       description=f"allreduce of {row['bytes']} bytes, "
                                                                   f"{METHODS['cuda_graph']}")
            table.append({"bytes": row["bytes"], "count": row["count"], "time_us": t * 1e6, "algbw_GBps": algbw,
                          "busbw_GBps": algbw * bus_factor(n), "iterations": len(per_iter), "wrong_elements": wrong,
                          "time_us_b2b": b2b * 1e6, "busbw_GBps_b2b": row["bytes"] / b2b / 1e9 * bus_factor(n),
                          "time_us_graph": graph * 1e6 if graph is not None else None})
        big = table[-1]
        metrics["busbw"] = Metric(big["busbw_GBps"], "GB/s", [], "fp32",
                                  description=f"busbw of the largest message ({big['bytes']} bytes)")
        metrics["algbw"] = Metric(big["algbw_GBps"], "GB/s", [], "fp32",
                                  description=f"algbw of the largest message ({big['bytes']} bytes)")
        metrics["busbw_avg"] = Metric(statistics.fmean(r["busbw_GBps"] for r in table), "GB/s",
                                      [r["busbw_GBps"] for r in table], "fp32",
                                      description="mean busbw over the sizes (nccl-tests' 'Avg bus bandwidth')")
        metrics["latency_small"] = Metric(table[0]["time_us"], "us", [], "fp32", higher_is_better=False,
                                          description=f"time of the smallest message ({table[0]['bytes']} bytes), "
                                                      "per op (with a barrier and a synchronisation each)")
        metrics["latency_small_b2b"] = Metric(table[0]["time_us_b2b"], "us", [], "fp32", higher_is_better=False,
                                              description=f"time of the smallest message ({table[0]['bytes']} "
                                                          f"bytes), {METHODS['back_to_back']}")
        metrics["busbw_b2b"] = Metric(big["busbw_GBps_b2b"], "GB/s", [], "fp32",
                                      description=f"busbw of the largest message, {METHODS['back_to_back']}")
        if table[0]["time_us_graph"] is not None:
            metrics["latency_small_graph"] = Metric(table[0]["time_us_graph"], "us", [], "fp32",
                                                    higher_is_better=False,
                                                    description=f"time of the smallest message, "
                                                                f"{METHODS['cuda_graph']}")
        bad = [f"{r['bytes']} B: {r['wrong_elements']} wrong" for r in table if r["wrong_elements"]]
        checks = [Check("sums_exact", not bad, f"{len(table)} sizes, every element equal to the exact sum over "
                                               f"{n} ranks" if not bad else "; ".join(bad))]
        nodes = len(set(hosts)) if hosts else None
        info = {"backend": p.backend, "device": device, "ranks": n, "nodes": nodes, "sizes": table,
                "hierarchical": p.hierarchical, "bus_factor": bus_factor(n),
                "timing": "barrier, then one allreduce to completion per iteration; buffer reset untimed",
                "timing_methods": {k: v for k, v in METHODS.items()
                                   if k != "cuda_graph" or table[0]["time_us_graph"] is not None},
                "cuda_graph": "timed" if table[0]["time_us_graph"] is not None else rows[0]["no_graph"]}
        if n == 1:
            info["one_rank_note"] = ("one rank: an allreduce moves no data between devices; what is timed is the "
                                     "launch and completion of the collective (its fixed cost), so busbw is 0 "
                                     "and the back-to-back or graph time is the latency floor of the library")
        if p.hierarchical and nodes == 1:
            info["hierarchical_note"] = "one node: the hierarchy degenerates to an intra-node reduce + broadcast"
        return Outcome(metrics, checks, info)
