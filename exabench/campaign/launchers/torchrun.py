"""torchrun (one node): torch's own launcher starts ranks_per_node workers.

Source: PyTorch "torchrun (Elastic Launch)" documentation (--standalone, --nproc-per-node).
"""

from __future__ import annotations

from exabench.errors import LayoutError
from exabench.campaign.launchers.facts import LauncherFacts, on_this_host
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="torchrun", schedulers=("none", "slurm"), mpi=False, per_node=False,
                      on_nodes="the current host only (one node, --standalone)")


on_nodes = on_this_host  # a single-node launcher runs where it is started


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    if layout.nodes != 1:
        raise LayoutError(site.name, "nodes", layout.nodes,
                          "1 with launcher torchrun (use srun/jsrun/mpiexec across nodes)")
    # torchrun execs its own interpreter for the workers: run it as a module of ours.
    if program[1:2] != ["-m"]:
        raise ValueError("torchrun needs a program started as `python -m module`")
    return [program[0], "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(layout.ranks_per_node), "-m", *program[2:]]
