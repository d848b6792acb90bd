"""Cluster-wide acceptance in one command: submit the every-node group jobs (exabench.campaign.node_groups)
whose runs are not all recorded, follow them, and note which runs a dead node kept from running.

Slurm schedules: every missing group job is submitted at once, in the order single nodes, pair
rounds, whole allocation (Slurm starts them in that order as licenses and nodes free up); where
the queue refuses more jobs of the user (a per-user limit), the rest are submitted as earlier ones
end, never dropped. A job
whose node goes down (not responding, down, drained, failed) is cancelled: pinned to that node it
would wait for ever. Its runs are then "not run: node down", not failed benchmarks, and leave no
record, so the next acceptance (after the node is back) submits only them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from exabench.campaign.node_groups import NodeGroup, group_runs
from exabench.campaign.plan import Run
from exabench.errors import ExabenchError

# sinfo's short states of a node that cannot run a job now (a trailing '*': not responding).
UNUSABLE = re.compile(r"^(down|drain|drng|fail|failg|maint|unk|futr|npc|pow_dn|powered_down|inval)|\*$")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}
NOT_RUN_DOWN = "not run: node down"


def planned_node_runs(runs: list[Run], groups: list[NodeGroup], root: Path) -> list[dict]:
    """Every (group, run) of the campaign: the group's kind, round and nodes, and the run's record."""
    out = []
    for g in groups:
        for r in group_runs(runs, g):
            node_run = f"{r.run_id}.node-{g.name}"
            out.append({"group": g.name, "kind": g.kind if len(g.nodes) > 1 or g.kind != "group" else "node",
                        "round": g.round, "nodes": list(g.nodes), "run_id": node_run, "configuration": r.run_id,
                        "benchmark": r.benchmark, "record": str(Path(root) / "records" / "nodes" / f"{node_run}.json")})
    return out


def _slurm(args: list[str], env: dict) -> str:
    try:
        res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExabenchError(f"`{' '.join(args)}` could not run: {exc}") from exc
    if res.returncode != 0:
        raise ExabenchError(f"`{' '.join(args)}` failed ({res.returncode}): {res.stderr.strip()[:500]}")
    return res.stdout


def node_states(env: dict) -> dict[str, str]:
    """sinfo's state of every node (e.g. idle, alloc, down*)."""
    out = {}
    for line in _slurm(["sinfo", "-h", "-N", "-o", "%N %t"], env).splitlines():
        name, _, state = line.strip().partition(" ")
        if name:
            out[name] = state.strip()
    return out


