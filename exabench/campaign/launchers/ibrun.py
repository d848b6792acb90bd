"""ibrun (TACC): Stampede2.

ibrun takes its size from the Slurm allocation (`#SBATCH -N nodes -n tasks`) and needs
no layout flags; threads come from OMP_NUM_THREADS. The header carries the arithmetic.

On named nodes (every-node acceptance) ibrun is told no host names: `-n N -o OFFSET` starts N
tasks from entry OFFSET of the job's hostfile, and `task_affinity` pins them, as TACC runs several
MPI programs at once in one job. The hostfile has TACC_TASKS_PER_NODE entries per node where that
is set (else the job's Slurm tasks per node); with it set to the run's ranks per node R, node i of
the allocation (0 first, in `scontrol show hostnames` order) starts at entry i*R:
`TACC_TASKS_PER_NODE=R ibrun -n R -o i*R task_affinity ...`, one such launch per node side by side.

Sources: TACC Stampede2 User Guide (TACC/TACC-Docs, docs/archives/hpc/stampede2/running.md),
"Launching Applications": `#SBATCH -N 4 -n 32 ... ibrun ./a.out`, hybrid jobs set
OMP_NUM_THREADS; "More than One MPI Application Running Concurrently": `ibrun -n 64 -o 0
task_affinity ./myprogram input1 &` ("offset by 0 entries in hostfile"), `-n` and `-o` together,
`task_affinity` for placement and pinning with them; TACC Horizon "MPS" (docs/hpc/horizon/mps.md):
`export TACC_TASKS_PER_NODE=1  # Force one task per node` before `ibrun -np $SLURM_NNODES`. Not run
on a TACC machine here: check one node's line there first.

Every-node job (node_sweep): node worlds (exabench.campaign.node_worlds). TACC documents ibrun in the
job script only, so per run ONE `ibrun -n N*R -o 0 task_affinity` (TACC_TASKS_PER_NODE=R) starts
the run's ranks on every node, and each node's ranks split off their own MPI world.
"""

from __future__ import annotations

from exabench.campaign.launchers.facts import LauncherFacts, Placement
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="ibrun", schedulers=("slurm",), mpi=True, per_node=False, sized_by_header=True,
                      smt="OMP_NUM_THREADS only (the header's -n sets the ranks)",
                      on_nodes="-n N -o OFFSET task_affinity, TACC_TASKS_PER_NODE=R (node i at entry i*R)",
                      by_index=True)


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    return ["ibrun", *program]


def at_index(argv: list[str], index: int, nodes: tuple[str, ...], layout: Layout, node=None) -> Placement:
    """`ibrun -n N -o OFFSET task_affinity` on the allocation's nodes index .. index+len(nodes)-1
    (module docstring)."""
    per_node = layout.ranks_per_node
    return Placement([argv[0], "-n", str(per_node * len(nodes)), "-o", str(index * per_node), "task_affinity",
                      *argv[1:]], env=(("TACC_TASKS_PER_NODE", str(per_node)),))
