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

from exabench.config import load_yaml, validate
from exabench.errors import ConfigError, LayoutError

# Which launchers each scheduler's allocation can use: filled by exabench.campaign.launchers from
# each launcher module's FACTS.schedulers, and by exabench.campaign.schedulers from a scheduler
# module's FACTS.launchers (a site pairing others is a config error).
LAUNCHERS_BY_SCHEDULER: dict[str, tuple[str, ...]] = {}


# The schedulers a site file may name: filled by exabench.campaign.schedulers, one per module.
SCHEDULER_NAMES: set[str] = set()
# Each scheduler's Snakemake executor plugin ("": none, its campaigns go as bundles), from the same modules.
SCHEDULER_EXECUTORS: dict[str, str] = {}


def pair_launcher(name: str, schedulers) -> None:
    """Declare that launcher `name` runs in the allocations of `schedulers`."""
    for scheduler in schedulers:
        if name not in LAUNCHERS_BY_SCHEDULER.get(scheduler, ()):
            LAUNCHERS_BY_SCHEDULER[scheduler] = LAUNCHERS_BY_SCHEDULER.get(scheduler, ()) + (name,)


def unpair_launcher(name: str, schedulers=None) -> None:
    """Undo pair_launcher, for `schedulers` (all by default)."""
    for scheduler, names in LAUNCHERS_BY_SCHEDULER.items():
        if schedulers is None or scheduler in schedulers:
            LAUNCHERS_BY_SCHEDULER[scheduler] = tuple(n for n in names if n != name)


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
    numa_domains: int = 0   # 0: one per socket
    peak_tflops: dict = field(default_factory=dict)

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def usable_cores(self) -> int:
        return self.cores - self.reserved_cores

    @property
    def numa(self) -> int:
        return self.numa_domains or self.sockets

    @property
    def gpu_visibility_var(self) -> str | None:
        return GPU_VISIBILITY_VAR.get(self.gpu_vendor)


@dataclass(frozen=True)
class Queue:
    """One queue (PBS/LSF/Cobalt queue, Slurm partition or QOS) and the jobs it admits.

    `submit_as` names the queue a job is submitted to when this one is an execution queue
    behind a routing queue (ALCF Polaris: small, medium and large are reached through prod).
    """

    name: str
    max_walltime_min: int
    min_nodes: int = 1
    max_nodes: int = 0     # 0: the machine's max_nodes
    submit_as: str = ""
    max_queued_per_user: int = 0   # jobs one user may have in it at once, any state; 0: not declared
    max_running_per_user: int = 0  # jobs one user may have running in it at once; 0: not declared
    min_walltime_min: int = 0      # shortest walltime it takes: a shorter job's header asks for this; 0: none
    charged_min_nodes: int = 0     # a smaller job is allocated and charged this many nodes (Theta: 128); 0: none
    source: str = ""               # the centre's page documenting these limits
    verified: bool = True          # False: recalled, not read on the cited page

    def admits(self, nodes: int, minutes: int, machine_nodes: int) -> bool:
        return (self.min_nodes <= nodes <= (self.max_nodes or machine_nodes)
                and minutes <= self.max_walltime_min)

    def charged_nodes(self, nodes: int) -> int:
        """The nodes a job of `nodes` is allocated and charged in this queue."""
        return max(nodes, self.charged_min_nodes)

    def describe(self, machine_nodes: int) -> str:
        via = f" via {self.submit_as}" if self.submit_as and self.submit_as != self.name else ""
        shortest = f"{self.min_walltime_min}-" if self.min_walltime_min else "at most "
        if self.charged_min_nodes:
            shortest = f"charged as at least {self.charged_min_nodes} nodes, " + shortest
        return (f"{self.name}{via} ({self.min_nodes}-{self.max_nodes or machine_nodes} nodes, "
                f"{shortest}{self.max_walltime_min} min)")

    def distance(self, nodes: int, minutes: int, machine_nodes: int) -> float:
        """How far a job of `nodes` for `minutes` is from fitting: the relative excess of nodes
        (too few or too many) plus that of walltime; 0 where the queue admits it."""
        top = self.max_nodes or machine_nodes
        return (max(0, self.min_nodes - nodes) / self.min_nodes + max(0, nodes - top) / top
                + max(0, minutes - self.max_walltime_min) / self.max_walltime_min)


