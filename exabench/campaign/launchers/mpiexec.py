"""mpiexec for PBS Pro with Cray PALS/MPICH: Polaris, Aurora.

`-n` ranks, `--ppn` ranks per node, then the CPU binding:
- `--depth=D --cpu-bind depth` hands rank j of a node the next D usable logical processors,
  taken on the first hardware thread of successive cores, reserved cores skipped. It is the
  form ALCF's examples use, and exabench's while no rank would straddle two sockets.
- `--cpu-bind=list:a-b:c-d:...` names each rank's logical processors. It is used where depth
  binding would split a rank over two sockets (ALCF Aurora, 12 ranks x 8 cores: rank 6 would
  hold cores 49-51 and 53-57) or put a rank on another socket than its GPUs (the ranks are
  then placed by their GPUs' socket, else a socket filled before the next), and where a rank
  uses SMT (each of its cores with all its hardware threads: core c is logical processors
  c, c + cores, ...).
mpiexec does not set device visibility: with launcher_options.gpu_affinity_wrapper each rank
sets CUDA_VISIBLE_DEVICES (Polaris) or ZE_AFFINITY_MASK (Aurora: one tile per rank with
ZE_FLAT_DEVICE_HIERARCHY=FLAT, as ALCF documents for the AI frameworks) from its local rank
(exabench.campaign.launchers.mpirun.gpu_affinity_wrapper).

Sources: ALCF Polaris "Running Jobs" (docs.alcf.anl.gov/polaris/running-jobs/:
`mpiexec -n ${NTOTRANKS} --ppn ${NRANKS_PER_NODE} --depth=${NDEPTH} --cpu-bind depth
--env OMP_NUM_THREADS=${NTHREADS} ./set_affinity_gpu_polaris.sh ./hello_affinity`);
ALCF Aurora "Running Jobs on Aurora", "Binding MPI ranks and threads to cores" and "Binding
MPI ranks to GPUs" (docs.alcf.anl.gov/aurora/running-jobs-aurora/: cores 0 and 52 reserved,
`--cpu-bind=list:1-8:9-16:...:93-100` for 12 ranks, gpu_tile_compact.sh and ZE_AFFINITY_MASK).

Every-node job (node_sweep): node worlds (exabench.campaign.node_worlds). ALCF's guides start
mpiexec from the job script on the head node; that PALS's mpiexec starts a node's run when itself
started on another compute node is not documented there, so per run ONE mpiexec (-n total, --ppn per
node, over the job's nodes) starts the run's ranks on every node, and each node's ranks split off
their own MPI world.
"""

from __future__ import annotations

from exabench.campaign.site import Layout, NodeSpec, Site
from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.launchers.mpirun import gpu_affinity_wrapper

# The hostfile a run placed on named nodes starts from, written beside its launch line (the run's
# folder, the job script's working directory) by launchers.place.
HOSTFILE = "hosts.txt"
FACTS = LauncherFacts(name="mpiexec", schedulers=("pbs", "cobalt"), mpi=True, rank_sets=True,
                      smt="--depth=D --cpu-bind depth, or --cpu-bind=list:...",
                      on_nodes=f"--hostfile {HOSTFILE} (the nodes one a line, written beside the line)")


