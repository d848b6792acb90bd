"""aprun (Cray ALPS): Titan (PBS/Moab), Theta (Cobalt).

`-n` ranks, `-N` ranks per node, `-d` depth = hardware threads reserved per rank,
`-j` hardware threads per core used, `-cc depth` binds each rank to its `-d` CPUs.

Sources: ALCF Theta "Running jobs / aprun" (docs.alcf.anl.gov/theta/queueing-and-running-
jobs/job-and-queue-scheduling/: `aprun -n 128 -N 64 -d 1 -j 1 -cc depth`);
OLCF Titan User Guide, "aprun" (`aprun -n 2 -N 1 -d 16`; -j 1 one rank per compute unit).

Every-node job (node_sweep): node worlds (exabench.campaign.node_worlds). aprun is started from a
service (MOM) node only, never from a compute node (NERSC, "Job Launch Overview" (Franklin): "The
only way to execute a code on the compute nodes is to launch it from a service node using the aprun
command"), so per run ONE aprun (-n PEs over every node, -N per node) starts the run's ranks on
every node, and each node's ranks split off their own MPI world.
"""

from __future__ import annotations

import re

from exabench.campaign.launchers.facts import LauncherFacts
from exabench.campaign.site import Layout, Site

FACTS = LauncherFacts(
    name="aprun", schedulers=("pbs", "cobalt"), mpi=True, smt="-j N (hardware threads per core), -d depth",
    on_nodes="-L node list (numeric NIDs: aprun(1), '-L 23,24,25')")


def on_nodes(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """`aprun -L` with the nodes' NIDs: Cray's aprun(1) man page, "-L node_list: candidate nodes to
    constrain application placement ... a comma-separated list of nodes (such as -L 23,24,25)";
    a node named nid00042 is NID 42."""
    nids = [str(int(m.group(1))) if (m := re.fullmatch(r"nid0*(\d+)", n)) else n for n in nodes]
    return [argv[0], "-L", ",".join(nids), *argv[1:]]


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    depth = layout.cores_per_rank * layout.smt
    return ["aprun", "-n", str(layout.ranks), "-N", str(layout.ranks_per_node), "-d", str(depth),
            "-j", str(layout.smt), "-cc", "depth", *program]
