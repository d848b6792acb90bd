"""One job's allocation: what the scheduler is asked for, computed once.

`job(site, layout, minutes)` is the one source of a job's nodes, tasks, CPUs per task, GPUs,
memory, queue and walltime: the batch header (render.batch_request) and the executor plugins'
resources (pipeline.job_resources) both read its JobAllocation, so that they cannot disagree
(tests/unit/test_allocation.py renders every profile's runs and compares the two). `request(site,
layout)` is its allocation-wide part; a bundle (exabench.campaign.bundles) holds only runs
whose requests are equal, because a bundle has one header for all its runs. What varies from one
launch to the next inside an allocation (ranks, threads, binding, the launcher's -j/--depth) is
the launch line's business and not part of the request.

The allocation-wide settings each scheduler adds (SMT mode, MPS, GPUs asked for, NVMe) are its
module's `request` (exabench.campaign.schedulers: LSF `-alloc_flags "smtN gpumps nvme"`, Slurm
`--threads-per-core`, `--gpus-per-node`, `-C nvme`; PBS and Cobalt sites pick hardware threads per
launch, aprun -j, mpiexec --depth, so SMT is no part of their request). Here: node-local storage
(NVMe or a DataWarp burst buffer, `#DW jobdw`, asked for when the site stages data in), core
specialisation, CPU frequency and exclusive nodes where the scheduler renders them
(FACTS.renders), the site's queue, account, QoS, constraint and its own extra directives.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from exabench.campaign import launchers, schedulers
from exabench.campaign.launchers import srun as srun_arith
from exabench.campaign.site import Layout, Site, bundle_minutes, check_walltime, queue_entry
from exabench.errors import ConfigError


@dataclass(frozen=True)
class AllocationRequest:
    """What one job asks the scheduler for, beyond its nodes and walltime (module docstring)."""

    smt: int = 0                # hardware threads per core set for the allocation; 0: set per launch
    gpu_mode: str = ""          # "mps": ranks share GPUs through MPS; "": one process per GPU
    gpus_per_node: int = 0      # GPUs asked for in the header; 0: they come with the nodes
    node_local: str = ""        # "nvme", "burst_buffer" or "" (none asked for)
    burst_buffer_gb: int = 0
    core_spec: int = 0          # cores per node kept for the system; 0: the site's default
    cpu_freq: str = ""          # "": the site's default
    exclusive: bool = False
    queue: str = ""             # the site's configured queue (partition); the bundle's bin is picked by size
    account: str = ""
    qos: str = ""
    constraint: str = ""
    alloc_flags: tuple = ()     # LSF -alloc_flags words, smt and gpumps included
    extra: tuple = ()           # the site's own header directives

    def differences(self, other: "AllocationRequest") -> list[str]:
        """The settings in which two requests differ, as 'name a vs b'."""
        return [f"{f.name} {getattr(self, f.name)!r} vs {getattr(other, f.name)!r}" for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]

    def describe(self) -> str:
        """The settings that are not at their defaults, for plan tables ('smt4 mps nvme')."""
        words = []
        if self.smt:
            words.append(f"smt{self.smt}")
        words += [w for w in (self.gpu_mode, self.node_local) if w]
        if self.gpus_per_node:
            words.append(f"gpus{self.gpus_per_node}")
        if self.core_spec:
            words.append(f"corespec{self.core_spec}")
        if self.cpu_freq:
            words.append(f"freq{self.cpu_freq}")
        if self.exclusive:
            words.append("exclusive")
        return " ".join(words) or "-"


def submit_line(site: Site, script) -> str:
    """The shell line that submits the batch script at `script` on `site` (the scheduler module's
    FACTS.submit: `bsub < x.sh`, `sbatch x.sh`)."""
    return schedulers.submit_line(site, script)


# The share of a node's memory a job asks for (Slurm --mem, per node): the rest is the system's, and a
# job asking more than a node's configured RealMemory never starts.
MEMORY_SHARE = 0.9


@dataclass(frozen=True)
class JobAllocation:
    """Everything one job asks the scheduler for; a 0 or "" is a value not asked (the scheduler's
    default applies), in the header and the executor's resources alike."""

    nodes: int
    tasks: int
    tasks_per_node: int      # 0: srun's --ntasks-per-gpu placement, which refuses --ntasks-per-node
    cpus_per_task: int       # 0: the launcher sizes ranks from the task count alone (ibrun)
    gpus_per_node: int       # 0: GPUs come with the nodes
    mem_mb: int              # per node; 0: none asked (the site's scheduler refuses it, or no memory known)
    queue: str               # the queue picked by nodes and walltime; "": the site's configured one
    queue_key: str           # where `queue` goes: "partition" or "qos" (queue_key())
    minutes: int
    request: AllocationRequest