@dataclass(frozen=True)
class Site:
    name: str
    scheduler: str
    launcher: str
    node: NodeSpec
    max_nodes: int = 1
    rack_nodes: int = 0                # nodes per rack (cabinet); 0: not declared
    max_walltime_min: int = 0          # 0: no limit known
    queues: tuple = ()                 # Queue, in order of preference; () = partition alone
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
    submit: str = "jobs"               # jobs: an executor plugin submits each run; bundles: scripts submitted by hand
    node_hours_budget: float = 1000    # the most node-hours a campaign may ask (exabench.campaign.budget); 0: none
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
    raw = load_yaml(path)
    _check_registered_names(path, raw)
    raw = validate(raw, "site", path)  # control characters refused there too
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
    if spec.numa_domains and (spec.cores % spec.numa_domains or spec.numa_domains % spec.sockets):
        # per_numa ranks would get unequal or cross-socket core sets: the site is wrong, not a config
        raise ConfigError(path, "node.numa_domains", spec.numa_domains,
                          f"a count that divides the node's {spec.cores} cores evenly and is a multiple of its "
                          f"{spec.sockets} socket(s) (equal domains, none across sockets), or 0 for one per socket")
    if spec.scheduler_cpus_per_core > spec.smt:
        raise ConfigError(path, "node.scheduler_cpus_per_core", spec.scheduler_cpus_per_core,
                          f"at most node.smt = {spec.smt}")
    if raw["scheduler"] not in SCHEDULER_NAMES:
        raise ConfigError(path, "scheduler", raw["scheduler"], "one of " + ", ".join(sorted(SCHEDULER_NAMES)))
    _check_submit(path, raw["scheduler"], raw["submit"])
    paired = LAUNCHERS_BY_SCHEDULER.get(raw["scheduler"], ())
    if raw["launcher"] not in paired:
        raise ConfigError(path, "launcher", raw["launcher"], f"one of {', '.join(paired)} with scheduler "
                          f"{raw['scheduler']}")
    from exabench.containers.runtime_check import check_setting  # the runtime's facts: exabench.containers.runtimes
    check_setting(path, raw["container"], raw["launcher"], spec.gpus, spec.gpu_vendor)
    if raw["rack_nodes"] > raw["max_nodes"]:
        raise ConfigError(path, "rack_nodes", raw["rack_nodes"], f"at most max_nodes = {raw['max_nodes']}")
    limits = raw["limits"]
    queues = tuple(Queue(**q) for q in raw["queues"])
    _check_queues(path, queues, raw["partition"], raw["max_nodes"], limits["max_walltime_min"])
    return Site(name=raw["name"], scheduler=raw["scheduler"], launcher=raw["launcher"], node=spec,
                max_nodes=raw["max_nodes"], rack_nodes=raw["rack_nodes"], node_hours_budget=raw["node_hours_budget"],
                max_walltime_min=limits["max_walltime_min"], queues=queues,
                python=raw["python"],
                env=dict(raw["env"]), modules=tuple(raw["modules"]), description=raw["description"],
                sources=tuple(raw["sources"]), mpi=raw["mpi"], account=raw["account"],
                partition=raw["partition"], qos=raw["qos"], constraint=raw["constraint"],
                scheduler_options=dict(raw["scheduler_options"]), launcher_options=dict(raw["launcher_options"]),
                container=dict(raw["container"]), storage=dict(raw["storage"]), network=dict(raw["network"]),
                submit=raw["submit"], path=path)


def _check_submit(path: str, scheduler: str, submit: str) -> None:
    """`submit: jobs` (the default) where no Snakemake executor plugin submits the scheduler's jobs (PBS,
    Cobalt): Snakemake would start every run on the login node itself."""
    if submit == "jobs" and scheduler != "none" and not SCHEDULER_EXECUTORS.get(scheduler):
        with_plugin = ", ".join(n for n, executor in sorted(SCHEDULER_EXECUTORS.items()) if executor)
        raise ConfigError(path, "submit", submit, f"bundles with scheduler {scheduler} (batch scripts from the "
                          f"`bundle` target, submitted by hand); jobs is for schedulers with a plugin: {with_plugin}",
                          f"has no executor plugin to submit each run with scheduler {scheduler}, so every run "
                          "would start on this machine")


