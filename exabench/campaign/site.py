"""The site model: one machine's nodes, scheduler and launcher, and the resource
arithmetic that turns a request (nodes, ranks, threads, GPUs, SMT) into a layout that
fits a node, or an error naming the site, the field, the value and the limit it breaks.

Launcher lines are built from a Layout by exabench/campaign/launchers/; this module only decides
whether a layout fits, so every launcher shares one definition of "fits".
"""

from __future__ import annotations

import math
import os
import platform
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

from exabench.config import load_and_validate
from exabench.errors import ConfigError, LayoutError

# Launchers that start MPI ranks (an MPI benchmark needs one of these).
MPI_LAUNCHERS = ("mpirun", "srun", "jsrun", "aprun", "ibrun", "mpiexec")
# Which launchers a scheduler's allocation can use (a site pairing others is a config error).
LAUNCHERS_BY_SCHEDULER = {
    "none": ("mpirun", "torchrun", "local"),
    "slurm": ("srun", "ibrun", "mpirun", "torchrun", "local"),
    "lsf": ("jsrun", "mpirun", "local"),
    "pbs": ("mpiexec", "aprun", "mpirun", "local"),
    "cobalt": ("aprun", "mpiexec", "local"),
}
GPU_VISIBILITY_VAR = {"nvidia": "CUDA_VISIBLE_DEVICES", "amd": "ROCR_VISIBLE_DEVICES", "intel": "ZE_AFFINITY_MASK"}


@dataclass(frozen=True)
class NodeSpec:
    sockets: int
    cores_per_socket: int
    reserved_cores: int = 0
    smt: int = 1
    gpus: int = 0
    gpu_vendor: str = "none"
    gpu_model: str = ""
    # What a container image must be built for: the CPU architecture, and the GPUs' generation
    # (NVIDIA compute capability "7.0", AMD gfx target "gfx90a"; "" = not declared).
    arch: str = "x86_64"
    gpu_arch: str = ""
    memory_gb: float = 0.0
    # Hardware threads the scheduler counts as one "CPU" per core (Slurm's -c unit): NERSC
    # counts every hyperthread (Perlmutter 2, Cori KNL 4); Frontier's default is 1 per core.
    scheduler_cpus_per_core: int = 1
    peak_tflops: dict = field(default_factory=dict)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def usable_cores(self) -> int:
        return self.cores - self.reserved_cores

    @property
    def gpu_visibility_var(self) -> str | None:
        return GPU_VISIBILITY_VAR.get(self.gpu_vendor)


@dataclass(frozen=True)
class Site:
    name: str
    scheduler: str
    launcher: str
    node: NodeSpec
    max_nodes: int = 1
    max_walltime_min: int = 0          # 0: no limit known
    python: str = "auto"
    env: dict = field(default_factory=dict)
    modules: tuple = ()
    description: str = ""
    sources: tuple = ()
    mpi: str = "openmpi"
    account: str = ""
    partition: str = ""                # Slurm partition, LSF/PBS/Cobalt queue
    qos: str = ""
    constraint: str = ""
    scheduler_options: dict = field(default_factory=dict)
    launcher_options: dict = field(default_factory=dict)
    container: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)
    network: dict = field(default_factory=dict)   # {interconnect, <level>_<bandwidth|latency>: {value, source}}
    path: str = ""

    @property
    def python_executable(self) -> str:
        return sys.executable if self.python == "auto" else self.python


