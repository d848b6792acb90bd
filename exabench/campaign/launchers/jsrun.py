"""jsrun (IBM Job Step Manager, LSF/CSM): Summit, Summitdev.

Resource sets (RS) hold whole cores and GPUs of one node; every RS of a jsrun is alike.
The layout's sets (Layout.set_size ranks, Layout.gpus_per_set GPUs) are the RS:
- A rank that owns GPUs: one RS per rank, `-a 1 -c cores -g gpus`, `-r` RS per node.
- Ranks sharing a GPU (ranks_per_gpu k): one RS per GPU holding its k ranks
  (`-a k -g 1 -c k*cores`); needs `-alloc_flags gpumps` (MPS) in the header
  (exabench.campaign.allocation asks for it).
- ranks_per_set k: one RS per k ranks pooling their cores and GPUs (`-a 6 -c 42 -g 6 -r 1`:
  one RS per Summit node, each rank seeing the node's 6 GPUs).
- CPU-only: one RS per rank with `-g 0`.
`-d packed` places the ranks of an RS in order.
`-b packed:N` binds each rank to N cores; with SMT>1 its threads use the cores' hardware
threads (`-alloc_flags smtN` in the header). jsrun sets CUDA_VISIBLE_DEVICES per RS.

On named nodes (every-node acceptance) jsrun is told no host names: the same resource sets go in
an explicit resource file (ERF, `jsrun --erf_input=FILE`), one line per rank, `rank: R: { host: H;
cpu: {a-b}; gpu: {g} }`. H is the host's index in the allocation: 0 is the launch (batch) node,
1 the first compute node, in the order of $LSB_DJOB_HOSTFILE (so the every-node job lists its nodes
that way and passes each one's place). With `cpu_index_using: logical` the CPUs are hardware
threads numbered without the isolated service cores, k per core at the allocation's SMTk, so core
c is {c*k .. c*k+k-1} whatever the socket. Ranks of one resource set (-a k) each get their own
-b packed cores and the set's GPUs, which the ERF allows with `overlapping_rs` and
`oversubscribe_gpu`. Not run on a Summit here: OLCF's guide lists jsrun bugs with ERFs ("Failed to
bind process to ERF smt array"; "a known bug is currently preventing execution of most ERF use
cases"), so where they bite, every_node_groups (one job per node, pinned in CSM expert mode, `#BSUB -csm y` with `-R`, no ERF)
is the way (docs/clusters.md).

Sources: OLCF Summit User Guide, "Job Launcher (jsrun)" (docs.olcf.ornl.gov/systems/
summit_user_guide.html#job-launcher-jsrun); OLCF jsrun quick start guide
(github.com/olcf-tutorials/jsrun_quick_start_guide); OLCF batch script examples
(github.com/olcf-tutorials/Batch-Script-Examples: -n12 -r6 -c7 -g1 -a1 -bpacked:7); IBM Job Step
Manager, "Explicit Resource File (ERF) format" (www.ibm.com/support/knowledgecenter/SSWRJV_10.1.0/
jsm/10.3/base/erf_format.html: `RANK_SPECIFICATION : RESOURCE_SET_SPECIFICATION`, `rank: RANGE`,
keys host and cpu at least; a single application's command stays on the jsrun line); OLCF tutorial
"ERF CPU Indexing" (github.com/olcf-tutorials/ERF-CPU-Indexing: logical indices 0-41 at SMT1,
0-167 at SMT4). Host numbering as used on Summit by CODARcode/PerformanceAnalysis
scripts/summit/gen_erf_summit.sh ("0 is launch node, 1 is first compute node") and
CODARcode/cheetah savanna (hosts numbered from 1).

Every-node job (node_sweep): node worlds (exabench.campaign.node_worlds). On Summit the job script
runs on a batch (launch) node, from which jsrun starts the job's steps (OLCF Summit User Guide, "Job
Launcher (jsrun)"); that jsrun starts a step when itself started on a compute node is not documented
there, so no agent on each node starts its node's run: per run ONE jsrun from the batch node starts
the run's resource sets on every node (-n sets over the allocation, -r per node, no ERF), and each
node's ranks split off their own MPI world.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exabench.campaign.launchers.facts import LauncherFacts, Placement
from exabench.campaign.site import Layout, NodeSpec, Site
from exabench.errors import ExabenchError

FACTS = LauncherFacts(name="jsrun", schedulers=("lsf",), mpi=True, rank_sets=True, binds_gpus=True,
                      smt="-bpacked:N with -alloc_flags smtN in the header",
                      on_nodes="--erf_input=FILE, ranks on ERF host indices (1: first compute node)", by_index=True)
# The ERF an every-node run's launch line reads, in the run's own folder (where its script runs).
ERF_NAME = "placement.erf"


@dataclass(frozen=True)
class ResourceSet:
    count: int        # -n, over all nodes
    per_node: int     # -r
    tasks: int        # -a
    cores: int        # -c
    gpus: int         # -g
    bind_cores: int   # -b packed:N

    def flags(self) -> list[str]:
        out = [f"--nrs={self.count}", f"--rs_per_host={self.per_node}", f"--tasks_per_rs={self.tasks}",
               f"--cpu_per_rs={self.cores}", f"--gpu_per_rs={self.gpus}", f"--bind=packed:{self.bind_cores}"]
        if self.tasks > 1:
            out.append("--launch_distribution=packed")
        return out

    def short_flags(self) -> list[str]:
        out = [f"-n{self.count}", f"-r{self.per_node}", f"-a{self.tasks}", f"-c{self.cores}", f"-g{self.gpus}",
               f"-bpacked:{self.bind_cores}"]
        if self.tasks > 1:
            out.append("-dpacked")
        return out


def resource_set(layout: Layout) -> ResourceSet:
    k = layout.set_size
    per_node = layout.ranks_per_node // k
    return ResourceSet(per_node * layout.nodes, per_node, k, k * layout.cores_per_rank, layout.gpus_per_set,
                       layout.cores_per_rank)


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    out = ["jsrun", *resource_set(layout).short_flags()]
    smpiargs = site.launcher_options.get("smpiargs", "")
    if smpiargs:
        out.append(f"--smpiargs={smpiargs}")
    return out + program


def _cpus(first_core: int, cores: int, smt: int) -> str:
    """Logical hardware threads of `cores` cores from `first_core` at SMT `smt`, as an ERF range."""
    lo, hi = first_core * smt, (first_core + cores) * smt - 1
    return f"{{{lo}-{hi}}}" if hi > lo else f"{{{lo}}}"


def _set_origin(s: int, rs: ResourceSet, node: NodeSpec) -> tuple[int, int]:
    """(first core, first GPU) of resource set `s` of a node: jsrun keeps a set on one socket, the
    sets spread evenly over the sockets, each from its socket's first core and GPU; a set wider than
    a socket (one per node) starts at core 0. `node` counts the cores a job may use per socket."""
    per_socket = rs.per_node // node.sockets if rs.per_node % node.sockets == 0 else 0
    if per_socket and rs.cores * per_socket <= node.cores_per_socket:
        socket, k = divmod(s, per_socket)
        return socket * node.cores_per_socket + k * rs.cores, socket * (node.gpus // node.sockets) + k * rs.gpus
    return s * rs.cores, s * rs.gpus


def erf_text(index: int, nodes: int, layout: Layout, node: NodeSpec) -> str:
    """The ERF of `layout` on `nodes` consecutive compute nodes from the allocation's `index` (0
    first): the resource sets resource_set() gives, rank by rank."""
    rs = resource_set(replace(layout, nodes=nodes))
    smt = max(1, layout.smt)
    lines = ["cpu_index_using: logical"]
    if rs.tasks > 1 and rs.gpus:  # ranks of one set see the set's GPUs: one line per rank, so the lines overlap
        lines += ["overlapping_rs: allow", "oversubscribe_gpu: allow"]
    rank = 0
    for host in range(index + 1, index + 1 + nodes):
        for s in range(rs.per_node):
            core, gpu = _set_origin(s, rs, node)
            gpus = "" if not rs.gpus else (f"; gpu: {{{gpu}}}" if rs.gpus == 1 else f"; gpu: {{{gpu}-{gpu + rs.gpus - 1}}}")
            for t in range(rs.tasks):
                lines.append(f"rank: {rank}: {{ host: {host}; cpu: {_cpus(core + t * rs.bind_cores, rs.bind_cores, smt)}"
                             f"{gpus} }}")
                rank += 1
    return "\n".join(lines) + "\n"


def at_index(argv: list[str], index: int, nodes: tuple[str, ...], layout: Layout, node: NodeSpec | None) -> Placement:
    """The run's jsrun line with its resource-set flags replaced by an ERF placing the same sets on
    the allocation's compute nodes index+1 .. index+len(nodes) (module docstring)."""
    if node is None:
        raise ExabenchError("jsrun places a node's ranks by core number: the run's spec.json names no usable_node (cores "
                            "per socket, GPUs); valid: a spec rendered by this version (render the runs again)")
    flags = resource_set(layout).short_flags()
    if argv[1:1 + len(flags)] != flags:
        raise ExabenchError(f"launch line '{' '.join(argv)[:80]}...' does not start with the resource sets of its "
                            f"layout ({' '.join(flags)}); valid: a line rendered for this run")
    erf = erf_text(index, len(nodes), layout, node)
    return Placement([argv[0], f"--erf_input={ERF_NAME}", *argv[1 + len(flags):]], files=((ERF_NAME, erf),))
