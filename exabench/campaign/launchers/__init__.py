"""Launcher arithmetic: from a checked Layout to each launcher's argument list.

One module per launcher (a new launcher is one module here plus its golden test), each with
`FACTS` (exabench.campaign.launchers.facts.LauncherFacts: the schedulers it goes with, whether
it starts MPI ranks, places sets of ranks, binds GPUs, is told named nodes, ...),
`argv(site, layout, program, exports=()) -> list[str]` and, where it can place a run on named
nodes, `on_nodes(argv, nodes, ranks_per_node)` (told their names) or `at_index(argv, index, nodes,
layout)` (told their place in the allocation; exabench.campaign.launchers.facts). The command is a list (never a shell string), so no
value is ever re-parsed by a shell. The numbers come from the Layout (exabench.campaign.site);
these modules only translate them into each launcher's vocabulary, as the centres document it
(sources in each module's docstring). Every list of launchers elsewhere is derived from FACTS.
"""

from __future__ import annotations

from types import ModuleType

from exabench.campaign.launchers.facts import Placement, on_this_host
from exabench.campaign.site import Layout, NodeSpec, Site, check_layout, pair_launcher, unpair_launcher
from exabench.errors import ExabenchError, LayoutError
from exabench.plugins import discover


def _pair(module) -> None:
    pair_launcher(module.FACTS.name, module.FACTS.schedulers)


LAUNCHERS: dict[str, ModuleType] = discover(__path__, __name__, _pair)


def register(module) -> None:
    """Add a launcher module (or any object with FACTS and argv) to the registry (tests, plug-ins)."""
    LAUNCHERS[module.FACTS.name] = module
    pair_launcher(module.FACTS.name, module.FACTS.schedulers)


def unregister(name: str) -> None:
    LAUNCHERS.pop(name, None)
    unpair_launcher(name)


def facts(name: str):
    return LAUNCHERS[name].FACTS


def names(**wanted) -> tuple[str, ...]:
    """The launchers whose facts have the given values: names(mpi=True), names(rank_sets=True)."""
    return tuple(n for n, m in LAUNCHERS.items() if all(getattr(m.FACTS, k) == v for k, v in wanted.items()))


def for_scheduler(scheduler: str) -> tuple[str, ...]:
    """The launchers a scheduler's allocation can use."""
    return tuple(n for n, m in LAUNCHERS.items() if scheduler in m.FACTS.schedulers)


def placeable() -> tuple[str, ...]:
    """The launchers that can place a run on named nodes of an allocation (every-node acceptance);
    those that run only where they are started (local, torchrun) are left out."""
    return tuple(n for n, m in LAUNCHERS.items()
                 if getattr(m, "on_nodes", on_this_host) is not on_this_host or hasattr(m, "at_index"))


def placeable_by_name() -> tuple[str, ...]:
    """The placeable launchers told the nodes by name: the only ones that can place a run on nodes
    whose place in the allocation nobody knows (a job pinned to a node group by its header)."""
    return tuple(n for n in placeable() if not hasattr(LAUNCHERS[n], "at_index"))


def _module(argv: list[str]):
    return LAUNCHERS.get(argv[0].rsplit("/", 1)[-1])


def on_nodes(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """A launch line's argv placed on `nodes`, by the launcher that starts it (its argv[0]); a
    line that starts the program itself (local) runs on the current host only."""
    place = getattr(_module(argv), "on_nodes", None) or on_this_host
    return place(list(argv), tuple(nodes), ranks_per_node)


def place(argv: list[str], nodes: tuple[str, ...], layout: Layout, index: int | None,
          node: NodeSpec | None = None) -> Placement:
    """A launch line's argv placed on `nodes`, whichever way its launcher is told nodes: by name
    (on_nodes), or by `index`, the place of nodes[0] in the allocation's list of compute nodes
    (0 first; at_index), which only the job that lists its nodes knows; `node` is the cores and
    GPUs a job may use on one node (usable_node), which placing cores by number needs."""
    module = _module(argv)
    if hasattr(module, "at_index"):
        if index is None or index < 0:
            raise ExabenchError(f"launcher '{module.FACTS.name}' places a run by the node's place in the allocation "
                                f"({module.FACTS.on_nodes}); node(s) '{','.join(nodes)}' came without one; valid: "
                                "`exabench node-run ... --index N` (the every-node job script passes it)")
        return module.at_index(list(argv), index, tuple(nodes), layout, node)
    beside = getattr(module, "hostfile_beside", None)  # told the nodes in a file (mpiexec --hostfile)
    return Placement(on_nodes(argv, nodes, layout.ranks_per_node), beside(tuple(nodes)) if beside else ())


def launch_argv(site: Site, layout: Layout, program: list[str], exports: tuple[str, ...] = ()) -> list[str]:
    """The full command that starts `program` once per rank of `layout` on `site`."""
    check_layout(site, layout)
    module = LAUNCHERS[site.launcher]
    if layout.ranks_per_set and layout.ranks_per_set < layout.ranks_per_node and not module.FACTS.rank_sets:
        raise LayoutError(site.name, "ranks_per_set", layout.ranks_per_set,
                          f"ranks_per_node = {layout.ranks_per_node} with launcher {site.launcher} (smaller sets of "
                          f"ranks need {', '.join(names(rank_sets=True))})")
    return module.argv(site, layout, list(program), tuple(exports) if module.FACTS.forwards_env else ())


def thread_env(layout: Layout) -> dict[str, str]:
    """OpenMP placement matching the launcher's binding: threads on the rank's own cores."""
    env = {"OMP_NUM_THREADS": str(layout.threads_per_rank)}
    if layout.threads_per_rank > 1:
        env["OMP_PLACES"] = "threads" if layout.smt > 1 else "cores"
        env["OMP_PROC_BIND"] = "close"
    return env


def usable_node(node: NodeSpec) -> dict:
    """The cores and GPUs a job may use on one node, per socket (reserved cores left out, as jsrun's
    logical CPU numbers leave them out): what a run's spec records for placing cores by number."""
    return {"sockets": node.sockets, "cores_per_socket": node.usable_cores // node.sockets, "gpus": node.gpus}
