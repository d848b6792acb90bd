"""One thin layer over the ways ranks are started and talk: MPI (mpi4py),
torch.distributed (Gloo/NCCL/MPI backends) and a single process. A workload is
written once against `World` and `Collectives`; it never reads launcher variables."""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from pathlib import Path

# (rank, size, local rank, local size) variables, in the order launchers are recognised.
_LAUNCHER_VARS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("mpi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("mpi", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_LOCAL_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)
_MPI_MARKERS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "JSM_NAMESPACE_SIZE", "ALPS_APP_PE")


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    local_size: int
    source: str  # torchrun | mpi | slurm | single
    mpi: bool    # whether MPI_Init can join the other ranks


def detect_world(environ=None) -> World:
    env = os.environ if environ is None else environ
    mpi = any(k in env for k in _MPI_MARKERS)
    for source, rk, sz, lrk, lsz in _LAUNCHER_VARS:
        if rk in env and sz in env:
            size = int(env[sz])
            local_size = env.get(lsz, "")
            local_size = int(local_size.split("(")[0].split(",")[0]) if local_size[:1].isdigit() else size
            return World(int(env[rk]), size, int(env.get(lrk, 0)), local_size, source, mpi)
    return World(0, 1, 0, 1, "single", False)


# The communicator of this run's ranks where it is not MPI_COMM_WORLD: one node's ranks of a launch
# across every node of an allocation (the every-node job's node worlds, use_node_world).
_NODE_COMM = None


def use_node_world(comm) -> World:
    """Make `comm` (an mpi4py communicator: this node's ranks of a launch across every node) the
    world this process's run sees: its collectives, torch.distributed's rendezvous and Horovod all
    use it instead of MPI_COMM_WORLD, so each node's run is its own, alone on its node."""
    global _NODE_COMM
    _NODE_COMM = comm
    return World(comm.Get_rank(), comm.Get_size(), comm.Get_rank(), comm.Get_size(), "mpi", True)


def world_comm():
    """The MPI communicator of this run's ranks: MPI_COMM_WORLD, or this node's (use_node_world)."""
    if _NODE_COMM is not None:
        return _NODE_COMM
    from mpi4py import MPI
    return MPI.COMM_WORLD


def init_horovod(hvd) -> None:
    """hvd.init() over this run's ranks (Horovod takes an mpi4py communicator: its MPI build)."""
    if _NODE_COMM is not None:
        hvd.init(comm=_NODE_COMM)
    else:
        hvd.init()


class Collectives:
    """Small collectives on Python values, for timing reductions and bookkeeping."""

    def __init__(self, world: World):
        self.world = world
        self._mpi = None
        if world.size > 1 and world.mpi:
            self._mpi = world_comm()
            if self._mpi.Get_size() != world.size:
                raise RuntimeError(f"MPI sees {self._mpi.Get_size()} ranks but the launcher says {world.size}")

    def _torch(self):
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"{self.world.size} ranks started by {self.world.source} but no MPI and no "
                               "torch.distributed process group: use an MPI launcher or init_torch first")
        return dist

    def allgather(self, obj) -> list:
        if self.world.size == 1:
            return [obj]
        if self._mpi is not None:
            return self._mpi.allgather(obj)
        dist = self._torch()
        out = [None] * self.world.size
        dist.all_gather_object(out, obj)
        return out

    def allreduce(self, value: float, op: str = "max") -> float:
        values = self.allgather(value)
        return {"max": max, "min": min, "sum": sum}[op](values)

    def max(self, values: list[float]) -> list[float]:
        """Element-wise max over ranks (the slowest rank's time of each step)."""
        return [max(column) for column in zip(*self.allgather(list(values)))]

    def bcast(self, obj, root: int = 0):
        if self.world.size == 1:
            return obj
        if self._mpi is not None:
            return self._mpi.bcast(obj, root=root)
        box = [obj]
        self._torch().broadcast_object_list(box, src=root)
        return box[0]

    def barrier(self) -> None:
        if self.world.size == 1:
            return
        if self._mpi is not None:
            self._mpi.Barrier()
        else:
            self._torch().barrier()


def torch_allreduce(values: list[float], op: str = "sum") -> list[float]:
    """Element-wise sum or max of a few floats over the torch.distributed group (float64, on the
    GPU under NCCL, which reduces device tensors only); the values as they are without a group."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    if dist.is_initialized() and dist.get_world_size() > 1:
        if dist.get_backend() == "nccl":
            t = t.cuda()
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return t.cpu().tolist()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


DEFAULT_TIMEOUT_S = 600
TIMEOUT_ENV = "EXABENCH_TIMEOUT_S"


def set_run_timeout(timeout_s: int | float | None) -> None:
    """The run's time limit (its spec's `timeout_s`) as the collectives' timeout of this rank and the
    processes it starts (the runner sets it before the benchmark runs)."""
    if timeout_s:
        os.environ[TIMEOUT_ENV] = str(max(1, int(timeout_s)))


def run_timeout_s(environ=None) -> int:
    """The process-group timeout: the run's own time limit, so a hung Gloo/NCCL collective never
    outlives the run (it is stopped at the limit and recorded `timeout`, not `failed` after a fixed
    600 s); 600 s outside a run."""
    value = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_TIMEOUT_S


def init_torch(world: World, backend: str, run_dir: str | Path, timeout_s: int | None = None) -> str:
    """Create the torch.distributed process group for this world; returns the init method used.
    Its timeout: `timeout_s`, else the run's time limit (run_timeout_s()).

    torchrun provides MASTER_ADDR/PORT; under MPI launchers rank 0 publishes its address
    and a free port with an MPI broadcast; otherwise a FileStore in the run directory
    (on the shared file system) is the rendezvous.
    """
    import torch.distributed as dist

    if dist.is_initialized():
        return "existing"
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        method = "env://"
    elif world.mpi and world.size > 1:
        addr = None
        if world.rank == 0:
            # Loopback when all ranks share this node; the host's address when they span nodes.
            host = "127.0.0.1" if world.local_size >= world.size else socket.gethostbyname(socket.gethostname())
            addr = f"tcp://{host}:{_free_port()}"
        method = world_comm().bcast(addr, root=0)
    else:
        # One file per job step (or per process when alone), so a stale file never joins a new run.
        key = (f"{os.environ.get('SLURM_JOB_ID')}.{os.environ.get('SLURM_STEP_ID')}" if world.source == "slurm"
               else f"single.{os.getpid()}")
        store = Path(run_dir) / f"rendezvous.{key}"
        method = f"file://{store.resolve()}"
    dist.init_process_group(backend=backend, init_method=method, rank=world.rank, world_size=world.size,
                            timeout=datetime.timedelta(seconds=timeout_s or run_timeout_s()))
    return method


def shutdown_torch() -> None:
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # without it a peer can abort while another still sends (PLATFORM.md)
        dist.destroy_process_group()
