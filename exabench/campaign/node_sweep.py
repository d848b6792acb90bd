"""Cluster-wide acceptance: every single-node run of a campaign on every node of one
allocation, all nodes at once, in one job (or a few: sweep_jobs splits runs that need different
allocations or more time than one job may have).

`render_node_sweep` writes that job as a script (the site's batch header, then the every-node
body), shaped as node-health tools are: the job lists its nodes, ONE `exabench node-prepare`
process writes every node's spec and job script for every run (`node_run_files`: the run's launch
line pinned to that node; run id `<run_id>.node-<node>`; record under records/nodes/), then per run
ONE launch step spans every node with one task per node (the launcher's `node_step`, srun), in
which `exabench node-agent` runs its own node's spec, so a node that crashes or hangs still leaves a
failed record; under an MPI launcher started from the batch node only (jsrun, aprun, mpiexec,
ibrun), ONE launch starts the run's ranks on every node, each node's ranks in their own MPI world
(exabench.campaign.node_worlds). The batch node holds the script, one launcher process and, during the preparation,
one Python process, whatever the node count; the job's walltime is the runs' time limits plus
the preparation's budget (prepare_budget_s). `exabench nodes` then flags nodes outside tolerance
or outliers among their peers.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

from exabench.campaign import allocation, launchers, node_worlds, schedulers
from exabench.campaign.bundles import longest_walltime, pack_runs
from exabench.campaign.site import LAYOUT_KEYS, WALLTIME_MARGIN_MIN, Layout, NodeSpec, candidate_queues
from exabench.errors import ExabenchError

NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def pin_to_node(launch_line: str, node: str, ranks_per_node: int) -> str:
    """The run's launch line restricted to one node (launchers that can be told a host)."""
    return pin_to_nodes(launch_line, (node,), ranks_per_node)


def pin_to_nodes(launch_line: str, nodes: tuple[str, ...], ranks_per_node: int) -> str:
    """The run's launch line restricted to `nodes` (launchers that can be told hosts)."""
    return shlex.join(launchers.on_nodes(shlex.split(launch_line), tuple(nodes), ranks_per_node))


def node_run_files(spec_path: str | Path, node: str, group_nodes: tuple[str, ...] | None = None,
                   index: int | None = None) -> Path:
    """Write the node's spec.json and job.sh (and what its launch reads, jsrun's ERF) beside the
    run's; returns the node's spec path. `index` is the node's place in the allocation's node list
    (0 first), which launchers told nodes by place need. With `group_nodes` (a job pinned to a node
    group, exabench.campaign.node_groups), `node` names the group, the run must use as many nodes as
    the group has, and a launcher not told hosts by name keeps its line: the job's allocation is
    the group."""
    from exabench.io import atomic_write_many
    check_node_names(node, group_nodes)  # before the spec is read: a bad name is the user's first error
    spec_path = Path(spec_path).resolve()
    path, files = node_files(spec_path, json.loads(spec_path.read_text()), node, group_nodes, index)
    atomic_write_many(files)
    return path


def check_node_names(node: str, group_nodes: tuple[str, ...] | None = None) -> None:
    for name in (node, *(group_nodes or ())):
        if not NODE_NAME.fullmatch(name):
            raise ExabenchError(f"node name {name!r} is not valid; valid: letters, digits, '.', '_', '-'")


def node_dir(spec: dict, node: str) -> Path:
    """Where the run `spec` (a single-node run's own spec) keeps node `node`'s spec, script and output."""
    results = Path(spec["paths"]["record"]).parent.parent  # results/<site>
    return results / "nodes" / spec["run_id"] / node


