"""What a launcher module declares about itself (its FACTS), so that every list of launchers
(MPI ones, those each scheduler pairs with, those that place ranks in sets or on named nodes,
those that start one process per node) is derived from the modules, as benchmarks' facts are.

A launcher is one module in exabench/campaign/launchers/ with `FACTS = LauncherFacts(...)`,
`argv(site, layout, program, exports=())` and, where it can place a run on named nodes (every-node
acceptance), one of:
- `on_nodes(argv, nodes, ranks_per_node) -> argv`: it is told the nodes by name (srun, aprun, mpirun),
  or in a file beside its line that `hostfile_beside(nodes) -> ((name, text),)` gives (mpiexec);
- `at_index(argv, index, nodes, layout, node) -> Placement`: it is told where the nodes sit in the
  allocation's list of compute nodes (jsrun's ERF host index, ibrun's task offset), and may need a
  file or a variable beside its line; `node` is the node's usable cores per socket and GPUs
  (launchers.usable_node), for a launcher that numbers them.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from exabench.errors import ExabenchError


@dataclass(frozen=True)
class LauncherFacts:
    name: str                    # the site file's `launcher` value
    schedulers: tuple            # the schedulers whose allocations it can use ("none": no scheduler)
    mpi: bool                    # starts MPI ranks (an MPI benchmark needs such a launcher)
    rank_sets: bool = False      # gives a set of ranks smaller than a node its own GPUs (Layout.ranks_per_set)
    per_node: bool = True        # can start one process on each node of the allocation (stage-in copies)
    binds_gpus: bool = False     # sets each rank's GPU visibility itself (else launcher_options.gpu_affinity_wrapper)
    smt: str = ""                # how a rank's hardware threads are asked for, in the launcher's words
    on_nodes: str = ""           # how it is told named nodes ("": it cannot; every-node acceptance refuses it)
    by_index: bool = False       # told the nodes' place in the allocation, not their names (at_index)
    forwards_env: bool = False   # needs each exported variable named on its line (Open MPI's -x)
    sized_by_header: bool = False  # takes its size from the batch header alone (TACC ibrun: no -c in the header)
    # One launch step across every node of the allocation, one task per node, whose task (exabench
    # node-agent) starts its node's run from that node with this launcher again: the every-node job's
    # form ("": the launcher is started from the batch node only; an MPI one runs the every-node job in
    # node worlds, exabench.campaign.node_worlds, and any other is refused).
    # The module then has `node_step() -> str`, the step's words with $count and $nodelist.
    node_step: str = ""


@dataclass(frozen=True)
class Placement:
    """A launch line placed on named nodes, with what it needs beside it."""

    argv: list
    files: tuple = ()   # (file name, text): read by the launch, written in the run's folder (the script's cwd)
    env: tuple = ()     # (variable, value): exported by the job script before the line


def on_this_host(argv: list[str], nodes: tuple[str, ...], ranks_per_node: int) -> list[str]:
    """`on_nodes` of a launcher that starts processes where it runs (local, torchrun): the
    current host only."""
    if tuple(nodes) != (socket.gethostname(),):
        raise ExabenchError(f"launch line '{' '.join(argv)[:60]}...': launcher '{argv[0]}' runs on the current host "
                            f"only, not on node(s) '{','.join(nodes)}'; valid for every-node runs: "
                            "a launcher that places runs on named nodes")
    return list(argv)
