"""local: one process, started as it is (no launcher), on the machine the job runs on.

Every scheduler's allocation can start it (the batch script runs on the first node).
"""

from __future__ import annotations

from exabench.campaign.launchers.facts import LauncherFacts, on_this_host
from exabench.campaign.site import Layout, Site
from exabench.errors import LayoutError

FACTS = LauncherFacts(name="local", schedulers=("none", "slurm", "lsf", "pbs", "cobalt"), mpi=False, per_node=False,
                      on_nodes="the current host only")
on_nodes = on_this_host


def argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    if layout.ranks != 1:
        raise LayoutError(site.name, "ranks", layout.ranks, "1 with launcher 'local' (use mpirun or torchrun)")
    return list(program)