def on_nodes(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """`--hostfile hosts.txt`, the nodes one a line (hostfile_beside writes it); the line's own
    --ppn places the ranks on each. ALCF documents PALS mpiexec's nodes as a hostfile: Polaris
    "Running Jobs" (docs.alcf.anl.gov/polaris/running-jobs/): "--hostfile indicate file with
    hostnames (the default is --hostfile $PBS_NODEFILE)"; its Getting Started examples run an
    application on a subset of a job's nodes from one hostfile each ("Users can use multiple
    hostfiles to run different applications across different nodes within a single job":
    split $PBS_NODEFILE, `mpiexec -n N --ppn R --hostfile ${lh} ...`, argonne-lcf/GettingStarted
    Examples/Polaris/ensemble/README.md). Open MPI's `--host a:R` is not PALS's syntax."""
    return [argv[0], "--hostfile", HOSTFILE, *argv[1:]]


def hostfile_beside(nodes: tuple[str, ...]) -> tuple:
    """(file name, text) of the hostfile on_nodes names: $PBS_NODEFILE's form, one name a line."""
    return ((HOSTFILE, "".join(f"{n}\n" for n in nodes)),)


def usable_cores_by_socket(node: NodeSpec) -> list[list[int]]:
    """Each socket's cores a job may use; the reserved ones are each socket's first (ALCF
    Aurora: cores 0 and 52; spread as evenly as the count allows)."""
    out = []
    for s in range(node.sockets):
        reserved = node.reserved_cores // node.sockets + (1 if s < node.reserved_cores % node.sockets else 0)
        first = s * node.cores_per_socket
        out.append(list(range(first + reserved, first + node.cores_per_socket)))
    return out


def depth_placement(node: NodeSpec, layout: Layout) -> list[list[int]]:
    """The cores `--cpu-bind depth` gives each rank of a node: the usable cores in order."""
    cores = [c for socket in usable_cores_by_socket(node) for c in socket]
    k = layout.cores_per_rank
    return [cores[j * k:(j + 1) * k] for j in range(layout.ranks_per_node)]


def socket_placement(node: NodeSpec, layout: Layout) -> list[list[int]] | None:
    """Ranks in order, each on whole cores of one socket; None where some rank cannot avoid
    spanning sockets. A rank with GPUs goes to its GPUs' socket (GPUs numbered socket by
    socket: Aurora's tiles 0-5 hang off socket 0), packed from the socket's first usable core;
    without GPUs a socket is filled before the next."""
    sockets = usable_cores_by_socket(node)
    by_gpu = layout.gpus_per_node and node.gpus % node.sockets == 0
    out, s, used = [], 0, [0] * len(sockets)
    for j in range(layout.ranks_per_node):
        if by_gpu:
            s = (j // layout.set_size) * layout.gpus_per_set * node.sockets // node.gpus
        while s < len(sockets) and len(sockets[s]) - used[s] < layout.cores_per_rank:
            if by_gpu:
                return None
            s += 1
        if s == len(sockets):
            return None
        out.append(sockets[s][used[s]:used[s] + layout.cores_per_rank])
        used[s] += layout.cores_per_rank
    return out


def _socket_of(node: NodeSpec, core: int) -> int:
    return core // node.cores_per_socket


def straddles(node: NodeSpec, placement: list[list[int]]) -> bool:
    return any(len({_socket_of(node, c) for c in cores}) > 1 for cores in placement)


def _ranges(ids: list[int]) -> str:
    parts, start = [], None
    for i, c in enumerate(ids):
        if start is None:
            start = c
        if i + 1 == len(ids) or ids[i + 1] != c + 1:
            parts.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(parts)


def cpu_list(node: NodeSpec, layout: Layout, placement: list[list[int]]) -> str:
    """`list:` value: each rank's logical processors, every hardware thread it uses of its cores."""
    return ":".join(_ranges(sorted(c + t * node.cores for t in range(layout.smt) for c in cores))
                    for cores in placement)


def cpu_bind_flags(site: Site, layout: Layout) -> list[str]:
    node = site.node
    depth = depth_placement(node, layout)
    placement = depth
    if node.sockets > 1 and (straddles(node, depth) or layout.gpus_per_node):
        placement = socket_placement(node, layout) or depth
    if layout.smt == 1 and placement == depth:
        return [f"--depth={layout.cores_per_rank}", "--cpu-bind", "depth"]
    return [f"--cpu-bind=list:{cpu_list(node, layout, placement)}"]


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    out = ["mpiexec", "-n", str(layout.ranks), "--ppn", str(layout.ranks_per_node), *cpu_bind_flags(site, layout),
           "--env", f"OMP_NUM_THREADS={layout.threads_per_rank}"]
    return out + gpu_affinity_wrapper(site, layout, "PMI_LOCAL_RANK") + program