def _check_registered_names(path: str, raw) -> None:
    """A scheduler, launcher or container runtime that is not registered, named with the registered
    ones: the schema's name pattern would only say `a string matching ^[a-z]...` of `LSF` or `Shifter`."""
    if not isinstance(raw, dict):
        return  # the schema says what the top level must be
    from exabench.containers import runtimes  # not at import: the runtimes' modules import this one
    container = raw.get("container")
    scheduler = raw.get("scheduler")
    launcher_names = sorted({n for names in LAUNCHERS_BY_SCHEDULER.values() for n in names})
    registered = (("scheduler", scheduler, sorted(SCHEDULER_NAMES), "one of ", ""),
                  ("launcher", raw.get("launcher"), launcher_names, "one of ", ""),
                  ("container.runtime", container.get("runtime") if isinstance(container, dict) else None,
                   [runtimes.NONE, *sorted(runtimes.RUNTIMES)], "", ""))
    for key, value, names, lead, tail in registered:
        if isinstance(value, str) and value not in names:
            if key == "launcher" and scheduler in SCHEDULER_NAMES:  # those its allocations start
                names, tail = LAUNCHERS_BY_SCHEDULER.get(scheduler, ()), f" with scheduler {scheduler}"
            raise ConfigError(path, key, value, lead + ", ".join(names) + tail)


def _check_queues(path: str, queues: tuple, partition: str, machine_nodes: int, site_walltime_min: int) -> None:
    """Refuse a queue model that contradicts itself or the machine: a job script would otherwise ask
    for what no queue grants (90 minutes of a 60-minute queue, 200 nodes of a 100-node machine)."""
    names = [q.name for q in queues]
    for i, q in enumerate(queues):
        at, of = f"queues[{i}]", f"(queue {q.name}) "
        if q.name in names[:i]:
            raise ConfigError(path, f"queues[{i}].name", q.name, "a name not used by an earlier queue")
        if q.max_nodes and q.max_nodes < q.min_nodes:
            raise ConfigError(path, f"{at}.max_nodes", q.max_nodes, f"at least min_nodes = {q.min_nodes}",
                              of + "is below min_nodes")
        if q.max_nodes > machine_nodes:
            raise ConfigError(path, f"{at}.max_nodes", q.max_nodes, f"at most the machine's max_nodes = "
                              f"{machine_nodes} (0: all of them)", of + "is wider than the machine")
        if q.min_nodes > machine_nodes:
            raise ConfigError(path, f"{at}.min_nodes", q.min_nodes, f"at most max_nodes = {machine_nodes}",
                              of + "is more than the machine has")
        if q.charged_min_nodes > machine_nodes:
            raise ConfigError(path, f"{at}.charged_min_nodes", q.charged_min_nodes,
                              f"at most the machine's max_nodes = {machine_nodes} (0: none)",
                              of + "is more than the machine has")
        if q.min_walltime_min > q.max_walltime_min:
            raise ConfigError(path, f"{at}.min_walltime_min", q.min_walltime_min,
                              f"at most the queue's max_walltime_min = {q.max_walltime_min} (0: none)",
                              of + "is above the queue's longest walltime")
        if site_walltime_min and q.min_walltime_min > site_walltime_min:
            raise ConfigError(path, f"{at}.min_walltime_min", q.min_walltime_min,
                              f"at most the site's limits.max_walltime_min = {site_walltime_min} (0: none)",
                              of + "is above the site's walltime limit")
        if q.max_queued_per_user and q.max_queued_per_user < q.max_running_per_user:
            raise ConfigError(path, f"{at}.max_queued_per_user", q.max_queued_per_user,
                              f"at least max_running_per_user = {q.max_running_per_user} (a running job is "
                              "also queued), or 0: not declared", of + "is below max_running_per_user")
    if partition and queues and partition not in {q.submit_as or q.name for q in queues} | set(names):
        raise ConfigError(path, "partition", partition,
                          f"empty (the queue is picked by walltime and nodes) or one of: {', '.join(names)}")


