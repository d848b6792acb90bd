"""aprun (Cray ALPS): Titan (PBS/Moab), Theta (Cobalt).

`-n` ranks, `-N` ranks per node, `-d` depth = hardware threads reserved per rank,
`-j` hardware threads per core used, `-cc depth` binds each rank to its `-d` CPUs.

Sources: ALCF Theta "Running jobs / aprun" (docs.alcf.anl.gov/theta/queueing-and-running-
jobs/job-and-queue-scheduling/: `aprun -n 128 -N 64 -d 1 -j 1 -cc depth`);
OLCF Titan User Guide, "aprun" (`aprun -n 2 -N 1 -d 16`; -j 1 one rank per compute unit).
"""

from __future__ import annotations

from exabench.campaign.site import Layout, Site


def argv(site: Site, layout: Layout, program: list[str]) -> list[str]:
    depth = layout.cores_per_rank * layout.smt
    return ["aprun", "-n", str(layout.ranks), "-N", str(layout.ranks_per_node), "-d", str(depth),
            "-j", str(layout.smt), "-cc", "depth", *program]
