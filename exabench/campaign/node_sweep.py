"""Cluster-wide acceptance: every single-node run of a campaign on every node of one
allocation, one launch per node, all nodes in parallel, in one job (or a few: sweep_jobs splits
runs that need different allocations or more time than one job may have).

`render_node_sweep` writes that job as a script (the site's batch header, then per run a
loop over the allocation's nodes). For each node the script calls `exabench node-run`,
which derives the node's own spec and job script from the run's (the same launch line,
pinned to that node, by name or, for jsrun and ibrun, by its place in the node list, which
the script passes; run id `<run_id>.node-<node>`; record under records/nodes/), then
`exabench execute` runs it, so a node that crashes or hangs still leaves a failed record.
`exabench nodes` then flags nodes outside tolerance or outliers among their peers.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

from exabench.campaign import allocation, launchers
from exabench.campaign.bundles import longest_walltime, pack_runs
from exabench.campaign.site import LAYOUT_KEYS, WALLTIME_MARGIN_MIN, Layout, NodeSpec, candidate_queues
from exabench.errors import ExabenchError

# How a job script lists the compute nodes of its allocation, in the allocation's order, per
# scheduler (EXABENCH_NODES overrides; with jsrun or ibrun it must keep that order). LSF: the job's
# host file names each host once per slot, the host running the job script first (Summit's batch
# node, SummitDev's login node), which is no compute node and is jsrun's ERF host 0.
NODE_LIST = {
    "slurm": 'scontrol show hostnames "$SLURM_JOB_NODELIST"',
    "lsf": "awk '!seen[$0]++' \"$LSB_DJOB_HOSTFILE\" | tail -n +2",
    "pbs": 'sort -u "$PBS_NODEFILE"',
    "cobalt": 'sort -u "$COBALT_NODEFILE"',
    "none": "hostname",
}
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
    for name in (node, *(group_nodes or ())):
        if not NODE_NAME.fullmatch(name):
            raise ExabenchError(f"node name {name!r} is not valid; valid: letters, digits, '.', '_', '-'")
    spec_path = Path(spec_path).resolve()
    spec = json.loads(spec_path.read_text())
    nodes = tuple(group_nodes) if group_nodes else (node,)
    if spec["layout"]["nodes"] != len(nodes):
        valid = f"runs on {len(nodes)} nodes only (the group's)" if group_nodes else "single-node runs only"
        raise ExabenchError(f"{spec_path}: run '{spec['run_id']}' uses {spec['layout']['nodes']} nodes; valid for "
                            f"every-node runs: {valid}")
    run_id = f"{spec['run_id']}.node-{node}"
    results = Path(spec["paths"]["record"]).parent.parent  # results/<site>
    run_dir = results / "nodes" / spec["run_id"] / node
    node_spec = {**spec, "run_id": run_id, "node": node,
                 "paths": {"run_dir": str(run_dir), "record": str(results / "records" / "nodes" / f"{run_id}.json"),
                           "archive_dir": str(results / "archive" / "nodes" / run_id)}}
    if group_nodes:
        node_spec["group_nodes"] = list(group_nodes)
    node_spec["env"] = {**spec["env"], "EXABENCH_RUN_ID": run_id}
    line = spec["launch_line"].replace(str(spec_path), str(run_dir / "spec.json"))
    files: tuple = ()
    if not group_nodes or Path(shlex.split(line)[0]).name in launchers.placeable_by_name():
        # a spec rendered before it carried the node's cores and GPUs has none
        usable = NodeSpec(**spec["usable_node"]) if "usable_node" in spec else None
        placed = launchers.place(shlex.split(line), nodes, _layout(spec["layout"]), index, usable)
        line, files = shlex.join(placed.argv), placed.files
        node_spec["env"] = {**node_spec["env"], **dict(placed.env)}
    node_spec["launch_line"] = line
    where = f"node {node}" if not group_nodes else f"node group {node} ({' '.join(nodes)})"
    script = ["#!/usr/bin/env bash", f"# exabench: run {spec['run_id']} on {where} only (every-node acceptance).",
              "set -euo pipefail"]
    script += [f"export {k}={shlex.quote(str(v))}" for k, v in node_spec["env"].items()]
    script += [f"cd {shlex.quote(str(run_dir))}", line, ""]
    from exabench.io import atomic_write_text
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, text in files:
        atomic_write_text(run_dir / name, text)
    atomic_write_text(run_dir / "spec.json", json.dumps(node_spec, indent=2, sort_keys=True) + "\n")
    atomic_write_text(run_dir / "job.sh", "\n".join(script), mode=0o755)
    return run_dir / "spec.json"


def _layout(d: dict) -> Layout:
    """A spec's layout dict as the Layout it was written from (its derived `ranks` left out)."""
    return Layout(**{k: v for k, v in d.items() if k in LAYOUT_KEYS})


def sweep_body(spec_paths: list[Path], scheduler: str, python: str) -> str:
    """The job's body: the node list, then per run one parallel launch per node."""
    q = shlex.quote
    lines = ["# Every single-node run on every node of the allocation: one launch per node, in parallel.",
             f"nodes=(${{EXABENCH_NODES:-$({NODE_LIST[scheduler]})}})",
             'echo "exabench every-node acceptance: ${#nodes[@]} nodes: ${nodes[*]}"', "status=0"]
    for spec in spec_paths:
        lines += ["", f"# {spec.parent.name}", "pids=()", 'for i in "${!nodes[@]}"; do',
                  f"  node_spec=$({q(python)} -m exabench node-run --spec {q(str(spec))} --node \"${{nodes[$i]}}\" "
                  '--index "$i")',
                  f"  {q(python)} -m exabench execute --spec \"$node_spec\" &",
                  "  pids+=($!)", "done",
                  'for pid in "${pids[@]}"; do wait "$pid" || status=1; done']
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
    room = longest - WALLTIME_MARGIN_MIN if longest else 0
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
    if site.scheduler not in NODE_LIST:
        raise ExabenchError(f"site '{site.name}': scheduler '{site.scheduler}' has no node list; valid: "
                            + ", ".join(NODE_LIST))
    if site.launcher not in launchers.placeable() and site.scheduler != "none":
        raise ExabenchError(f"site '{site.name}': launcher '{site.launcher}' cannot start a run on one named node; "
                            f"valid for every-node acceptance: {', '.join(launchers.placeable())}")
    return single


def render_node_sweep(runs, site, results: Path, nodes: int, name: str = "every-node") -> str:
    """One every-node job script: the site's own job script for `nodes` whole nodes (its batch
    header for node_layout, environment and working directory, from `render_script`), with the
    launch line replaced by the every-node body running the single-node `runs` in turn; they must
    share one allocation mode (sweep_jobs groups them so)."""
    from exabench.campaign.render import RunPaths, render_script
    single = single_node_runs(runs, site)
    allocation.common_request(site, [node_layout(site, 1, r.layout) for r in single], "every-node job")
    job = replace(single[0], run_id=name, benchmark="every-node", layout=node_layout(site, nodes, single[0].layout),
                  timeout_s=sum(r.timeout_s for r in single))
    paths = RunPaths(results, job.run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)  # the job script changes into it
    text, line = render_script(job, site, paths)
    specs = [RunPaths(results, r.run_id).spec.resolve() for r in single]
    return text.replace(line, sweep_body(specs, site.scheduler, site.python_executable))


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