def default_config_file(site_path: str | Path | None) -> str:
    """The campaign a site runs by default: the `configfile` of the Snakemake profile beside its
    site.yaml (profiles/<site>/config.yaml), else the embedded default config/config.yaml."""
    from exabench.config import load_yaml

    profile = Path(site_path).parent / "config.yaml" if site_path else None
    if profile is None or not profile.is_file():
        return "config/config.yaml"
    named = (load_yaml(profile) or {}).get("configfile") or "config/config.yaml"
    return str(named[-1] if isinstance(named, list) else named)


@dataclass(frozen=True)
class Layout:
    """How one run is spread over the machine.

    Each rank holds cores_per_rank whole cores (default: just enough for its threads) and
    runs threads_per_rank OpenMP/BLAS threads on them, smt hardware threads per core.
    GPUs: a rank owns gpus_per_rank of them, or (gpus_per_rank 0, ranks_per_gpu k > 1) k ranks
    share each GPU. ranks_per_set groups the ranks of a node into sets that pool their cores
    and GPUs, each rank seeing its whole set's GPUs (jsrun's resource set with -a k; OLCF's
    6-rank, 6-GPU, 42-core set per Summit node); 0 is the usual grouping: one set per rank, or
    per shared GPU. Every field is a count per node or per rank, so a machine-relative request
    (one rank per GPU, fill the node) only has to compute these numbers.
    """

    nodes: int
    ranks_per_node: int
    threads_per_rank: int
    gpus_per_rank: int = 0
    smt: int = 1
    ranks_per_gpu: int = 0
    cores_per_rank: int = 0  # 0: ceil(threads_per_rank / smt)
    ranks_per_set: int = 0   # 0: one set per rank (per GPU when ranks share GPUs)

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

    @property
    def set_size(self) -> int:
        """Ranks per set: ranks_per_set, else one set per rank or per shared GPU."""
        return self.ranks_per_set or max(1, self.ranks_per_gpu)

    @property
    def gpus_per_set(self) -> int:
        return self.gpus_per_node * self.set_size // self.ranks_per_node

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in _LAYOUT_FIELDS}
        if not self.ranks_per_set:
            del d["ranks_per_set"]  # left out at its default, so that specs written before stay the same
        return {**d, "ranks": self.ranks}


_LAYOUT_FIELDS = tuple(f.name for f in fields(Layout))  # all ints: to_dict needs no asdict copy
# The keys a config may sweep to size a run (the rest of a sweep are benchmark parameters).
LAYOUT_KEYS = ("nodes", "ranks_per_node", "threads_per_rank", "gpus_per_rank", "smt", "cores_per_rank",
               "ranks_per_gpu", "ranks_per_set")


# Machine-relative layout values a config may give instead of counts (docs/clusters.md).
RANKS_PER_NODE_WORDS = ("per_gpu", "per_socket", "per_numa", "per_node")
FILL = "fill"  # threads_per_rank: the rank's share of the usable cores, times smt
# Named node scales: `tiny` (laptops, CI) and `node` are one node; `rack` a ladder to the site's
# rack_nodes, `machine` a ladder to its max_nodes.
SCALE_BANDS = ("tiny", "node", "rack", "machine")


def ranks_per_node_of(site: Site, value) -> int:
    """A ranks_per_node request as a count: an integer as is, or one rank per GPU, socket, NUMA
    domain or node."""
    if value not in RANKS_PER_NODE_WORDS:
        raise LayoutError(site.name, "ranks_per_node", value,
                          f"a positive integer or one of {', '.join(RANKS_PER_NODE_WORDS)}")
    n = site.node
    if value == "per_gpu":
        if not n.gpus:
            raise LayoutError(site.name, "ranks_per_node", value,
                              "per_socket, per_numa, per_node or a count on a site without GPUs (node.gpus = 0)")
        return n.gpus
    return {"per_socket": n.sockets, "per_numa": n.numa, "per_node": 1}[value]