def _local_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def load_site(path: str | Path) -> Site:
    path = str(path)
    raw = load_and_validate(path, "site")  # control characters refused there too
    node = dict(raw["node"])
    if node["cores_per_socket"] == "auto":
        if raw["scheduler"] != "none":
            raise ConfigError(path, "node.cores_per_socket", "auto",
                              "an integer (auto is for sites with scheduler: none)")
        node["cores_per_socket"] = max(1, _local_cores() // node["sockets"])
    gpu = node.pop("gpu", {}) or {}
    node["gpu_vendor"] = gpu.get("vendor", "none")
    node["gpu_model"] = gpu.get("model", "")
    node["gpu_arch"] = str(gpu.get("arch", ""))
    if node.get("arch", "x86_64") == "auto":  # the machine Snakemake runs on
        node["arch"] = platform.machine()
    node.setdefault("scheduler_cpus_per_core", 1)
    spec = NodeSpec(**node)
    if spec.reserved_cores >= spec.cores:
        raise ConfigError(path, "node.reserved_cores", spec.reserved_cores, f"fewer than the node's {spec.cores} cores")
    if spec.gpus and spec.gpu_vendor == "none":
        raise ConfigError(path, "node.gpu.vendor", "none", "nvidia, amd or intel when node.gpus > 0")
    if spec.scheduler_cpus_per_core > spec.smt:
        raise ConfigError(path, "node.scheduler_cpus_per_core", spec.scheduler_cpus_per_core,
                          f"at most node.smt = {spec.smt}")
    if raw["launcher"] not in LAUNCHERS_BY_SCHEDULER[raw["scheduler"]]:
        raise ConfigError(path, "launcher", raw["launcher"],
                          f"one of {', '.join(LAUNCHERS_BY_SCHEDULER[raw['scheduler']])} with scheduler "
                          f"{raw['scheduler']}")
    limits = raw["limits"]
    return Site(name=raw["name"], scheduler=raw["scheduler"], launcher=raw["launcher"], node=spec,
                max_nodes=raw["max_nodes"], max_walltime_min=limits["max_walltime_min"], python=raw["python"],
                env=dict(raw["env"]), modules=tuple(raw["modules"]), description=raw["description"],
                sources=tuple(raw["sources"]), mpi=raw["mpi"], account=raw["account"],
                partition=raw["partition"], qos=raw["qos"], constraint=raw["constraint"],
                scheduler_options=dict(raw["scheduler_options"]), launcher_options=dict(raw["launcher_options"]),
                container=dict(raw["container"]), storage=dict(raw["storage"]), network=dict(raw["network"]),
                path=path)


@dataclass(frozen=True)
class Layout:
    """How one run is spread over the machine.

    Each rank holds cores_per_rank whole cores (default: just enough for its threads) and
    runs threads_per_rank OpenMP/BLAS threads on them, smt hardware threads per core.
    ranks_per_gpu > 1 means ranks share a GPU (jsrun -a k per GPU set with gpumps).
    """

    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    gpus_per_rank: int = 0
    smt: int = 1
    ranks_per_gpu: int = 0
    cores_per_rank: int = 0  # 0: ceil(threads_per_rank / smt)

    def __post_init__(self):
        if not self.cores_per_rank:
            object.__setattr__(self, "cores_per_rank", math.ceil(self.threads_per_rank / max(1, self.smt)))

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def gpus_per_node(self) -> int:
        if self.ranks_per_gpu > 1:
            return self.ranks_per_node // self.ranks_per_gpu
        return self.gpus_per_rank * self.ranks_per_node

    def to_dict(self) -> dict:
        return {**{k: getattr(self, k) for k in _LAYOUT_FIELDS}, "ranks": self.ranks}


_LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))  # all ints: to_dict needs no asdict copy
LAYOUT_KEYS = ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank", "smt", "cores_per_rank")


