"""mpirun (Open MPI): the local profile and any site without a native launcher.

`--map-by ppr:R:node:PE=C` places R ranks per node with C cores each, `--bind-to core`;
`-x NAME` forwards each exported variable to remote nodes. Open MPI does not set device
visibility, so with launcher_options.gpu_affinity_wrapper each rank sets it from its
local rank before the program starts.

Source: Open MPI mpirun(1) man page, "Mapping, Ranking, and Binding".

Every-node job (one launch step across every node, node_sweep): none on a scheduler's allocation (an
mpirun started inside another's ranks is not a documented Open MPI use); without a scheduler the node
agent runs each listed node's spec here.
"""

from __future__ import annotations

from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="mpirun", schedulers=("none", "slurm", "lsf", "pbs"), mpi=True, rank_sets=True,
                      smt="--map-by ppr:R:node:PE=C", on_nodes="--host a:R,b:R (mpirun(1))", forwards_env=True)

# Fixed text: no value from a config or site file is ever interpolated into it; the
# numbers arrive as positional arguments ($1 $2) and are checked as integers by bash.
# Local rank r is in set r / k (k ranks per set) and sees that set's g GPUs.
_AFFINITY_SCRIPT = ('r=${%s:-0}; k=$1; g=$2; shift 2; first=$(( (r / k) * g )); '
                    'ids=$(seq -s, "$first" "$(( first + g - 1 ))"); export %s="$ids"; exec "$@"')


def gpu_affinity_wrapper(site: Site, layout: Layout, local_rank_var: str) -> list[str]:
    """argv prefix giving each rank its own GPUs (or its set's: Layout.set_size ranks sharing
    Layout.gpus_per_set GPUs), or [] where not needed or not asked."""
    var = site.node.gpu_visibility_var
    if not (site.launcher_options.get("gpu_affinity_wrapper") and layout.gpus_per_node and var):
        return []
    script = _AFFINITY_SCRIPT % (local_rank_var, var)
    return ["bash", "-c", script, "gpu-affinity", str(layout.set_size), str(layout.gpus_per_set)]


def on_nodes(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """Open MPI mpirun(1): `--host a:R,b:R` (R slots on each named host)."""
    return [argv[0], "--host", ",".join(f"{n}:{ranks_per_node}" for n in nodes), *argv[1:]]


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    out = ["mpirun", "-np", str(layout.ranks), "--map-by",
           f"ppr:{layout.ranks_per_node}:node:PE={layout.cores_per_rank}", "--bind-to", "core"]
    for name in exports:
        out += ["-x", name]
    return out + gpu_affinity_wrapper(site, layout, "OMPI_COMM_WORLD_LOCAL_RANK") + program