def _pow2_ladder(low: int, high: int) -> list[int]:
    out, k = [], low
    while k <= high:
        out.append(k)
        k *= 2
    return out


def _node_bound(site: Site, text: str, spec) -> int:
    """One end of a ladder: an integer, `max` (the machine), `rack`, or a fraction `a/b` of the machine."""
    text = text.strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    if text == "max":
        return site.max_nodes
    if text == "rack":
        if not site.rack_nodes:
            raise LayoutError(site.name, "rack_nodes", 0, f"declared in {site.path or 'the site file'} for {spec!r}")
        return site.rack_nodes
    a, slash, b = text.partition("/")
    if slash and a.isdigit() and b.isdigit() and 0 < int(a) <= int(b):
        return max(1, site.max_nodes * int(a) // int(b))
    raise LayoutError(site.name, "nodes", spec, "a count, a list, a scale band (" + ", ".join(SCALE_BANDS)
                      + ") or a ladder 'A..B' (A, B: counts, max, rack, or a fraction a/b of max_nodes)")


def node_counts(site: Site, spec) -> list[int]:
    """The node counts of a `nodes` request, each within the site's max_nodes: a list of counts
    (or fractions 'a/b' of the machine), a scale band, or a ladder 'A..B' of powers of two from A
    that stops at B and at max_nodes ('1..64', '1..max', '1..1/8', '1..rack')."""
    if isinstance(spec, list):
        counts = [v if isinstance(v, int) and not isinstance(v, bool) else _node_bound(site, str(v), v) for v in spec]
    elif not isinstance(spec, str):
        counts = [spec]
    elif spec in ("tiny", "node"):
        counts = [1]
    elif spec in ("rack", "machine"):
        counts = node_counts(site, f"1..{'rack' if spec == 'rack' else 'max'}")
        # A band is the machine's, as its queues let it be used: counts no queue admits (Theta's 16 to
        # 64 nodes, below the default queue's 128-node minimum; Polaris past large's 496) are left out.
        counts = [c for c in counts if queue_admits_nodes(site, c)] or counts
    elif ".." in spec:
        low_text, _, high_text = spec.partition("..")
        low, high = _node_bound(site, low_text, spec), _node_bound(site, high_text, spec)
        if low > min(high, site.max_nodes):
            raise LayoutError(site.name, "nodes", spec, f"a ladder whose start is at most its end and max_nodes "
                              f"= {site.max_nodes}")
        counts = _pow2_ladder(low, min(high, site.max_nodes))
    else:
        counts = [_node_bound(site, spec, spec)]
    for c in counts:
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= site.max_nodes:
            raise LayoutError(site.name, "nodes", c, f"1 to max_nodes = {site.max_nodes}")
    return list(dict.fromkeys(counts))


def queue_admits_nodes(site: Site, nodes: int) -> bool:
    """Whether some queue a job may go to admits `nodes` nodes (any walltime) and charges no more;
    True without queues."""
    if not site.queues:
        return True
    return any(max(q.min_nodes, q.charged_min_nodes) <= nodes <= (q.max_nodes or site.max_nodes)
               for q in candidate_queues(site))


def _default_ranks_per_node(n: NodeSpec, gpus_per_rank: int | None, ranks_per_gpu: int | None) -> int:
    if not n.gpus:
        return 1
    if ranks_per_gpu:
        return n.gpus * ranks_per_gpu
    return max(1, n.gpus // max(1, gpus_per_rank or 1))


def _gpu_sharing(site: Site, ranks_per_node: int, gpus_per_rank: int | None,
                 ranks_per_gpu: int | None) -> tuple[int, int]:
    """(gpus_per_rank, ranks_per_gpu) of a request: GPUs owned per rank, or ranks sharing each GPU."""
    n = site.node
    if ranks_per_gpu is not None:
        if ranks_per_gpu < 1:
            raise LayoutError(site.name, "ranks_per_gpu", ranks_per_gpu, "at least 1")
        if not n.gpus:
            raise LayoutError(site.name, "ranks_per_gpu", ranks_per_gpu, "unset on a site without GPUs (node.gpus = 0)")
        if gpus_per_rank:
            raise LayoutError(site.name, "gpus_per_rank", gpus_per_rank,
                              "unset (or 0) with ranks_per_gpu: ranks that share a GPU own none")
        if ranks_per_node % ranks_per_gpu or ranks_per_node // ranks_per_gpu > n.gpus:
            raise LayoutError(site.name, "ranks_per_node", ranks_per_node,
                              f"a multiple of ranks_per_gpu = {ranks_per_gpu}, at most {ranks_per_gpu} x the "
                              f"node's {n.gpus} GPUs")
        return (1, 1) if ranks_per_gpu == 1 else (0, ranks_per_gpu)
    if gpus_per_rank is None:
        if n.gpus and ranks_per_node > n.gpus:
            if ranks_per_node % n.gpus:
                raise LayoutError(site.name, "ranks_per_node", ranks_per_node,
                                  f"a multiple of the node's {n.gpus} GPUs when ranks share GPUs "
                                  f"(or set gpus_per_rank: 0 for a CPU-only run)")
            return 0, ranks_per_node // n.gpus
        if n.gpus:
            if n.gpus % ranks_per_node:
                raise LayoutError(site.name, "ranks_per_node", ranks_per_node,
                                  f"a divisor of the node's {n.gpus} GPUs so each rank gets as many "
                                  f"(or set gpus_per_rank to leave GPUs idle on purpose)")
            return n.gpus // ranks_per_node, 1
        return 0, 0
    if gpus_per_rank < 0:
        raise LayoutError(site.name, "gpus_per_rank", gpus_per_rank, "at least 0")
    return gpus_per_rank, 1 if gpus_per_rank else 0


def resolve_layout(site: Site, nodes: int = 1, ranks_per_node: int | None = None,
                   threads_per_rank: int | None = None, gpus_per_rank: int | None = None,
                   smt: int | None = None, cores_per_rank: int | None = None,
                   ranks_per_gpu: int | None = None, ranks_per_set: int | None = None) -> Layout:
    """Fill in defaults and check the request fits one node of the site (and the machine).

    Defaults: one rank per GPU (one per node without GPUs; ranks_per_gpu per GPU when given);
    the usable cores shared evenly between the ranks of a node, so ranks never oversubscribe
    cores; one thread per core held (times smt). Threads alone given: just enough cores for
    them. More ranks than GPUs (and no gpus_per_rank) means ranks share GPUs evenly, fewer that
    each rank owns as many (a campaign refuses that unless it asks: exabench.campaign.plan).
    Machine-relative values: ranks_per_node per_gpu / per_socket / per_numa / per_node, and
    threads_per_rank `fill` (the default spelled out).
    """
    n = site.node
    if isinstance(ranks_per_node, str):
        ranks_per_node = ranks_per_node_of(site, ranks_per_node)
    if threads_per_rank == FILL:
        threads_per_rank = None  # the default: the rank's share of the usable cores, times smt
    for name, value in (("nodes", nodes), ("ranks_per_node", ranks_per_node), ("threads_per_rank", threads_per_rank),
                        ("gpus_per_rank", gpus_per_rank), ("smt", smt), ("cores_per_rank", cores_per_rank),
                        ("ranks_per_gpu", ranks_per_gpu), ("ranks_per_set", ranks_per_set)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise LayoutError(site.name, name, value, "an integer")
    smt = 1 if smt is None else smt
    if smt < 1 or smt > n.smt or n.smt % smt:
        raise LayoutError(site.name, "smt", smt, f"a divisor of node.smt = {n.smt} (1 to {n.smt})")
    if nodes < 1 or nodes > site.max_nodes:
        raise LayoutError(site.name, "nodes", nodes, f"1 to max_nodes = {site.max_nodes}")
    if ranks_per_node is None:
        ranks_per_node = _default_ranks_per_node(n, gpus_per_rank, ranks_per_gpu)
    if ranks_per_node < 1:
        raise LayoutError(site.name, "ranks_per_node", ranks_per_node, "at least 1")
    gpus_per_rank, ranks_per_gpu = _gpu_sharing(site, ranks_per_node, gpus_per_rank, ranks_per_gpu)
    if ranks_per_set is not None:
        if ranks_per_set < 1 or ranks_per_node % ranks_per_set or ranks_per_set % max(1, ranks_per_gpu):
            raise LayoutError(site.name, "ranks_per_set", ranks_per_set,
                              f"a divisor of ranks_per_node = {ranks_per_node} and a multiple of the ranks "
                              f"sharing a GPU ({max(1, ranks_per_gpu)})")
        if ranks_per_set == max(1, ranks_per_gpu):
            ranks_per_set = 0  # the usual grouping: same layout, same run id
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
    layout = Layout(nodes, ranks_per_node, threads_per_rank, gpus_per_rank, smt, ranks_per_gpu, cores_per_rank,
                    ranks_per_set or 0)
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
    if layout.ranks_per_node % layout.set_size or layout.set_size % max(1, layout.ranks_per_gpu):
        raise LayoutError(site.name, "ranks_per_set", layout.ranks_per_set,
                          f"a divisor of ranks_per_node = {layout.ranks_per_node} and a multiple of ranks_per_gpu")


# Minutes a job script asks for beyond its run's timeout_s (start-up, the record, a slow file system).
WALLTIME_MARGIN_MIN = 5


def job_minutes(timeout_s: int) -> int:
    """The allocation a run limited to timeout_s asks for, in minutes."""
    return math.ceil(timeout_s / 60) + WALLTIME_MARGIN_MIN


def bundle_minutes(timeouts_s) -> int:
    """The allocation of a bundle running runs with these time limits one after another."""
    return sum(math.ceil(t / 60) for t in timeouts_s) + WALLTIME_MARGIN_MIN


def check_walltime(site: Site, minutes: int, nodes: int | None = None) -> str:
    """The queue a job of `minutes` on `nodes` nodes goes to (the site's partition where it lists
    no queues); LayoutError where the site's limit or every queue refuses it. Without `nodes`,
    only the site-wide limit is checked."""
    if minutes < 1:
        raise LayoutError(site.name, "walltime_min", minutes, "at least 1 minute")
    if site.max_walltime_min and minutes > site.max_walltime_min:
        raise LayoutError(site.name, "walltime_min", minutes,
                          f"limits.max_walltime_min = {site.max_walltime_min} for this site")
    return site.partition if nodes is None else pick_queue(site, nodes, minutes)


def queue_entry(site: Site, nodes: int, minutes: int) -> Queue | None:
    """The queue entry (a bin, not only its submit name) a job goes to; None without queues."""
    return next((q for q in candidate_queues(site) if q.admits(nodes, minutes, site.max_nodes)), None)


def candidate_queues(site: Site) -> list[Queue]:
    """The queues a job may go to: all the site's, in order, or only the one `partition` names."""
    return [q for q in site.queues if not site.partition or site.partition in (q.name, q.submit_as)]


def pick_queue(site: Site, nodes: int, minutes: int) -> str:
    """The first of the site's queues (in the order listed) that admits `nodes` nodes for
    `minutes`, as the name to submit to; only the queue named by `partition` if one is."""
    if not site.queues:
        return site.partition
    candidates = candidate_queues(site)
    if not candidates:  # a Site built in Python, past load_site's check
        raise ConfigError(site.path or site.name, "partition", site.partition,
                          f"empty or one of the site's queues: {', '.join(q.name for q in site.queues)}")
    for q in candidates:
        if q.admits(nodes, minutes, site.max_nodes):
            return q.submit_as or q.name
    named = f"partition {site.partition}: " if site.partition else ""
    closest = min(candidates, key=lambda q: q.distance(nodes, minutes, site.max_nodes))
    raise LayoutError(site.name, "walltime_min and nodes", f"{minutes} min on {nodes} node(s)",
                      f"a queue that admits them (closest: {closest.describe(site.max_nodes)}; {named}"
                      + "; ".join(q.describe(site.max_nodes) for q in candidates) + ")")