def node_files(spec_path: Path, spec: dict, node: str, group_nodes: tuple[str, ...] | None = None,
               index: int | None = None, argv: list[str] | None = None) -> tuple[Path, list[tuple[Path, str, int]]]:
    """(the node's spec path, the (path, text, mode) of its files) for node_run_files, from a spec
    already read and, where given, its launch line already split (`argv`): the preparation reads
    and splits each run's once for all its nodes."""
    check_node_names(node, group_nodes)
    nodes = tuple(group_nodes) if group_nodes else (node,)
    if spec["layout"]["nodes"] != len(nodes):
        valid = f"runs on {len(nodes)} nodes only (the group's)" if group_nodes else "single-node runs only"
        raise ExabenchError(f"{spec_path}: run '{spec['run_id']}' uses {spec['layout']['nodes']} nodes; valid for "
                            f"every-node runs: {valid}")
    run_id = f"{spec['run_id']}.node-{node}"
    results = Path(spec["paths"]["record"]).parent.parent  # results/<site>
    run_dir = node_dir(spec, node)
    node_spec = {**spec, "run_id": run_id, "node": node,
                 "paths": {"run_dir": str(run_dir), "record": str(results / "records" / "nodes" / f"{run_id}.json"),
                           "archive_dir": str(results / "archive" / "nodes" / run_id)}}
    if group_nodes:
        node_spec["group_nodes"] = list(group_nodes)
    node_spec["env"] = {**spec["env"], "EXABENCH_RUN_ID": run_id}
    words = [w.replace(str(spec_path), str(run_dir / "spec.json"))
             for w in (argv if argv is not None else shlex.split(spec["launch_line"]))]
    files: tuple = ()
    if not group_nodes or Path(words[0]).name in launchers.placeable_by_name():
        # a spec rendered before it carried the node's cores and GPUs has none
        usable = NodeSpec(**spec["usable_node"]) if "usable_node" in spec else None
        placed = launchers.place(words, nodes, _layout(spec["layout"]), index, usable)
        words, files = placed.argv, placed.files
        node_spec["env"] = {**node_spec["env"], **dict(placed.env)}
    line = node_spec["launch_line"] = shlex.join(words)
    where = f"node {node}" if not group_nodes else f"node group {node} ({' '.join(nodes)})"
    script = ["#!/usr/bin/env bash", f"# exabench: run {spec['run_id']} on {where} only (every-node acceptance).",
              "set -euo pipefail"]
    script += [f"export {k}={shlex.quote(str(v))}" for k, v in node_spec["env"].items()]
    script += [f"cd {shlex.quote(str(run_dir))}", line, ""]
    out = [(run_dir / name, text, 0o644) for name, text in files]
    out += [(run_dir / "spec.json", json.dumps(node_spec, indent=2, sort_keys=True) + "\n", 0o644),
            (run_dir / "job.sh", "\n".join(script), 0o755)]
    return run_dir / "spec.json", out


# Node specs written per atomic_write_many (one flush to disk for all of them).
_PREPARE_BATCH = 1000


def prepare_nodes(spec_paths: list[str | Path], nodes: list[str]) -> int:
    """The every-node job's one preparation pass (`exabench node-prepare`, before its runs): every
    node's spec and job script for every run, in one process, each run's spec read and its launch
    line split once; the node list in the allocation's order (a node's index is its place in it).
    The files are flushed to disk in batches, not one by one (per-file fsync was 80 % of the time).
    Returns the node specs written."""
    from exabench.io import atomic_write_many
    if not nodes:
        raise ExabenchError("node-prepare: the node list is empty; valid: the allocation's compute nodes, one a line")
    written = 0
    for spec_path in spec_paths:
        spec_path = Path(spec_path).resolve()
        spec = json.loads(spec_path.read_text())
        argv = shlex.split(spec["launch_line"])
        batch: list = []
        for i, node in enumerate(nodes):
            batch += node_files(spec_path, spec, node, None, i, argv)[1]
            written += 1
            if written % _PREPARE_BATCH == 0:
                atomic_write_many(batch)
                batch = []
        atomic_write_many(batch)
    return written


def _layout(d: dict) -> Layout:
    """A spec's layout dict as the Layout it was written from (its derived `ranks` left out)."""
    return Layout(**{k: v for k, v in d.items() if k in LAYOUT_KEYS})


# The preparation's budget in the every-node job's walltime, per node spec written (a node of one
# run): 10x what `node-prepare` measured here (tests/integration/test_every_node.py prints it for
# 10,000 nodes: ~1 ms each on a local disk), for a parallel file system's slower metadata.
PREPARE_S_PER_NODE_SPEC = 0.01


def prepare_budget_s(nodes: int, runs: int) -> int:
    """The seconds the job's one preparation pass may take for `runs` runs on `nodes` nodes."""
    return max(60, int(nodes * runs * PREPARE_S_PER_NODE_SPEC) + 1)


