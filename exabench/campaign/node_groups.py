"""Cluster-wide acceptance, one job per node or node group: the campaign's `every_node` key names
the nodes and how they are grouped (each node alone, pairs, racks); each group gets ONE batch
script, pinned to its nodes, that runs in sequence every run of the campaign planned on that many
nodes (one per allocation mode where the runs need several: Summit's smt1 and smt4 runs), its header
the request of the group's whole nodes.

The scripts are rendered together, once per group (not once per run and node): the group's
script calls `exabench node-run` to derive each run's node spec from the run's own rendered spec
(exabench.campaign.node_sweep; run id `<run_id>.node-<group>`, record under records/nodes/), then
`exabench execute`. A run whose record exists is skipped, so a resubmitted group runs only what
is missing. node_check reads the records as it reads those of the whole-allocation sweep.

Groups may be of several kinds at once (`group: [1, pairs, all]`): each node alone, node pairs
in `pair_rounds` rounds of perfect matchings (pair_rounds), and the whole node list. Pairs test
links: a slow pair has two suspects, so every node sits in pairs with several partners and the
verdict (exabench.analysis.node_verdict) names the node that all its pairs share.
"""

from __future__ import annotations

import re
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

from exabench.errors import ConfigError
from exabench.campaign import allocation, schedulers
from exabench.campaign.bundles import longest_walltime, pack_runs
from exabench.campaign import node_worlds
from exabench.campaign.node_sweep import NODE_NAME, allocation_modes, node_layout, node_sweep_paths
from exabench.campaign.plan import Run
from exabench.campaign.render import RunPaths, batch_request, batch_script, real_folders, runs_walltime_min
from exabench.campaign.site import WALLTIME_MARGIN_MIN, Site, check_walltime

