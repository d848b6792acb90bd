"""ibrun (TACC): Stampede2.

ibrun takes its size from the Slurm allocation (`#SBATCH -N nodes -n tasks`) and needs
no layout flags; threads come from OMP_NUM_THREADS. The header carries the arithmetic.

On named nodes (every-node acceptance) ibrun is told no host names: `-n N -o OFFSET` starts N
tasks from task slot OFFSET of the allocation's host list, which ibrun builds with
TACC_TASKS_PER_NODE slots per node (else the job's Slurm tasks per node). With it set to the
run's ranks per node R, node i of the allocation (0 first, in `scontrol show hostnames` order)
starts at slot i*R: `TACC_TASKS_PER_NODE=R ibrun -n R -o i*R ...`, one such launch per node side
by side.

Sources: TACC Stampede2 User Guide, "Launching Applications" (docs.tacc.utexas.edu/hpc/
stampede2/: `#SBATCH -N 4 -n 32 ... ibrun ./a.out`; hybrid jobs set OMP_NUM_THREADS);
`-n`, `-o`, TACC_TASKS_PER_NODE and the offset counted in tasks per node as
radical-cybertools/radical.pilot's ibrun launch method uses them on TACC machines
(src/radical/pilot/agent/launch_method/ibrun.py, "info provided by TACC support"). Not yet run on a
TACC machine: check one node's line there first (docs/clusters.md).
"""

from __future__ import annotations

from exabench.campaign.launchers.facts import LauncherFacts, Placement
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="ibrun", schedulers=("slurm",), mpi=True, per_node=False, sized_by_header=True,
                      smt="OMP_NUM_THREADS only (the header's -n sets the ranks)",
                      on_nodes="-n N -o OFFSET with TACC_TASKS_PER_NODE (task slots, node i at i*R)", by_index=True)


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    return ["ibrun", *program]


def at_index(argv: list[str], index: int, nodes: tuple[str, ...], layout: Layout, node=None) -> Placement:
    """`ibrun -n N -o OFFSET` on the allocation's nodes index .. index+len(nodes)-1 (module docstring)."""
    per_node = layout.ranks_per_node
    return Placement([argv[0], "-n", str(per_node * len(nodes)), "-o", str(index * per_node), *argv[1:]],
                     env=(("TACC_TASKS_PER_NODE", str(per_node)),))