def memory_mb(site: Site) -> int:
    """The memory per node a job asks (Slurm --mem): MEMORY_SHARE of the node's, where the site's
    Slurm takes a memory request. Without one, Snakemake would give the executor plugin its own
    default mem_mb (1,000-8,000 MB, `snakemake --help`), a job limited to a few GB of a whole node;
    TACC's Slurm refuses --mem outright (scheduler_options.request_memory: false)."""
    if (not schedulers.of(site).FACTS.asks_memory or not site.node.memory_gb
            or not site.scheduler_options.get("request_memory", True)):
        return 0
    return int(site.node.memory_gb * 1000 * MEMORY_SHARE)


def job(site: Site, layout: Layout, minutes: int, alloc: AllocationRequest | None = None) -> JobAllocation:
    """The allocation of one job of `layout` for `minutes` (asked_minutes'): the header's and the
    executor's one source. `alloc`: a bundle's common request, else the layout's own."""
    alloc = alloc or request(site, layout)
    # srun's --ntasks-per-gpu refuses --ntasks-per-node, from the job's environment too
    per_node = 0 if site.launcher == "srun" and srun_arith.shares_gpus(layout) else layout.ranks_per_node
    # ibrun takes -n alone and its threads from OMP_NUM_THREADS (TACC's guide): no CPUs per task
    cpus = 0 if launchers.facts(site.launcher).sized_by_header else srun_arith.cpus_per_task(site, layout)
    picked = check_walltime(site, minutes, layout.nodes)  # refuses a walltime no queue admits
    queue = picked if site.queues else ""  # without queues: the request's (the site's partition)
    return JobAllocation(nodes=layout.nodes, tasks=layout.ranks, tasks_per_node=per_node, cpus_per_task=cpus,
                         gpus_per_node=alloc.gpus_per_node, mem_mb=memory_mb(site), queue=queue,
                         queue_key=queue_key(site), minutes=minutes, request=alloc)


def run_job(site: Site, run) -> JobAllocation:
    """The allocation of a run's own job: what its batch header asks (render.render_script) and what
    the executor plugin is given for it (pipeline.job_resources), from this one object."""
    return job(site, run.layout, asked_minutes(site, run.layout.nodes, [run.timeout_s]))


def _node_local(site: Site) -> str:
    if not site.storage.get("stage_in_from"):
        return ""
    kind = site.storage.get("node_local_kind", "")
    return kind if kind in ("nvme", "burst_buffer") else ""


def request(site: Site, layout: Layout) -> AllocationRequest:
    """The allocation request of a run of `layout` on `site`: the one source of every batch header
    and of the executor's resources."""
    opts = site.scheduler_options
    _check_options_read(site)
    node_local = _node_local(site)
    common = dict(
        node_local=node_local,
        burst_buffer_gb=int(site.storage.get("burst_buffer_gb", 0)) if node_local == "burst_buffer" else 0,
        core_spec=int(opts.get("core_spec", 0)), cpu_freq=str(opts.get("cpu_freq", "")),
        exclusive=bool(opts.get("exclusive", False)), queue=site.partition, account=site.account, qos=site.qos,
        constraint=site.constraint, extra=tuple(opts.get("extra", [])) + _runtime_directives(site))
    return AllocationRequest(**{**common, **schedulers.request_parts(site, layout, node_local)})