def _default_ranks_per_node(n: NodeSpec, gpus_per_rank: int | None) -> int:
    if not n.gpus:
        return 1
    return max(1, n.gpus // max(1, gpus_per_rank or 1))


def resolve_layout(site: Site, nodes: int = 1, ranks_per_node: int | None = None,
                   threads_per_rank: int | None = None, gpus_per_rank: int | None = None,
                   smt: int | None = None, cores_per_rank: int | None = None) -> Layout:
    """Fill in defaults and check the request fits one node of the site (and the machine).

    Defaults: one rank per GPU (one per node without GPUs); the usable cores shared evenly
    between the ranks of a node, so ranks never oversubscribe cores; one thread per core
    held (times smt). Threads alone given: just enough cores for them. More ranks than GPUs
    (and no gpus_per_rank) means ranks share GPUs evenly.
    """
    n = site.node
    for name, value in (("nodes", nodes), ("ranks_per_node", ranks_per_node), ("threads_per_rank", threads_per_rank),
                        ("gpus_per_rank", gpus_per_rank), ("smt", smt), ("cores_per_rank", cores_per_rank)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise LayoutError(site.name, name, value, "an integer")
    smt = 1 if smt is None else smt
    if smt < 1 or smt > n.smt or n.smt % smt:
        raise LayoutError(site.name, "smt", smt, f"a divisor of node.smt = {n.smt} (1 to {n.smt})")
    if nodes < 1 or nodes > site.max_nodes:
        raise LayoutError(site.name, "nodes", nodes, f"1 to max_nodes = {site.max_nodes}")
    if ranks_per_node is None:
        ranks_per_node = _default_ranks_per_node(n, gpus_per_rank)
    if ranks_per_node < 1:
        raise LayoutError(site.name, "ranks_per_node", ranks_per_node, "at least 1")
    ranks_per_gpu = 0
    if gpus_per_rank is None:
        if n.gpus and ranks_per_node > n.gpus:
            if ranks_per_node % n.gpus:
                raise LayoutError(site.name, "ranks_per_node", ranks_per_node,
                                  f"a multiple of the node's {n.gpus} GPUs when ranks share GPUs "
                                  f"(or set gpus_per_rank: 0 for a CPU-only run)")
            gpus_per_rank, ranks_per_gpu = 0, ranks_per_node // n.gpus
        elif n.gpus:
            if n.gpus % ranks_per_node:
                raise LayoutError(site.name, "ranks_per_node", ranks_per_node,
                                  f"a divisor of the node's {n.gpus} GPUs so each rank gets as many "
                                  f"(or set gpus_per_rank to leave GPUs idle on purpose)")
            gpus_per_rank = n.gpus // ranks_per_node
        else:
            gpus_per_rank = 0
    if gpus_per_rank < 0:
        raise LayoutError(site.name, "gpus_per_rank", gpus_per_rank, "at least 0")
    if gpus_per_rank and not ranks_per_gpu:
        ranks_per_gpu = 1
    if cores_per_rank is not None and cores_per_rank < 1:
        raise LayoutError(site.name, "cores_per_rank", cores_per_rank, "at least 1")
    if threads_per_rank is None:
        threads_per_rank = (cores_per_rank or max(1, n.usable_cores // ranks_per_node)) * smt
    if threads_per_rank < 1:
        raise LayoutError(site.name, "threads_per_rank", threads_per_rank, "at least 1")
    if cores_per_rank is None:
        cores_per_rank = math.ceil(threads_per_rank / smt)
    if threads_per_rank > cores_per_rank * smt:
        raise LayoutError(site.name, "threads_per_rank", threads_per_rank,
                          f"cores_per_rank x smt = {cores_per_rank} x {smt} = {cores_per_rank * smt} "
                          "hardware threads per rank")
    layout = Layout(nodes, ranks_per_node, threads_per_rank, gpus_per_rank, smt, ranks_per_gpu, cores_per_rank)
    check_layout(site, layout)
    return layout


def check_layout(site: Site, layout: Layout) -> None:
    """Raise LayoutError if `layout` does not fit one node of `site` or the machine."""
    n = site.node
    if layout.nodes < 1 or layout.nodes > site.max_nodes:
        raise LayoutError(site.name, "nodes", layout.nodes, f"1 to max_nodes = {site.max_nodes}")
    if layout.smt < 1 or layout.smt > n.smt:
        raise LayoutError(site.name, "smt", layout.smt, f"1 to node.smt = {n.smt}")
    if layout.threads_per_rank > layout.cores_per_rank * layout.smt:
        raise LayoutError(site.name, "threads_per_rank", layout.threads_per_rank,
                          f"cores_per_rank x smt = {layout.cores_per_rank * layout.smt} hardware threads per rank")
    used = layout.ranks_per_node * layout.cores_per_rank
    if used > n.usable_cores:
        raise LayoutError(site.name, "ranks_per_node x cores_per_rank", used,
                          f"{n.usable_cores} usable cores per node ({n.cores} cores - {n.reserved_cores} reserved; "
                          f"asked {layout.ranks_per_node} ranks x {layout.cores_per_rank} cores)")
    if layout.gpus_per_rank * layout.ranks_per_node > n.gpus:
        raise LayoutError(site.name, "ranks_per_node x gpus_per_rank", layout.gpus_per_rank * layout.ranks_per_node,
                          f"{n.gpus} GPUs per node")
    if layout.ranks_per_gpu > 1 and layout.ranks_per_node % layout.ranks_per_gpu:
        raise LayoutError(site.name, "ranks_per_node", layout.ranks_per_node,
                          f"a multiple of ranks_per_gpu = {layout.ranks_per_gpu}")


# Minutes a job script asks for beyond its run's timeout_s (start-up, the record, a slow file system).
WALLTIME_MARGIN_MIN = 5


def check_walltime(site: Site, minutes: int) -> None:
    if minutes < 1:
        raise LayoutError(site.name, "walltime_min", minutes, "at least 1 minute")
    if site.max_walltime_min and minutes > site.max_walltime_min:
        raise LayoutError(site.name, "walltime_min", minutes,
                          f"limits.max_walltime_min = {site.max_walltime_min} for this site")
