"""The every-node job under an MPI launcher started from the batch node only (jsrun, aprun, mpiexec,
ibrun): per run ONE launch across every node of the allocation, the run's own ranks per node on
every node, in which each node's ranks split off their own MPI world by node name (python -m
exabench.runner --node-world) and run that node's prepared spec, as the node's own job would; each
node's rank 0 writes its node's record. Then ONE `exabench node-collect` gives every node left
without a record the record its launch earned (exabench.execute.collect_node_world).

One MPI launch is one job step: where a rank fails, the launcher stops every node's ranks (the
runner's failing rank exits at once; a launcher ends the launch of a rank that exits abnormally, and
MPI_Abort ends every process of its communicator's group). So a node whose own ranks failed is
recorded failed, with its ranks' error, or, where a rank was killed outright and no node's ranks
wrote an error, found by its empty stop mark (exabench.stacks.mark_stops); a node stopped only because another
failed is recorded `not run` (NOT_RUN_STOPPED: not judged on that run, not flagged), naming the
node that stopped it. A step past the run's time limit is stopped by `timeout` on the batch node: the
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
from exabench.campaign.site import Layout

# A node's record of a run whose one launch another node's failure stopped: it measured nothing, so
# it is not judged on that run (exabench.analysis.node_verdict reads the prefix).
NOT_RUN_STOPPED = "not run: stopped with the launch across every node"
# `timeout`'s exit when it stopped the step (124), or killed it after the grace (128 + 9); a launch
# whose rank was killed exits 137 too (Open MPI's mpirun), so the step's time tells them apart.
TIMED_OUT = (124, 137)
# How long a stopped step's ranks may take to leave before `timeout` kills them.
KILL_AFTER_S = 30


def timed_out(exit_code: int, elapsed_s: float | None, timeout_s: float) -> bool:
    """Whether the launch was stopped at its time limit by `timeout` (not a rank's own SIGKILL)."""
    return exit_code in TIMED_OUT and (elapsed_s is None or elapsed_s >= timeout_s)


def uses_node_worlds(site) -> bool:
    """Whether the site's every-node job runs each run as one MPI launch split into node worlds:
    an MPI launcher without a launch step per node (launchers' node_step)."""
    facts = launchers.facts(site.launcher)
    return facts.mpi and not facts.node_step


def job_layout(site, whole: Layout, runs: list[Layout]) -> Layout:
    """The request of a job of whole nodes (the every-node job, a node group's) under an MPI launcher
    started from the batch node: the node's own (`whole`, node_sweep.node_layout), with as many ranks
    per node as its widest run starts at once, since each launch starts the run's ranks inside the
    job's allocation (Slurm gives mpirun and ibrun that many slots a node; the srun form's one task
    a node would refuse them: "not enough slots")."""
    widest = max(r.ranks_per_node for r in runs)
    if widest <= whole.ranks_per_node or whole.gpus_per_rank or whole.ranks_per_gpu:
        return whole  # a GPU mode already asks a rank per GPU (or per share of one)
    cores = max(1, site.node.usable_cores // widest)
    return replace(whole, ranks_per_node=widest, threads_per_rank=cores * whole.smt, cores_per_rank=cores)


def node_count_guard(nodes: int) -> list[str]:
    """The job's check, before its runs, that its node list is the `nodes` its launch lines were
    rendered for: each launch starts ranks on every node of the allocation whatever the list says,
    so a job given more or fewer nodes (sbatch -N, EXABENCH_NODES) stops here, saying so."""
    return [f'if [ "$count" -ne {nodes} ]; then',
            f'  echo "exabench every-node acceptance: $count node(s) listed, but its launch lines start ranks on the '
            f'allocation\'s {nodes}: render it again with --config acceptance_nodes=$count, or list all {nodes}" >&2',
            "  exit 1", "fi"]


def launch_lines(run, site, nodes: int, spec_path: Path, python: str) -> list[str]:
    """The job script's lines for `run` on the allocation's `nodes` nodes: its environment, its one
    launch across every node under the run's time limit, then node-collect."""
    from exabench.campaign.render import program_argv, run_environment
    from exabench.stacks import DEADLINE_ENV
    q = shlex.quote
    layout = replace(run.layout, nodes=nodes)
    env = run_environment(site, layout, run.run_id)
    argv = launchers.launch_argv(site, layout, [*program_argv(site, spec_path, run, env), "--node-world"],
                                 exports=tuple(sorted([*env, DEADLINE_ENV])))
    module = launchers.LAUNCHERS[site.launcher]
    if module.FACTS.sized_by_header:  # ibrun starts the header's tasks unless told -n and -o (at_index)
        placed = module.at_index(argv, 0, ("",) * nodes, layout)
        argv, env = placed.argv, {**env, **dict(placed.env)}
    exports = " ".join(f"{k}={q(str(v))}" for k, v in env.items())
    # the ranks write where they were shortly before the limit, as a run job's do (exabench.stacks)
    exports += f" {DEADLINE_ENV}=$(( $(date +%s) + {run.timeout_s} ))"
    # `|| step=$?`: the script runs under `set -e`; a failed launch is recorded, not the script's end
    return [f"step=0; started=$SECONDS; ( export {exports}; exec timeout --kill-after={KILL_AFTER_S} {run.timeout_s} "
            f"{shlex.join(argv)} ) || step=$?",
            f'{q(python)} -m exabench node-collect --spec {q(str(spec_path))} --nodes-file "$nodelist" '
            '--exit "$step" --elapsed "$(( SECONDS - started ))" || status=1',
            '[ "$step" -eq 0 ] || status=1']
