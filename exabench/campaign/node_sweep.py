"""Cluster-wide acceptance: every single-node run of a campaign on every node of one
allocation, one launch per node, all nodes in parallel, in one job.

`render_node_sweep` writes that job as a script (the site's batch header, then per run a
loop over the allocation's nodes). For each node the script calls `exabench node-run`,
which derives the node's own spec and job script from the run's (the same launch line,
pinned to that node; run id `<run_id>.node-<node>`; record under records/nodes/), then
`exabench execute` runs it, so a node that crashes or hangs still leaves a failed record.
`exabench nodes` then flags nodes outside tolerance or outliers among their peers.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from pathlib import Path

from exabench.campaign import launchers
from exabench.errors import ExabenchError

# How a job script lists the nodes of its allocation, per scheduler (EXABENCH_NODES overrides).
NODE_LIST = {
    "slurm": 'scontrol show hostnames "$SLURM_JOB_NODELIST"',
    "lsf": "echo \"$LSB_HOSTS\" | tr ' ' '\\n' | sort -u",
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


def node_run_files(spec_path: str | Path, node: str, group_nodes: tuple[str, ...] | None = None) -> Path:
    """Write the node's spec.json and job.sh beside the run's; returns the node's spec path.
    With `group_nodes` (a job pinned to a node group, exabench.campaign.node_groups), `node` names
    the group, the run must use as many nodes as the group has, and a launcher that cannot be told
    hosts keeps its line: the job's allocation is the group."""
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
    if not group_nodes or Path(shlex.split(line)[0]).name in launchers.placeable():
        line = pin_to_nodes(line, nodes, spec["layout"]["ranks_per_node"])
    node_spec["launch_line"] = line
    where = f"node {node}" if not group_nodes else f"node group {node} ({' '.join(nodes)})"
    script = ["#!/usr/bin/env bash", f"# exabench: run {spec['run_id']} on {where} only (every-node acceptance).",
              "set -euo pipefail"]
    script += [f"export {k}={shlex.quote(str(v))}" for k, v in node_spec["env"].items()]
    script += [f"cd {shlex.quote(str(run_dir))}", line, ""]
    from exabench.io import atomic_write_text
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "spec.json", json.dumps(node_spec, indent=2, sort_keys=True) + "\n")
    atomic_write_text(run_dir / "job.sh", "\n".join(script), mode=0o755)
    return run_dir / "spec.json"


def sweep_body(spec_paths: list[Path], scheduler: str, python: str) -> str:
    """The job's body: the node list, then per run one parallel launch per node."""
    q = shlex.quote
    lines = ["# Every single-node run on every node of the allocation: one launch per node, in parallel.",
             f"nodes=(${{EXABENCH_NODES:-$({NODE_LIST[scheduler]})}})",
             'echo "exabench every-node acceptance: ${#nodes[@]} nodes: ${nodes[*]}"', "status=0"]
    for spec in spec_paths:
        lines += ["", f"# {spec.parent.name}", "pids=()", 'for node in "${nodes[@]}"; do',
                  f"  node_spec=$({q(python)} -m exabench node-run --spec {q(str(spec))} --node \"$node\")",
                  f"  {q(python)} -m exabench execute --spec \"$node_spec\" &",
                  "  pids+=($!)", "done",
                  'for pid in "${pids[@]}"; do wait "$pid" || status=1; done']
    lines += ["", 'echo "exabench every-node acceptance finished (status $status); check with: exabench nodes ..."',
              "exit $status"]
    return "\n".join(lines)


def render_node_sweep(runs, site, results: Path, nodes: int) -> str:
    """The whole job script: the site's own job script for an allocation of `nodes` nodes (its
    batch header, environment and working directory, from `render_script`), with the launch
    line replaced by the every-node body."""
    from exabench.campaign.render import RunPaths, render_script
    single = [r for r in runs if r.layout.nodes == 1]
    if not single:
        raise ExabenchError("no single-node run in the campaign; valid for every-node acceptance: runs with nodes 1")
    if site.scheduler not in NODE_LIST:
        raise ExabenchError(f"site '{site.name}': scheduler '{site.scheduler}' has no node list; valid: "
                            + ", ".join(NODE_LIST))
    if site.launcher not in launchers.placeable() and site.scheduler != "none":
        raise ExabenchError(f"site '{site.name}': launcher '{site.launcher}' cannot start a run on one named node; "
                            f"valid for every-node acceptance: {', '.join(launchers.placeable())}")
    # The allocation is sized for the widest single-node run (most ranks x threads per node).
    widest = max(single, key=lambda r: (r.layout.ranks_per_node * r.layout.threads_per_rank, r.layout.gpus_per_rank))
    job = replace(widest, run_id="every-node", benchmark="every-node", layout=replace(widest.layout, nodes=nodes),
                  timeout_s=sum(r.timeout_s for r in single))
    paths = RunPaths(results, job.run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)  # the job script changes into it
    text, line = render_script(job, site, paths)
    specs = [RunPaths(results, r.run_id).spec.resolve() for r in single]
    return text.replace(line, sweep_body(specs, site.scheduler, site.python_executable))
