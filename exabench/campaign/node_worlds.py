"""The every-node job under an MPI launcher started from the batch node only (jsrun, aprun, mpiexec,
ibrun): per run ONE launch across every node of the allocation, the run's own ranks per node on
every node, in which each node's ranks split off their own MPI world by node name (python -m
exabench.runner --node-world) and run that node's prepared spec, as the node's own job would; each
node's rank 0 writes its node's record. Then ONE `exabench node-collect` gives every node left
without a record the record its launch earned (exabench.execute.collect_node_world).

One MPI launch is one job step: where a rank fails, the launcher stops every node's ranks
(MPI_Abort's scope is the launch, MPI 4.0 section 9.3). So a node whose own ranks failed is recorded
failed, with its ranks' error; a node stopped only because another failed is recorded `not run`
(NOT_RUN_STOPPED: not judged on that run, not flagged), and the report names the node
that stopped it. A step past the run's time limit is stopped by `timeout` on the batch node: the
nodes without a record are recorded `timeout`. The batch node holds the script, `timeout`, the
launcher's one process and, between runs, one Python process, whatever the node count.

Sources: OLCF Summit User Guide, "Job Launcher (jsrun)" (one jsrun per job step from the batch
node, -n resource sets over the allocation's nodes, -r per node); ALCF Polaris "Running Jobs"
(mpiexec -n total --ppn per node from the job's node list); Cray aprun(1) (-n PEs, -N per node);
TACC Stampede2 User Guide, "Launching Applications" (ibrun -n, -o offset) and the MPI standard's
MPI_Comm_split (a communicator per colour).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from exabench.campaign import launchers

# A node's record of a run whose one launch another node's failure stopped: it measured nothing, so
# it is not judged on that run (exabench.analysis.node_verdict reads the prefix).
NOT_RUN_STOPPED = "not run: stopped with the launch across every node"
# `timeout`'s exit when it stopped the step (124), or killed it after the grace (128 + 9).
TIMED_OUT = (124, 137)
# How long a stopped step's ranks may take to leave before `timeout` kills them.
KILL_AFTER_S = 30


def uses_node_worlds(site) -> bool:
    """Whether the site's every-node job runs each run as one MPI launch split into node worlds:
    an MPI launcher without a launch step per node (launchers' node_step)."""
    facts = launchers.facts(site.launcher)
    return facts.mpi and not facts.node_step


def launch_lines(run, site, nodes: int, spec_path: Path, python: str) -> list[str]:
    """The job script's lines for `run` on the allocation's `nodes` nodes: its environment, its one
    launch across every node under the run's time limit, then node-collect."""
    from exabench.campaign.render import program_argv, run_environment
    q = shlex.quote
    layout = replace(run.layout, nodes=nodes)
    env = run_environment(site, layout, run.run_id)
    argv = launchers.launch_argv(site, layout, [*program_argv(site, spec_path, run, env), "--node-world"],
                                 exports=tuple(sorted(env)))
    module = launchers.LAUNCHERS[site.launcher]
    if module.FACTS.sized_by_header:  # ibrun starts the header's tasks unless told -n and -o (at_index)
        placed = module.at_index(argv, 0, ("",) * nodes, layout)
        argv, env = placed.argv, {**env, **dict(placed.env)}
    exports = " ".join(f"{k}={q(str(v))}" for k, v in env.items())
    # `|| step=$?`: the script runs under `set -e`; a failed launch is recorded, not the script's end
    return [f"step=0; ( export {exports}; exec timeout --kill-after={KILL_AFTER_S} {run.timeout_s} "
            f"{shlex.join(argv)} ) || step=$?",
            f'{q(python)} -m exabench node-collect --spec {q(str(spec_path))} --nodes-file "$nodelist" '
            '--exit "$step" || status=1',
            '[ "$step" -eq 0 ] || status=1']