def sweep_body(spec_paths: list[Path], site, python: str, runs=(), nodes: int = 0) -> str:
    """The job's body: the node list, every node's spec prepared in one pass, then per run one
    launch step across every node: one exabench node-agent per node, or, under an MPI launcher
    started from the batch node only, the run's ranks on every node in node worlds (node_worlds;
    it needs the `runs` of `spec_paths` and the allocation's `nodes`)."""
    q = shlex.quote
    scheduler = schedulers.of(site).FACTS  # its node list: the allocation's nodes in its order
    specs = " ".join(f"--spec {q(str(s))}" for s in spec_paths)
    lines = ["# Every single-node run on every node of the allocation, all nodes at once: every node's spec",
             "# prepared in one pass, then per run one launch step across every node, each node running its own.",
             f"nodes=(${{EXABENCH_NODES:-$({scheduler.node_list})}})",
             # a file, not a word: 9,408 names exceed the 128 KiB one argument may have (srun reads a
             # --nodelist holding a '/' as a file, srun(1))
             'count=${#nodes[@]}; nodelist="$PWD/nodes.txt"; printf "%s\\n" "${nodes[@]}" > "$nodelist"',
             'echo "exabench every-node acceptance: $count nodes: ${nodes[*]}"',
             "prepare_start=$SECONDS",
             f'{q(python)} -m exabench node-prepare --nodes-file "$nodelist" {specs}',
             'echo "exabench every-node acceptance: every node\'s specs prepared in $((SECONDS - prepare_start)) s"',
             "status=0"]
    worlds = scheduler.name != "none" and node_worlds.uses_node_worlds(site)
    lines = lines[:-1] + (node_worlds.node_count_guard(nodes) if worlds else []) + lines[-1:]
    if scheduler.name == "none":  # no allocation: every listed node stands for this host, one agent runs them all
        step, here = "", ' --here "${nodes[@]}"'
    elif not worlds:
        step, here = launchers.LAUNCHERS[site.launcher].node_step() + " ", ""
    for i, spec in enumerate(spec_paths):
        lines += ["", f"# {spec.parent.name}"]
        lines += (node_worlds.launch_lines(runs[i], site, nodes, spec, python) if worlds else
                  [f"{step}{q(python)} -m exabench node-agent --spec {q(str(spec))}{here} || status=1"])
    lines += ["", 'echo "exabench every-node acceptance finished (status $status); check with: exabench nodes ..."',
              "exit $status"]
    return "\n".join(lines)


def sweep_nodes(site) -> int:
    """The nodes an every-node job asks for by default: the most one job may have (the largest
    queue's, at most the machine's max_nodes)."""
    tops = [q.max_nodes or site.max_nodes for q in candidate_queues(site)]
    return min(max(tops), site.max_nodes) if tops else site.max_nodes


