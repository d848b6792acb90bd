"""mpirun (Open MPI): the local profile and any site without a native launcher.

`--map-by ppr:R:node:PE=C` places R ranks per node with C cores each, `--bind-to core`;
`-x NAME` forwards each exported variable to remote nodes. Open MPI does not set device
visibility, so with launcher_options.gpu_affinity_wrapper each rank sets it from its
local rank before the program starts.

Source: Open MPI mpirun(1) man page, "Mapping, Ranking, and Binding".
"""

from __future__ import annotations

from exabench.campaign.site import Layout, Site

# Fixed text: no value from a config or site file is ever interpolated into it; the
# numbers arrive as positional arguments ($1 $2) and are checked as integers by bash.
_AFFINITY_SCRIPT = ('r=${%s:-0}; g=$1; n=$2; shift 2; first=$(( (r %% (n / g)) * g )); '
                    'ids=$(seq -s, "$first" "$(( first + g - 1 ))"); export %s="$ids"; exec "$@"')


def gpu_affinity_wrapper(site: Site, layout: Layout, local_rank_var: str) -> list[str]:
    """argv prefix giving each rank its own GPUs, or [] where not needed/asked."""
    var = site.node.gpu_visibility_var
    if not (site.launcher_options.get("gpu_affinity_wrapper") and layout.gpus_per_rank and var):
        return []
    script = _AFFINITY_SCRIPT % (local_rank_var, var)
    return ["bash", "-c", script, "gpu-affinity", str(layout.gpus_per_rank), str(layout.gpus_per_node)]


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    out = ["mpirun", "-np", str(layout.ranks), "--map-by",
           f"ppr:{layout.ranks_per_node}:node:PE={layout.cores_per_rank}", "--bind-to", "core"]
    for name in exports:
        out += ["-x", name]
    return out + gpu_affinity_wrapper(site, layout, "OMPI_COMM_WORLD_LOCAL_RANK") + program