KEY = "every_node"
HOSTLIST_VALID = "a list of node names, or a hostlist expression such as 'nid[001-128]' or 'n[1-4,7],gpu[01-02]'"
_BRACKET = re.compile(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


PAIR_ROUNDS = 3  # default rounds: each node meets three partners, so one noisy pair convicts no link


@dataclass(frozen=True)
class NodeGroup:
    """Nodes that run together: a node alone (named by it), consecutive nodes (`first..last`), a rack,
    a pair of a pairing round (`a..b`, kind `pair`) or every node (`all`, kind `all`)."""

    name: str
    nodes: tuple[str, ...]
    kind: str = "group"
    round: int = 0  # the pairing round of a pair (1-based)


def pair_rounds(nodes: list[str], rounds: int) -> list[list[tuple[str, str]]]:
    """`rounds` perfect matchings of the nodes with no pair twice (the circle method of round-robin
    tournaments: the first node stays, the others rotate by one each round). With an odd count one
    node sits out each round. At most len(nodes) - 1 rounds (odd: len(nodes)) exist."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])
    fixed, rest = ring[0], ring[1:]
    out = []
    for r in range(min(rounds, len(rest))):
        turn = rest[r:] + rest[:r]
        pairs = [(fixed, turn[0])] + [(turn[i], turn[-i]) for i in range(1, len(ring) // 2)]
        out.append([tuple(sorted(p, key=nodes.index)) for p in pairs if None not in p])
    return out


def _groups_of_kind(kind, nodes: list[str], spec: dict, file: str) -> list[NodeGroup]:
    if kind == "pairs":
        rounds = spec.get("pair_rounds", PAIR_ROUNDS)
        if len(nodes) < 3:
            raise ConfigError(file, f"{KEY}.nodes", nodes, "at least 3 nodes for group: pairs (with two, a slow "
                              "pair cannot name its node)", f"lists {len(nodes)}")
        most = len(nodes) - 1 + len(nodes) % 2
        if rounds > most:
            raise ConfigError(file, f"{KEY}.pair_rounds", rounds, f"1 to {most} for {len(nodes)} nodes (rounds "
                              "after that repeat a pair)")
        return [NodeGroup(f"{a}..{b}", (a, b), "pair", r + 1)
                for r, pairs in enumerate(pair_rounds(nodes, rounds)) for a, b in pairs]
    if kind == "all":
        return [NodeGroup("all", tuple(nodes), "all")]
    if len(nodes) % kind:
        raise ConfigError(file, f"{KEY}.group", kind, f"a size that divides the {len(nodes)} nodes "
                          "(or list only the nodes to group)", f"leaves {len(nodes) % kind} node(s) over")
    return [NodeGroup(chunk[0] if kind == 1 else f"{chunk[0]}..{chunk[-1]}", tuple(chunk))
            for chunk in (nodes[i:i + kind] for i in range(0, len(nodes), kind))]


def expand_hostlist(expr: str, file: str, key: str, limit: int | None = None) -> list[str]:
    """`n[1-3,7],gpu[01-02]` -> n1 n2 n3 n7 gpu01 gpu02 (Slurm's hostlist form; zero padding kept).
    With `limit`, an expression naming more nodes is refused before it is expanded: the count is
    worked out from the ranges (`n[1-99999999]` would otherwise fill the memory)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(expr + ","):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth < 0 or depth > 1:
            raise ConfigError(file, key, expr, HOSTLIST_VALID, "has unbalanced brackets")
        if ch == "," and depth == 0:
            parts.append(expr[start:i].strip())
            start = i + 1
    if depth:
        raise ConfigError(file, key, expr, HOSTLIST_VALID, "has unbalanced brackets")
    if limit is not None:
        _within(sum(_count_one(part, expr, file, key) for part in parts), limit, expr, file, key)
    out = []
    for part in parts:
        out += _expand_one(part, expr, file, key)
    return out


def _within(count: int, limit: int, value, file: str, key: str) -> None:
    if count > limit:
        raise ConfigError(file, key, value, f"at most the site's max_nodes = {limit} nodes (the machine's; raise "
                          "max_nodes in its site.yaml if the machine has more)", f"names {count:,} nodes")


def _ranges(body: str, expr: str, file: str, key: str) -> list[tuple[str, str]]:
    """The (low, high) digit strings of a bracket's `1-3,7` (`7` is 7-7); refused unless N or N-M upwards."""
    out = []
    for item in body.split(","):
        rng = _RANGE.match(item.strip())
        if not rng:
            raise ConfigError(file, key, expr, HOSTLIST_VALID, f"has range {item!r}, not N or N-M")
        lo, hi = rng.group(1), rng.group(2) or rng.group(1)
        if int(hi) < int(lo):
            raise ConfigError(file, key, expr, HOSTLIST_VALID, f"has range {item!r} that counts down")
        out.append((lo, hi))
    return out


def _count_one(part: str, expr: str, file: str, key: str) -> int:
    """How many names _expand_one would give for `part`, without making them."""
    hit = _BRACKET.match(part)
    if not hit:
        return 1
    _, body, rest = hit.groups()
    values = sum(int(hi) - int(lo) + 1 for lo, hi in _ranges(body, expr, file, key))
    return values * (_count_one(rest, expr, file, key) if rest else 1)


def _expand_one(part: str, expr: str, file: str, key: str) -> list[str]:
    hit = _BRACKET.match(part)
    if not hit:
        if not NODE_NAME.fullmatch(part):
            raise ConfigError(file, key, expr, HOSTLIST_VALID, f"names node {part!r}, not a valid node name")
        return [part]
    prefix, body, rest = hit.groups()
    values = [f"{i:0{len(lo)}d}" for lo, hi in _ranges(body, expr, file, key) for i in range(int(lo), int(hi) + 1)]
    tails = _expand_one(rest, expr, file, key) if rest else [""]
    return [_expand_one(prefix + v + t, expr, file, key)[0] for v in values for t in tails]


def _node_list(value, file: str, key: str, limit: int) -> list[str]:
    """The nodes `value` (a list, or a hostlist expression) names: at most `limit` of them."""
    if isinstance(value, str):
        names = expand_hostlist(value, file, key, limit)
    else:
        _within(len(value), limit, f"a list of {len(value):,} nodes", file, key)
        names = list(value)
    for name in names:
        if not NODE_NAME.fullmatch(str(name)):
            raise ConfigError(file, key, name, "node names of letters, digits, '.', '_', '-'", "is not a node name")
    seen = set()
    for name in names:
        if name in seen:
            raise ConfigError(file, key, value, "each node once", f"names node {name!r} twice")
        seen.add(name)
    return names


def node_groups(config: dict, site: Site, config_file: str) -> list[NodeGroup]:
    """The groups the campaign's `every_node` key asks for; [] without the key."""
    spec = config.get(KEY)
    if not spec:
        return []
    group = spec.get("group", 1)
    racks = spec.get("racks") or {}
    if group == "rack":
        if not racks:
            raise ConfigError(config_file, f"{KEY}.racks", racks, "rack name: its nodes (list or hostlist)",
                              "is empty with group: rack")
        if spec.get("nodes"):
            raise ConfigError(config_file, f"{KEY}.nodes", spec["nodes"], "no nodes key with group: rack (the "
                              "racks list the nodes)", "is given twice")
        groups, listed = [], 0
        for rack, members in racks.items():
            if not NODE_NAME.fullmatch(rack):
                raise ConfigError(config_file, f"{KEY}.racks", rack, "a name of letters, digits, '.', '_', '-'")
            nodes = _node_list(members, config_file, f"{KEY}.racks.{rack}", site.max_nodes)
            listed += len(nodes)  # the racks together are (part of) the machine: bounded as one list
            _within(listed, site.max_nodes, f"racks up to {rack}", config_file, f"{KEY}.racks")
            groups.append(NodeGroup(rack, tuple(nodes)))
        _no_node_twice(groups, config_file)
    else:
        if racks:
            raise ConfigError(config_file, f"{KEY}.racks", sorted(racks), "racks only with group: rack",
                              f"is set with group: {group}")
        nodes = spec.get("nodes") or ([socket.gethostname()] if site.scheduler == "none" else [])
        if not nodes:
            raise ConfigError(config_file, f"{KEY}.nodes", "", HOSTLIST_VALID + " (e.g. from `sinfo -h -N -o %N`)",
                              f"is missing on site '{site.name}' (scheduler {site.scheduler})")
        nodes = _node_list(nodes, config_file, f"{KEY}.nodes", site.max_nodes)
        groups = []
        for kind in (group if isinstance(group, list) else [group]):
            if kind == "rack":
                raise ConfigError(config_file, f"{KEY}.group", group, "rack alone (not in a list)")
            groups += [g for g in _groups_of_kind(kind, nodes, spec, config_file) if g.name not in
                       {have.name for have in groups}]
    _check_site(groups, site, config_file)
    _check_verdict(spec.get("verdict") or {}, config, config_file)
    return groups


def _check_verdict(judging: dict, config: dict, config_file: str) -> None:
    """The names `every_node.verdict` judges by, refused unless the verdict would find them: a
    `best_of` or `metrics` benchmark the campaign does not run, or a metric its records do not carry,
    would silently judge something else (the headline, every sample) instead of failing."""
    from exabench.benchmarks import get
    tests = sorted({entry["name"] for entry in config.get("benchmarks") or []})
    named = [(f"{KEY}.verdict.best_of[{i}]", name) for i, name in enumerate(judging.get("best_of") or [])]
    named += [(f"{KEY}.verdict.metrics", name) for name in judging.get("metrics") or {}]
    for key, name in named:
        if name not in tests:
            raise ConfigError(config_file, key, name, _closest_first(name, tests, "the campaign's benchmarks"),
                              "is not a benchmark of this campaign")
    for bench, metrics in (judging.get("metrics") or {}).items():
        cls = get(bench, config_file, f"{KEY}.verdict.metrics")
        for j, metric in enumerate(metrics):
            if not cls.has_metric(metric):
                raise ConfigError(config_file, f"{KEY}.verdict.metrics.{bench}[{j}]", metric,
                                  _closest_first(metric, list(cls.known_metrics()), f"metrics of '{bench}'"),
                                  f"is not a metric of '{bench}'")


def _closest_first(name: str, valid: list[str], what: str) -> str:
    import difflib
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    return (f"did you mean '{close[0]}'? " if close else "") + f"{what}: {', '.join(valid)}"


def _no_node_twice(groups: list[NodeGroup], config_file: str) -> None:
    owner: dict[str, str] = {}
    for g in groups:
        for node in g.nodes:
            if node in owner:
                raise ConfigError(config_file, f"{KEY}.racks.{g.name}", node, "each node in one rack",
                                  f"is also in rack {owner[node]}")
            owner[node] = g.name


def _check_site(groups: list[NodeGroup], site: Site, config_file: str) -> None:
    if not schedulers.can_pin(site):  # how each scheduler pins a job, with its page: its module's FACTS.pin
        pinning = [n for n, m in schedulers.SCHEDULERS.items() if m.FACTS.pin]
        raise ConfigError(site.path or site.name, "scheduler", site.scheduler, f"{', '.join(pinning)} for "
                          "every_node groups (or the whole-allocation every_node_script)",
                          "cannot pin a job to named nodes")
    # no group is wider than max_nodes: _node_list bounds the whole list by it
    if site.scheduler == "none":
        here = socket.gethostname()
        for g in groups:
            if g.nodes != (here,):
                raise ConfigError(config_file, f"{KEY}.nodes", list(g.nodes), f"this host ({here}) alone on site "
                                  f"'{site.name}' (no scheduler)", "names nodes this site cannot reach")


def group_runs(runs: list[Run], group: NodeGroup) -> list[Run]:
    """The campaign's runs a group runs: those planned on as many nodes as the group has."""
    return [r for r in runs if r.layout.nodes == len(group.nodes)]


def check_groups(groups: list[NodeGroup], runs: list[Run], config_file: str) -> None:
    """Every group has runs to do (a plan-time error, not an empty job)."""
    sizes = sorted({r.layout.nodes for r in runs})
    for g in groups:
        if len(g.nodes) not in sizes:
            raise ConfigError(config_file, KEY, g.name, f"groups whose size the campaign plans runs for (nodes "
                              f"{', '.join(map(str, sizes))})", f"has {len(g.nodes)} node(s) and no run planned "
                              f"on {len(g.nodes)}")


def group_script(runs: list[Run], site: Site, root: Path, group: NodeGroup, campaign: str, job: str = "",
                 folders: dict[str, Path] | None = None, spec_args: dict[str, str] | None = None,
                 requests: dict | None = None) -> str:
    """One batch script, pinned to the group's nodes, running `runs` (the group's: group_runs, of
    one allocation mode: node_sweep.allocation_modes) in sequence. `folders` (real_folders of root),
    `spec_args` (each run's spec path, shell-quoted) and `requests` (the allocation of each set of
    runs on so many nodes) are made once by group_files for all groups: a machine's 9,408 groups
    would resolve, quote and work them out 9,408 times."""
    if not runs:
        raise ConfigError("config", KEY, group.name, f"a group with runs planned on {len(group.nodes)} node(s)",
                          "has no run")
    requests = {} if requests is None else requests
    key = (len(group.nodes), tuple(r.run_id for r in runs))
    if key not in requests:
        # The group's whole nodes in the runs' allocation mode: the node's own request, whatever each run uses.
        layouts = [node_layout(site, len(group.nodes), r.layout) for r in runs]
        header = layouts[0]
        if node_worlds.uses_node_worlds(site):  # mpirun, ibrun take their slots from the header's tasks
            header = node_worlds.job_layout(site, header, [r.layout for r in runs])
        requests[key] = (runs_walltime_min(site, runs, f"every_node group {group.name}"), header,
                         allocation.common_request(site, layouts, f"every_node group {group.name}"))
    minutes, layout, alloc = requests[key]
    folders = folders or real_folders(root)
    out_dir = folders[""] / "nodes" / "groups"
    request = batch_request(site, layout, f"exabench-node-{job or group.name}", minutes, out_dir, alloc)
    # Slot licenses cap the ranks running at once by the run with the most ranks.
    most_ranks = max(runs, key=lambda r: r.layout.ranks)
    request["extra"] = request["extra"] + slot_licenses(site, most_ranks)
    request = schedulers.pinned(request, site, group.nodes)  # Slurm --nodelist, LSF's CSM expert mode
    # The bundle's header comment: a template of its own would be an edit that re-renders every run.
    return batch_script(site, request, f"{campaign} (every-node group {group.name})", len(runs), out_dir,
                        _group_body(site, runs, group, folders, spec_args or _spec_args(runs, folders)))


def slot_licenses(site: Site, run: Run) -> list[str]:
    """Slurm licenses the group's job asks for: one per rank, up to the count of the site's
    `scheduler_options.slot_license` (name:count), which caps the ranks running at once (the
    simulated nodes of one machine share its few cores); none without it."""
    spec = site.scheduler_options.get("slot_license", "")
    if not spec or site.scheduler != "slurm":
        return []
    name, count = spec.split(":")
    return [f"--licenses={name}:{min(run.layout.ranks, int(count))}"]


def _spec_args(runs: list[Run], folders: dict[str, Path]) -> dict[str, str]:
    return {r.run_id: shlex.quote(str(RunPaths(folders[""], r.run_id).spec)) for r in runs}


def _group_body(site: Site, runs: list[Run], group: NodeGroup, folders: dict[str, Path],
                spec_args: dict[str, str]) -> str:
    q, py = shlex.quote, shlex.quote(site.python_executable)
    pin = f"--node {q(group.name)} --group-nodes {q(','.join(group.nodes))}"
    lines = [f"# Every run planned on {len(group.nodes)} node(s), on node(s) {' '.join(group.nodes)}, in sequence.",
             "# A run whose record exists is skipped: resubmitting this script runs only what is missing.",
             "failed=0 skipped=0",
             "run_on_group() {  # run spec, node record",
             '  if [[ -e "$2" ]]; then echo "exabench: $(basename "$2" .json): recorded before, skipped"; '
             "skipped=$((skipped + 1)); return 0; fi",
             f'  local node_spec; node_spec=$({py} -m exabench node-run --spec "$1" {pin}) && '
             f'{py} -m exabench execute --spec "$node_spec" || failed=$((failed + 1))',
             "}"]
    records = str(folders["records"] / "nodes")
    for r in runs:
        lines.append(f"run_on_group {spec_args[r.run_id]} {q(f'{records}/{r.run_id}.node-{group.name}.json')}")
    lines.append(f'echo "exabench every-node group {group.name}: {len(runs)} run(s), $failed failed to execute, '
                 '$skipped recorded before"')
    return "\n".join(lines)


def group_files(runs: list[Run], site: Site, root: Path, groups: list[NodeGroup], campaign: str,
                submit: str = "submit.sh", side_by_side: bool = False) -> list[tuple[Path, str, int]]:
    """(path, text, mode): results/<site>/nodes/groups/<group>.sh per group, and `submit` (a
    confirmation round's has its own name), which submits them all (one job per group; all at once
    with `side_by_side`, where the scheduler would run them one after another; a pair's there waits for
    the jobs before it and runs alone, as node_jobs.confirmation_round does)."""
    if not groups:
        raise ConfigError("config", KEY, None, "every_node: {nodes: ..., group: 1|2|...|rack} in the campaign's "
                          "config", "is not set")
    out = Path(root) / "nodes" / "groups"
    folders = real_folders(root)
    spec_args = _spec_args(runs, folders)
    files, requests, queued, alone = [], {}, [], set()
    for g, modes in group_jobs(runs, site, groups):
        if side_by_side and len(g.nodes) > 1:
            alone.update(path.name for path in node_sweep_paths(out / f"{g.name}.sh", len(modes)))
        for path, job in zip(node_sweep_paths(out / f"{g.name}.sh", len(modes)), modes):
            files.append((path, group_script(job, site, root, g, campaign, path.stem, folders, spec_args, requests),
                          0o755))
            minutes = requests[(len(g.nodes), tuple(r.run_id for r in job))][0]
            queued.append((path, check_walltime(site, minutes, len(g.nodes))))
    real_out = out.resolve()  # once: the scripts are written into it, none is a link of its own
    files.append((out / submit, submit_script(site, campaign, queued, real_out, side_by_side, alone), 0o755))
    return files


def submit_script(site: Site, campaign: str, jobs: list[tuple[Path, str]], out: Path, side_by_side: bool = False,
                  alone: set = frozenset()) -> str:
    """submit.sh: every group job (path, its queue), each sent only while the user's jobs in its queue
    are fewer than the queue's declared per-user limit (queues[].max_queued_per_user: Stampede2's
    development queue takes one), waiting for room otherwise; a refused submission is tried again while
    the user still has jobs in that queue (room may come). No `set -e`: a job that cannot be sent at
    all is reported at the end, after every other one was sent, never leaving half the groups unsent.
    With `side_by_side`, a job in `alone` (a confirmation round's pair) runs after every job sent before it
    has ended (_send)."""
    limits = {q.name: q.max_queued_per_user for q in site.queues}
    sched = schedulers.of(site)  # its submit command and its count of the user's jobs in one queue
    foreground = side_by_side and sched.FACTS.runs_in_foreground
    held = side_by_side and bool(alone) and bool(sched.FACTS.after) and not foreground
    option = getattr(sched, "queue_option", lambda site: "")(site)
    count = sched.FACTS.queued_by_user.format(queue_option=option) or "true"  # "": none counted, none waited for
    lines = ["#!/usr/bin/env bash",
             f"# exabench: submit the {len(jobs)} every-node group job(s) of campaign {campaign}, one per group (per "
             "allocation mode and walltime); runs recorded before are skipped inside each.",
             "# Each queue's per-user limit is kept: a job waits here until you have fewer jobs in its queue than "
             "it takes.",
             "set -uo pipefail",
             'wait_s=${EXABENCH_SUBMIT_WAIT_S:-60}; me=${USER:-$(id -un)}; sent=0; unsent=()',
             # a typo would make `sleep` fail at once: the wait loops would ask the scheduler without pause
             '[[ $wait_s =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "exabench: EXABENCH_SUBMIT_WAIT_S=$wait_s: not valid; '
             'valid: seconds >= 0 between looks at the queue, e.g. 60 (unset: 60)" >&2; exit 2; }',
             f"mine() {{ {count} | wc -l; }}  # your jobs in queue $1",
             *_send(sched.FACTS, foreground, held),
             "submit() {  # queue, its per-user limit (0: none declared), script[, alone]",
             '  while [[ -n $1 && $2 -gt 0 && $(mine "$1") -ge $2 ]]; do sleep "$wait_s"; done',
             '  until send "$3" "${4:-}"; do',
             '    if [[ -z $1 || $(mine "$1") -eq 0 ]]; then unsent+=("$3"); return 0; fi',
             '    echo "exabench: $(basename "$3") refused while you have jobs in queue $1; trying again in ${wait_s} s"',
             '    sleep "$wait_s"',
             "  done",
             "  sent=$((sent + 1))",
             "}"]
    lines += [f"submit {shlex.quote(queue or '')} {limits.get(queue, 0)} {shlex.quote(str(out / path.name))}"
              + (" alone" if (foreground or held) and path.name in alone else "") for path, queue in jobs]
    if foreground:
        lines.append("wait  # the jobs started side by side")
    lines += ['if (( ${#unsent[@]} )); then echo "exabench: $sent job(s) sent; not sent: ${unsent[*]}" >&2; exit 1; fi',
              f'echo "exabench: all {len(jobs)} every-node group job(s) sent"']
    return "\n".join(lines) + "\n"


def _send(facts, foreground: bool, held: bool) -> list[str]:
    """submit.sh's send(): script[, alone]. Where the jobs run here (foreground), each in the background,
    waited for at the end, and a pair after the jobs before it, alone: pairs beside pairs share the cores.
    Where `held`, a pair is submitted held by the scheduler (facts.after) until every job this script sent
    and the listing still shows unfinished has ended: a pair beside another pair shares the fabric, and a
    suspect's pair is judged against the control pair's figure."""
    if foreground:
        return [f"send() {{ if [[ -n ${{2:-}} ]]; then wait; {facts.submit} \"$1\"; "
                f"else {facts.submit} \"$1\" & fi; }}"]
    if not held:
        return [f"send() {{ {facts.submit} \"$1\"; }}"]
    option, item, joiner = facts.after
    held_submit = " ".join(w for w in (facts.submit_tool, option, facts.submit[len(facts.submit_tool):].strip()) if w)
    return ["sent_ids=()  # the jobs this script sent, by the id their submission printed",
            f"unfinished() {{ {facts.unfinished_by_user}; }}  # your unfinished jobs' ids, every queue",
            "held_by() {  # the ids sent here that are unfinished (all of them where the listing fails)",
            "  (( ${#sent_ids[@]} )) || return 0",
            '  local listed id; listed=$(unfinished 2>/dev/null) || { printf "%s\\n" "${sent_ids[@]}"; return 0; }',
            '  for id in "${sent_ids[@]}"; do if grep -qxF "$id" <<<"$listed"; then echo "$id"; fi; done',
            "}",
            "send() {  # script[, alone]: a pair is held until every job sent before it has ended",
            '  local out id cond="" waits=()',
            '  if [[ -n ${2:-} ]]; then mapfile -t waits < <(held_by); fi',
            f"  if (( ${{#waits[@]}} )); then cond=$(printf '{joiner}{item}' \"${{waits[@]}}\"); "
            f"cond=${{cond#\"{joiner}\"}}; fi",
            f'  if [[ -n $cond ]]; then out=$({held_submit} "$1"); else out=$({facts.submit} "$1"); fi '
            '|| { echo "$out"; return 1; }',
            '  echo "$out"; id=$(grep -oE "[0-9]+" <<<"$out" | head -n 1); if [[ -n $id ]]; then sent_ids+=("$id"); fi',
            "}"]


def group_jobs(runs: list[Run], site: Site, groups: list[NodeGroup]) -> list[tuple[NodeGroup, list[list[Run]]]]:
    """Each group with its jobs: its runs (group_runs) split by allocation mode (Summit's smt1 and
    smt4 runs cannot share an allocation), then by walltime (their time limits summed, packed as a
    bundle's: Summit's default campaign needs 725 min on one node, its queues give 120), [[]] for a
    group without runs (group_script refuses it).
    A group's runs, so its jobs, depend on its size alone: worked out once per size."""
    by_size: dict[int, list[list[Run]]] = {}
    for g in groups:
        size = len(g.nodes)
        if size not in by_size:
            # each mode's runs packed into jobs the longest walltime a queue gives `size` nodes admits
            longest = longest_walltime(site, size)
            room = longest - WALLTIME_MARGIN_MIN if longest else 0
            by_size[size] = [job for mode in allocation_modes(group_runs(runs, g), site)
                             for job in pack_runs(mode, room)] or [[]]
    return [(g, by_size[len(g.nodes)]) for g in groups]


def group_outputs(runs: list[Run], site: Site, root: Path, groups: list[NodeGroup]) -> list[Path]:
    """The every_node_groups rule's scripts: <group>.sh, or <group>-NN-of-MM.sh per job (allocation mode
    and walltime)."""
    out = Path(root) / "nodes" / "groups"
    return [p for g, modes in group_jobs(runs, site, groups) for p in node_sweep_paths(out / f"{g.name}.sh", len(modes))]
