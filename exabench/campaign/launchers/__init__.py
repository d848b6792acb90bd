"""Launcher arithmetic: from a checked Layout to each launcher's argument list.

One module per launcher, each with `argv(site, layout, program) -> list[str]`: the whole
command as a list (never a shell string), so no value is ever re-parsed by a shell. The
numbers come from the Layout (exabench.campaign.site); these modules only translate them into each
launcher's vocabulary, as the centres document it (sources in each module's docstring).
"""

from __future__ import annotations

from exabench.errors import LayoutError
from exabench.campaign.site import Layout, Site, check_layout
from exabench.campaign.launchers import aprun, ibrun, jsrun, mpiexec, mpirun, srun, torchrun

LAUNCHERS = {"jsrun": jsrun, "srun": srun, "aprun": aprun, "ibrun": ibrun, "mpiexec": mpiexec, "mpirun": mpirun,
             "torchrun": torchrun}
# Launchers that can give a set of ranks smaller than a node its own GPUs (Layout.ranks_per_set);
# srun checks its own case.
SET_LAUNCHERS = ("jsrun", "srun", "mpiexec", "mpirun")


def launch_argv(site: Site, layout: Layout, program: list[str]) -> list[str]:
    """The full command that starts `program` once per rank of `layout` on `site`."""
    check_layout(site, layout)
    if site.launcher == "local":
        if layout.ranks != 1:
            raise LayoutError(site.name, "ranks", layout.ranks, "1 with launcher 'local' (use mpirun or torchrun)")
        return list(program)
    if layout.ranks_per_set and layout.ranks_per_set < layout.ranks_per_node and site.launcher not in SET_LAUNCHERS:
        raise LayoutError(site.name, "ranks_per_set", layout.ranks_per_set,
                          f"ranks_per_node = {layout.ranks_per_node} with launcher {site.launcher} (smaller sets of "
                          f"ranks need {', '.join(SET_LAUNCHERS)})")
    return LAUNCHERS[site.launcher].argv(site, layout, list(program))


def thread_env(layout: Layout) -> dict[str, str]:
    """OpenMP placement matching the launcher's binding: threads on the rank's own cores."""
    env = {"OMP_NUM_THREADS": str(layout.threads_per_rank)}
    if layout.threads_per_rank > 1:
        env["OMP_PLACES"] = "threads" if layout.smt > 1 else "cores"
        env["OMP_PROC_BIND"] = "close"
    return env