def node_layout(site, nodes: int, like: Layout) -> Layout:
    """Whole nodes in the allocation-wide mode of `like` (its SMT level, its ranks sharing GPUs):
    every usable core and GPU, one rank per GPU (per share of one) or one rank per node. The
    every-node job asks for this, so its header is the node's own request, the same for every run
    of that mode, and never less than any of them uses."""
    gpus, share = site.node.gpus, like.ranks_per_gpu if like.ranks_per_gpu > 1 else 0
    per_node = gpus * (share or 1) if gpus else 1
    cores = max(1, site.node.usable_cores // per_node)
    return Layout(nodes, per_node, threads_per_rank=cores * like.smt, gpus_per_rank=1 if gpus and not share else 0,
                  smt=like.smt, ranks_per_gpu=share, cores_per_rank=cores)


def sweep_jobs(runs, site, nodes: int) -> list[list]:
    """The every-node jobs of a campaign: its single-node runs grouped by the allocation their mode
    needs (exabench.campaign.allocation: Summit's smt1 and smt4 runs never share one), each group
    packed into jobs a queue admits on `nodes` nodes (their time limits summed, as a bundle's)."""
    longest = longest_walltime(site, nodes)
    single = single_node_runs(runs, site)
    # the preparation's budget for all of them: an upper bound for any one job's
    prepare_min = -(-prepare_budget_s(nodes, len(single)) // 60)
    room = max(1, longest - WALLTIME_MARGIN_MIN - prepare_min) if longest else 0
    return [job for mode in allocation_modes(single_node_runs(runs, site), site) for job in pack_runs(mode, room)]


def allocation_modes(runs, site) -> list[list]:
    """`runs` grouped by the whole-node allocation each needs (node_layout's request: SMT mode, MPS),
    in the order first seen: the runs one job of whole nodes can hold."""
    modes: dict = {}
    for r in runs:
        modes.setdefault(allocation.request(site, node_layout(site, 1, r.layout)), []).append(r)
    return list(modes.values())


def single_node_runs(runs, site) -> list:
    """The runs an every-node job runs; ExabenchError where there are none or the site cannot
    place a run on one of its nodes."""
    single = [r for r in runs if r.layout.nodes == 1]
    if not single:
        raise ExabenchError("no single-node run in the campaign; valid for every-node acceptance: runs with nodes 1")
    if not schedulers.of(site).FACTS.node_list:
        raise ExabenchError(f"site '{site.name}': scheduler '{site.scheduler}' has no node list; valid: "
                            + ", ".join(n for n, m in schedulers.SCHEDULERS.items() if m.FACTS.node_list))
    if site.launcher not in launchers.placeable() and site.scheduler != "none":
        raise ExabenchError(f"site '{site.name}': launcher '{site.launcher}' cannot start a run on one named node; "
                            f"valid for every-node acceptance: {', '.join(launchers.placeable())}")
    facts = launchers.facts(site.launcher)
    if site.scheduler != "none" and not facts.node_step and not facts.mpi:
        stepping = [n for n in launchers.placeable() if launchers.facts(n).node_step or launchers.facts(n).mpi]
        raise ExabenchError(f"site '{site.name}': launcher '{site.launcher}' is started from the batch node only and "
                            "starts no MPI ranks, so no one launch across every node can run each node's own run "
                            "there (one launch per node would hold thousands of processes on the batch node); valid "
                            f"for every_node_script: launcher {', '.join(stepping)}; on this site: every_node_groups "
                            "(one job per node)")
    return single


def render_node_sweep(runs, site, results: Path, nodes: int, name: str = "every-node") -> str:
    """One every-node job script: the site's own job script for `nodes` whole nodes (its batch
    header for node_layout, environment and working directory, from `render_script`), with the
    launch line replaced by the every-node body running the single-node `runs` in turn; they must
    share one allocation mode (sweep_jobs groups them so)."""
    from exabench.campaign.render import RunPaths, render_script
    single = single_node_runs(runs, site)
    allocation.common_request(site, [node_layout(site, 1, r.layout) for r in single], "every-node job")
    layout = node_layout(site, nodes, single[0].layout)
    if node_worlds.uses_node_worlds(site) and site.scheduler != "none":
        layout = node_worlds.job_layout(site, layout, [r.layout for r in single])
    job = replace(single[0], run_id=name, benchmark="every-node", layout=layout,
                  timeout_s=sum(r.timeout_s for r in single) + prepare_budget_s(nodes, len(single)))
    paths = RunPaths(results, job.run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)  # the job script changes into it
    text, line = render_script(job, site, paths)
    specs = [RunPaths(results, r.run_id).spec.resolve() for r in single]
    budget = (f"# Walltime: the runs' time limits ({sum(r.timeout_s for r in single) / 60:.0f} min) plus the "
              f"preparation's budget ({prepare_budget_s(nodes, len(single)) / 60:.0f} min: {nodes} nodes x "
              f"{len(single)} runs) and the margin.\n")
    return text.replace(line, budget + sweep_body(specs, site, site.python_executable, single, nodes))


def sweep_plan_lines(runs, site, nodes: int) -> list[str]:
    """What `exabench plan` says of the every-node job(s) on `nodes` nodes: per job its walltime,
    split into the runs' time limits and the preparation's budget; or why there is none."""
    from exabench.campaign.render import walltime_min
    try:
        jobs = sweep_jobs(runs, site, nodes)
    except ExabenchError as exc:
        return [f"every-node job: none ({exc})"]
    out = []
    for i, job in enumerate(jobs, 1):
        runs_s, prepare_s = sum(r.timeout_s for r in job), prepare_budget_s(nodes, len(job))
        minutes = walltime_min(site, runs_s + prepare_s, nodes)
        out.append(f"every-node job {i} of {len(jobs)}: {len(job)} run(s) on {nodes} nodes, walltime {minutes} min "
                   f"(runs {runs_s / 60:.0f} min + preparation budget {prepare_s / 60:.0f} min for {nodes} x "
                   f"{len(job)} node specs, and the margin)")
    return out


def node_sweep_paths(out: Path, jobs: int) -> list[Path]:
    """Where the jobs' scripts go: `out` itself for one job; else out-01-of-NN.sh ... beside it,
    `out` then submitting them all."""
    out = Path(out)
    if jobs == 1:
        return [out]
    width = max(2, len(str(jobs)))
    return [out.with_name(f"{out.stem}-{i:0{width}d}-of-{jobs:0{width}d}{out.suffix}") for i in range(1, jobs + 1)]


def node_sweep_files(runs, site, results: Path, nodes: int, out: Path) -> list[tuple[Path, str, int]]:
    """(path, text, mode) of every every-node job (sweep_jobs) and, where there are several, of
    `out`, which submits them all (runs them one after another without a scheduler)."""
    jobs = sweep_jobs(runs, site, nodes)
    paths = node_sweep_paths(out, len(jobs))
    files = [(path, render_node_sweep(job, site, results, nodes, path.stem), 0o755) for path, job in zip(paths, jobs)]
    if len(jobs) > 1:
        lines = ["#!/usr/bin/env bash", f"# exabench: the every-node acceptance of site {site.name} as {len(jobs)} "
                 "jobs (runs that need different allocations, or more time than one job may have).",
                 "set -euo pipefail"]
        lines += [allocation.submit_line(site, Path(p).resolve()) for p in paths]
        files.append((Path(out), "\n".join(lines) + "\n", 0o755))
    return files
