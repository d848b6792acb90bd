"""The every-node job's agent (`exabench node-agent`): one per node, started by the job's one launch
step across every node (exabench.campaign.node_sweep), it finds the spec `node-prepare` wrote for
its own node; the command (exabench.cli) then executes it, leaving that node's record, failed where
the run crashed or hung. Under an MPI launcher the job has no agent (exabench.campaign.node_worlds):
exabench.execute.collect_node_world (`exabench node-collect`) then records each node its launch left without a record.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from exabench.campaign.node_sweep import node_dir
from exabench.errors import ExabenchError


# Set per rank by whatever starts several nodes' ranks on one host (a test, a stand-in): the node
# that rank stands for.
NODE_NAME_ENV = "EXABENCH_NODE_NAME"


def this_node() -> tuple[str, ...]:
    """The names this node may have in the job's node list: the scheduler's own name for it (Slurm
    sets SLURMD_NODENAME in every task; several nodes may share one host, as on the loopback
    cluster), else the host's name, full and short."""
    host = socket.gethostname()
    named = (os.environ.get(NODE_NAME_ENV, ""), os.environ.get("SLURMD_NODENAME", ""))
    return tuple(dict.fromkeys(n for n in (*named, host, host.split(".")[0]) if n))


def node_spec_path(run_spec: str | Path, names: tuple[str, ...]) -> Path:
    """The prepared spec of the run `run_spec` for the node called one of `names`."""
    spec = json.loads(Path(run_spec).read_text())
    for name in names:
        path = node_dir(spec, name) / "spec.json"
        if path.exists():
            return path
    raise ExabenchError(f"node-agent: run '{spec['run_id']}' has no spec prepared for node '{names[0]}' (looked in "
                        f"{node_dir(spec, names[0]).parent}); valid: a node of the list given to exabench node-prepare")


def run_here(run_spec: str | Path, nodes: list[str]) -> int:
    """Without a scheduler every listed node stands for this host: run their specs here, all at once."""
    paths = [node_spec_path(run_spec, (n,)) for n in nodes]
    procs = [subprocess.Popen([sys.executable, "-m", "exabench", "execute", "--spec", str(p),
                               "--log", str(p.parent / "agent.log")]) for p in paths]
    return 0 if all(p.wait() == 0 for p in procs) else 1
