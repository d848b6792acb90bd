"""ibrun (TACC): Stampede2.

ibrun takes its size from the Slurm allocation (`#SBATCH -N nodes -n tasks`) and needs
no layout flags; threads come from OMP_NUM_THREADS. The header carries the arithmetic.

Source: TACC Stampede2 User Guide, "Launching Applications" (docs.tacc.utexas.edu/hpc/
stampede2/: `#SBATCH -N 4 -n 32 ... ibrun ./a.out`; hybrid jobs set OMP_NUM_THREADS).
"""

from __future__ import annotations

from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(name="ibrun", schedulers=("slurm",), mpi=True, per_node=False, sized_by_header=True,
                      smt="OMP_NUM_THREADS only (the header's -n sets the ranks)")


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    return ["ibrun", *program]