def job_states(ids: list[str], env: dict) -> dict[str, str]:
    """Each job's state, in ONE `squeue` call for all of them (`-t all`: finished jobs too, which the
    controller keeps for MinJobAge; squeue(1) lists only pending and running ones otherwise). A job
    squeue no longer knows (forgotten, or squeue refused the list because one id is) is asked of
    `scontrol show job` alone: a campaign of thousands of group jobs then costs the controller one
    query per poll, not one per job."""
    ids = [j for j in ids if j]
    out: dict[str, str] = {}
    if ids:
        try:
            text = _slurm(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T"], env)
        except ExabenchError:
            text = ""
        for line in text.splitlines():
            job, _, state = line.strip().partition(" ")
            if job in ids and state:
                out[job] = state.strip().upper()
    for job in ids:
        if job not in out:
            hit = re.search(r"JobState=(\w+)", _slurm(["scontrol", "show", "job", job], env))
            out[job] = hit.group(1) if hit else "UNKNOWN"
    return out


def run_groups(planned: list[dict], scripts: dict[str, Path], env: dict, say, poll_s: float = 3.0,
               max_wait_s: float = 3600.0, alone: frozenset = frozenset()) -> dict:
    """Submit the groups with a missing record, follow them until every job ended, cancel those on a
    node that went down; returns what happened (written as nodes/groups/jobs.json). A group in
    `alone` is submitted once every earlier job has ended, and nothing else while it runs."""
    missing = [p for p in planned if not Path(p["record"]).exists()]
    want = list(dict.fromkeys(p["group"] for p in missing))
    nodes_of = {p["group"]: p["nodes"] for p in planned}
    down: dict[str, str] = {}
    jobs: dict[str, dict] = {}

    def note_down(states):
        for node, state in states.items():
            if UNUSABLE.search(state) and node not in down:
                down[node] = state
                say(f"node {node} is {state}: its runs are not run")

    unsent = list(want)

    def submit() -> None:
        """Send the groups not sent yet, in order, while the scheduler takes them: a refusal with our
        jobs still queued is a per-user limit (Stampede2's development queue: one job), so the rest
        wait for one of them to end; a refusal with none queued is final for that group alone."""
        while unsent:
            group = unsent[0]
            running = [g for g, j in jobs.items() if j["job"] and j["state"] not in FINISHED]
            if running and (group in alone or any(g in alone for g in running)):
                return
            dead = [n for n in nodes_of[group] if n in down]
            if dead:
                jobs[unsent.pop(0)] = {"job": "", "state": "NOT_SUBMITTED", "down": dead}
                continue
            try:
                job = _slurm(["sbatch", "--parsable", str(scripts[group])], env).strip().split(";")[0]
            except ExabenchError as exc:
                if any(j["job"] and j["state"] not in FINISHED for j in jobs.values()):
                    return
                jobs[unsent.pop(0)] = {"job": "", "state": "NOT_SUBMITTED", "down": [], "error": str(exc)}
                say(f"group {group}: not submitted: {exc}")
                continue
            jobs[unsent.pop(0)] = {"job": job, "state": "PENDING", "down": []}

    note_down(node_states(env))
    submit()
    say(f"submitted {sum(1 for j in jobs.values() if j['job'])} group job(s)"
        + (f", {len(unsent)} waiting for room in their queue" if unsent else "")
        + f" ({len(planned) - len(missing)} of {len(planned)} runs recorded before)")
    deadline = time.monotonic() + max_wait_s
    while True:
        active = {g: j for g, j in jobs.items() if j["job"] and j["state"] not in FINISHED}
        if not active and unsent:
            submit()  # the last of our jobs ended: room for the next
            continue
        if not active:
            break
        if time.monotonic() > deadline:
            _slurm(["scancel", *[j["job"] for j in active.values()]], env)
            raise ExabenchError(f"group jobs {', '.join(active)} still not finished after {max_wait_s:.0f} s; "
                                "cancelled")
        time.sleep(poll_s)
        note_down(node_states(env))
        states = job_states([j["job"] for j in active.values()], env)
        for g, j in active.items():
            state = j["state"] = states[j["job"]]
            dead = [n for n in nodes_of[g] if n in down]
            if dead and state not in FINISHED:
                _slurm(["scancel", jobs[g]["job"]], env)
                jobs[g].update(state="CANCELLED", down=dead)
                say(f"group {g}: cancelled (node {' '.join(dead)} down)")
        if unsent and any(jobs[g]["state"] in FINISHED for g in active):
            submit()
    return {"planned": [{**p, "status": _status(p, jobs.get(p["group"]), down)} for p in planned],
            "jobs": jobs, "down": down}


def _status(p: dict, job: dict | None, down: dict[str, str]) -> str:
    if Path(p["record"]).exists():
        return "recorded"
    dead = [n for n in p["nodes"] if n in down]
    if dead:
        return f"{NOT_RUN_DOWN} ({' '.join(dead)}: {' '.join(down[n] for n in dead)})"
    if job and job.get("error"):
        return f"missing: not submitted ({job['error']})"
    return f"missing: job {job['job']} ended {job['state']}" if job else "missing: no job submitted"


def write_jobs(path: str | Path, result: dict) -> None:
    from exabench.io import atomic_write_text
    atomic_write_text(path, json.dumps(result, indent=2, sort_keys=True) + "\n")


def slurm_env(site_env: dict) -> dict:
    """The environment Slurm's commands need: ours, with the site's SLURM_CONF where it names one."""
    env = dict(os.environ)
    if site_env.get("SLURM_CONF"):
        env["SLURM_CONF"] = str(site_env["SLURM_CONF"])
    return env


# -- the confirmation round (exabench.analysis.node_confirm decides what it runs) ---------------------

CONFIRM_SUFFIX = ".confirm-"  # a confirmation run's id: <run>.node-<group>.confirm-<round>


def next_round(root: Path) -> int:
    """The confirmation round after the last one recorded: a rerun re-measures its suspects anew,
    never reusing an earlier round's records."""
    rounds = [int(m.group(1)) for p in (Path(root) / "records" / "nodes").glob(f"*{CONFIRM_SUFFIX}*.json")
              if (m := re.search(re.escape(CONFIRM_SUFFIX) + r"(\d+)\.json$", p.name))]
    return max(rounds, default=0) + 1


def confirmation_round(runs: list[Run], site, root: Path, spec: list[tuple[str, tuple[str, ...], str, str]],
                       round_: int, campaign: str, env: dict, say) -> dict:
    """Render, submit and follow a confirmation round: `spec` its groups as (name, nodes, kind, role),
    suspects and controls side by side in the order they are to run. Returns run_groups' result,
    each planned run with its role and round."""
    scripts, planned = confirmation_jobs(runs, site, root, spec, round_, campaign)
    # The pairs one at a time, after the node tests: a control pair can never run beside a pair that
    # holds a control, so a suspect's pair sharing the fabric (here, the cores) with another pair
    # would be judged against a control measured under less load (on the 8-node cluster, a healthy
    # node's pairs ran beside a throttled link's and read 0.61x the control pair: "confirmed").
    pairs = frozenset(name for name, nodes, _, _ in spec if len(nodes) > 1)
    return run_groups(planned, scripts, env, say, alone=pairs)


def confirmation_jobs(runs: list[Run], site, root: Path, spec: list[tuple[str, tuple[str, ...], str, str]],
                      round_: int, campaign: str) -> tuple[dict[str, Path], list[dict]]:
    """The round's group scripts, written (each group's first script by name), and its planned runs
    with their role and round; a group of the spec with no run of its size is left out."""
    from exabench.campaign.node_groups import group_jobs, group_script
    from exabench.campaign.node_sweep import node_sweep_paths
    from exabench.campaign.render import real_folders
    from exabench.io import atomic_write_many
    groups = [NodeGroup(name, nodes, "pair" if kind == "pair" else "group") for name, nodes, kind, _ in spec]
    # a campaign without runs on two nodes has no pair to re-make (on the 8-node cluster, single-node
    # tests only, the round stopped: "'n03..n05.confirm-1' has no run")
    groups = [g for g in groups if group_runs(runs, g)]
    role = {name: r for name, _, _, r in spec}
    out, folders, files, scripts = Path(root) / "nodes" / "groups", real_folders(root), [], {}
    for g, modes in group_jobs(runs, site, groups):
        paths = node_sweep_paths(out / f"{g.name}.sh", len(modes))
        files += [(path, group_script(job, site, root, g, campaign, path.stem, folders), 0o755)
                  for path, job in zip(paths, modes)]
        scripts[g.name] = paths[0]
    atomic_write_many(files)
    return scripts, [{**p, "role": role[p["group"]], "confirm": round_} for p in planned_node_runs(runs, groups, root)]