def _reads(facts, key: str) -> bool:
    return key in facts.renders or (key == "extra" and bool(facts.directive))


def _check_options_read(site: Site) -> None:
    """Refuse a scheduler_options key the site's scheduler does not read (`pbs_select` on an LSF site,
    `queue_directive` on PBS), set away from its default: it would change nothing in the scripts."""
    defaults = _option_defaults()
    for key, value in site.scheduler_options.items():
        if value != defaults.get(key) and not _reads(schedulers.of(site).FACTS, key):
            readers = [n for n, m in schedulers.SCHEDULERS.items() if _reads(m.FACTS, key)]
            raise ConfigError(site.path or site.name, f"scheduler_options.{key}", value,
                              f"unset with scheduler {site.scheduler} (read by: {', '.join(readers) or 'none'})",
                              f"is not read by scheduler {site.scheduler}")


@functools.cache
def _option_defaults() -> dict:
    from exabench.config import load_schema
    options = load_schema("site")["properties"]["scheduler_options"]["properties"]
    return {key: schema.get("default") for key, schema in options.items()}


def _runtime_directives(site: Site) -> tuple:
    """The header options the site's container runtime needs (Shifter: `--image=docker:name:tag`,
    so Slurm stages the image on the job's nodes); none for most."""
    cont = site.container or {}
    if cont.get("runtime", "none") in ("", "none"):
        return ()
    import exabench.containers.runtimes as runtimes
    return tuple(runtimes.directives(cont["runtime"], site, cont.get("image", "")))


def asked_minutes(site: Site, nodes: int | None, timeouts_s, side_by_side: bool = False) -> int:
    """The walltime (minutes) a job asks for: the one figure its batch header, the executor's
    runtime and the plan's node-hours all read, so the plan never counts less than the headers ask.

    The runs' time limits in whole minutes (summed when they run in turn, the longest when side by
    side) plus one margin (site.WALLTIME_MARGIN_MIN), raised to the shortest walltime the queue it
    goes to takes (ALCF Theta's default: 30 min; the queue picked is the same before and after the
    raise, as the raise stays within that queue's range). Whole minutes are every scheduler's
    granularity here (-t/-W/walltime are written in minutes). LayoutError where the site's limit or
    no queue admits the job; `nodes` None checks only the site-wide limit."""
    timeouts = list(timeouts_s)
    minutes = bundle_minutes([max(timeouts)] if side_by_side else timeouts)
    check_walltime(site, minutes, nodes)
    q = queue_entry(site, nodes, minutes) if nodes is not None else None
    # A queue's shortest walltime is within its range: the cap only keeps a mis-declared one from
    # asking more than the queue admits.
    return min(max(minutes, q.min_walltime_min), q.max_walltime_min) if q else minutes


def queue_key(site: Site) -> str:
    """Where the queue picked by size goes: `partition` (Slurm --partition, LSF -q, PBS -q, Cobalt
    -q) or `qos` (NERSC, whose queues are QOS: scheduler_options.queue_directive)."""
    return schedulers.queue_key(site)


def common_request(site: Site, layouts, what: str) -> AllocationRequest:
    """The one request every layout of an allocation shares; ConfigError naming the setting that
    differs where two disagree (a bundle is planned only from runs whose requests are equal)."""
    layouts = list(layouts)
    first = request(site, layouts[0])
    for lay in layouts[1:]:
        other = request(site, lay)
        if other != first:
            raise ConfigError(site.path or site.name, what, f"{lay.nodes}-node layout",
                              "runs whose allocation requests are equal",
                              "mixes allocation-wide settings (" + "; ".join(first.differences(other)) + ")")
    return first
