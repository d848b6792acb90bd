"""Bundle mode's plan: a campaign's runs grouped into allocations (one batch script each) that fit
the site's queues, without idle nodes.

A bundle runs its runs one after another on the nodes of its widest run, for the sum of their time
limits plus one margin, at least its queue's shortest walltime (allocation.asked_minutes: what its
header asks). Its batch header is one allocation request
(exabench.campaign.allocation), so a bundle holds only runs whose requests are equal: an SMT4 run
never runs inside an smt1 allocation, an MPS run never without gpumps.

- A campaign whose runs share one request, that one queue admits whole, and whose narrower runs
  leave at most IDLE_SHARE of its node-hours idle, stays one bundle, named after the campaign.
- Otherwise runs are grouped by request, then by node count, so that a 1-node run never holds a
  64-node allocation; each group is packed first fit, longest time limit first, up to the longest
  walltime any of the site's queues admits for that node count (limits.max_walltime_min caps it);
  with the equal time limits of one campaign that is the fewest bundles the group can have, and
  each bundle's node-hours are its runs' work plus one margin.
- Each bundle goes to the queue the site's rules pick for its nodes and walltime (pick_queue, the
  rule single runs follow); a run no queue admits stops the plan, naming the closest queue.

Bundles are ordered by node count, then by request (first seen first) and the order packing opened
them, and named
<campaign>-01-of-NN, so the same campaign and site always give the same names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exabench.campaign import allocation
from exabench.campaign.plan import Run, check_queue
from exabench.campaign.site import WALLTIME_MARGIN_MIN, Site, candidate_queues, check_walltime, queue_entry
from exabench.errors import LayoutError


@dataclass(frozen=True)
class Bundle:
    """One allocation: `nodes` nodes for `minutes`, in `queue`, running `runs` in turn."""

    name: str
    runs: tuple[Run, ...]
    nodes: int
    minutes: int
    queue: str
    charged_nodes: int = 0  # nodes the queue allocates and charges (Theta: at least 128); 0: nodes

    @property
    def node_hours(self) -> float:
        """What the allocation asks for: all its (charged) nodes for its whole walltime."""
        return (self.charged_nodes or self.nodes) * self.minutes / 60

    @property
    def idle_node_hours(self) -> float:
        """The part of node_hours that nodes spend idle because a narrower run holds the allocation
        (or the queue charges more nodes than it asks for): for each run, the charged nodes it
        leaves unused, for its own time limit."""
        held = self.charged_nodes or self.nodes
        return sum((held - r.layout.nodes) * _run_minutes(r) for r in self.runs) / 60

    @property
    def working_node_hours(self) -> float:
        """The node-hours its runs use: each run's nodes for its own time limit."""
        return sum(r.layout.nodes * _run_minutes(r) for r in self.runs) / 60

    @property
    def margin_node_hours(self) -> float:
        """The allocation's nodes for the one margin each job asks for (start-up, records), and for
        the rest of its queue's shortest walltime where its runs need less."""
        return self.node_hours - self.working_node_hours - self.idle_node_hours


def _run_minutes(run: Run) -> int:
    return math.ceil(run.timeout_s / 60)


# The most of a single-bundle campaign's node-hours that narrower runs may leave idle; past it the
# campaign is split by node count (the 1-to-4,096-node ladder that asked 26,965 node-hours for 4,778).
IDLE_SHARE = 0.10


def one_bundle(runs: list[Run], site: Site, name: str) -> Bundle | None:
    """`runs` as one bundle, or None where no queue of the site admits it."""
    nodes = max(r.layout.nodes for r in runs)
    try:
        minutes = allocation.asked_minutes(site, nodes, [r.timeout_s for r in runs])  # what its header asks
        queue = check_walltime(site, minutes, nodes)
    except LayoutError:
        return None
    entry = queue_entry(site, nodes, minutes)
    return Bundle(name, tuple(runs), nodes, minutes, queue, entry.charged_nodes(nodes) if entry else 0)


def longest_walltime(site: Site, nodes: int) -> int:
    """The longest walltime (minutes) a job of `nodes` nodes may ask for on the site: the most any
    queue that admits the node count allows (only the queue `partition` names, if set; queues that
    would charge more nodes only where no other admits them), capped by
    limits.max_walltime_min; 0 where nothing limits it."""
    admitting = [q for q in candidate_queues(site) if q.admits(nodes, 1, site.max_nodes)]
    # A queue that charges more nodes than asked (Theta's default below 128) only where no other admits them.
    exact = [q for q in admitting if q.charged_nodes(nodes) == nodes]
    limits = [q.max_walltime_min for q in (exact or admitting)]
    longest = max(limits, default=0)
    if site.max_walltime_min:
        longest = min(longest, site.max_walltime_min) if longest else site.max_walltime_min
    return longest


def pack_runs(runs: list[Run], room: int) -> list[list[Run]]:
    """First fit, longest first: lists of runs whose time limits add up to at most `room` minutes
    (0: no limit), each list in config order."""
    if not room:
        return [runs]
    order = sorted(range(len(runs)), key=lambda i: -_run_minutes(runs[i]))
    shortest = _run_minutes(runs[order[-1]])
    bins: list[list] = []  # [minutes used, indices], in the order opened
    open_bins: list[list] = []  # those with room left for the shortest run (a full one is never tried again)
    for i in order:
        need = _run_minutes(runs[i])
        target = next((b for b in open_bins if b[0] + need <= room), None)
        if target is None:
            target = [0, []]
            bins.append(target)
            open_bins.append(target)
        target[0] += need
        target[1].append(i)
        if target[0] + shortest > room:
            open_bins.remove(target)
    return [[runs[i] for i in sorted(b[1])] for b in bins]


def plan_bundles(runs: list[Run], site: Site, campaign: str, config_file: str) -> list[Bundle]:
    """The bundles of a campaign on a site (module docstring); a run no queue admits even alone
    stops here with plan.check_queue's error, naming the config file, the run, the closest queue
    and every queue."""
    if not runs:
        return []
    requests: dict = {}
    for r in runs:
        requests.setdefault(allocation.request(site, r.layout), []).append(r)
    if len(requests) == 1:
        whole = one_bundle(runs, site, campaign)
        if whole is not None and whole.idle_node_hours <= IDLE_SHARE * whole.node_hours:
            return [whole]
    packs = []
    for same in requests.values():
        groups: dict[int, list[Run]] = {}
        for r in same:
            check_queue(r.run_id, r.layout, r.timeout_s, site, config_file)
            groups.setdefault(r.layout.nodes, []).append(r)
        for nodes, group in groups.items():
            longest = longest_walltime(site, nodes)
            packs += pack_runs(group, longest - WALLTIME_MARGIN_MIN if longest else 0)
    packs.sort(key=lambda p: p[0].layout.nodes)  # stable: each group's packs in the order opened
    width = max(2, len(str(len(packs))))
    bundles = []
    for i, pack in enumerate(packs, 1):
        name = f"{campaign}-{i:0{width}d}-of-{len(packs):0{width}d}"
        bundle = one_bundle(pack, site, name)
        if bundle is None:  # cannot happen: each pack is sized to a queue that admits it
            raise AssertionError(f"bundle {name} fits no queue of site {site.name}")
        bundles.append(bundle)
    return bundles


def mixed_requests(bundle: Bundle, site: Site) -> list[str]:
    """The allocation-wide settings in which a bundle's runs differ ([] for a planned bundle)."""
    first = allocation.request(site, bundle.runs[0].layout)
    return sorted({d for r in bundle.runs[1:] for d in first.differences(allocation.request(site, r.layout))})


def over_user_limits(bundles: list[Bundle], site: Site) -> dict[str, tuple[int, int]]:
    """{queue: (bundles sent there, the jobs one user may have there at once)} for each queue whose
    declared per-user limit (queues[].max_queued_per_user) the bundles exceed: the scheduler refuses
    the rest until earlier ones end."""
    limits: dict[str, int] = {}
    for q in candidate_queues(site):
        if q.max_queued_per_user:
            name = q.submit_as or q.name
            limits[name] = min(limits.get(name, q.max_queued_per_user), q.max_queued_per_user)
    return {q: (n, limits[q]) for q, n in bundles_per_queue(bundles).items() if q in limits and n > limits[q]}


def running_limits(bundles: list[Bundle], site: Site) -> dict[str, tuple[int, int]]:
    """{queue entry: (bundles sent to it, jobs of one user it runs at once)} where the bundles are
    more than its declared max_running_per_user (Theta's debug queues: one at a time)."""
    counts: dict[str, int] = {}
    for b in bundles:
        q = next((q for q in candidate_queues(site) if q.admits(b.nodes, b.minutes, site.max_nodes)), None)
        if q is not None and q.max_running_per_user:
            counts[q.name] = counts.get(q.name, 0) + 1
    limits = {q.name: q.max_running_per_user for q in site.queues}
    return {name: (n, limits[name]) for name, n in counts.items() if n > limits[name]}


def bundles_per_queue(bundles: list[Bundle]) -> dict[str, int]:
    """How many bundles each queue gets, in the order the bundles first use it."""
    counts: dict[str, int] = {}
    for b in bundles:
        counts[b.queue] = counts.get(b.queue, 0) + 1
    return counts


def bundle_overview(bundles: list[Bundle], site: Site) -> list[dict]:
    """The bundles as a readable table (`exabench plan`)."""
    return [
        {
            "bundle": b.name,
            "nodes": b.nodes,
            "walltime_min": b.minutes,
            "queue": b.queue or "-",
            "runs": len(b.runs),
            "request": allocation.request(site, b.runs[0].layout).describe(),
            "node-hours": round(b.node_hours, 2),
            "working": round(b.working_node_hours, 2),
            "idle": round(b.idle_node_hours, 2),
        }
        for b in bundles
    ]


def totals_line(bundles: list[Bundle], site: Site, campaign: str) -> str:
    """The plan's closing figures: node-hours requested, worked, idle (and why) and margin."""
    hours, work = sum(b.node_hours for b in bundles), sum(b.working_node_hours for b in bundles)
    idle, margin = sum(b.idle_node_hours for b in bundles), sum(b.margin_node_hours for b in bundles)
    share = idle / hours if hours else 0.0
    split = "" if len(bundles) == 1 else (
        f" (campaign {campaign} split: runs grouped by allocation request and node count, each group packed up to "
        "the longest walltime a queue admits for it)")
    return (f"{len(bundles)} bundle{'s' if len(bundles) != 1 else ''} of {sum(len(b.runs) for b in bundles)} runs "
            f"on site {site.name}: {hours:,.1f} node-hours requested, {work:,.1f} working, {idle:,.1f} idle "
            f"({share:.1%}) on nodes a narrower run leaves unused, {margin:,.1f} the margin each job asks for (up to "
            "its queue's shortest walltime)"
            f"{split}")


def pending_bundles(bundles: list[Bundle], records_dir) -> list[tuple[Bundle, int]]:
    """(bundle, runs without a record yet) for each bundle that still has such runs."""
    from pathlib import Path
    out = []
    for b in bundles:
        missing = sum(not (Path(records_dir) / f"{r.run_id}.json").exists() for r in b.runs)
        if missing:
            out.append((b, missing))
    return out


def pending_report(bundles: list[Bundle], site: Site, results, profile_hint: str) -> str:
    """What a bundle site's plain run says instead of running anything: each pending bundle, its
    queue, and the command that submits it (or that the scripts are still to be rendered)."""
    from pathlib import Path
    pending = pending_bundles(bundles, Path(results) / "records")
    if not pending:
        return ""
    lines = [f"site {site.name} submits bundles (site file: submit: bundles): nothing runs on this machine. "
             f"{len(pending)} of {len(bundles)} bundle(s) have runs without a record:"]
    unrendered = False
    for b, missing in pending:
        script = Path(results) / "bundles" / f"{b.name}.sh"
        unrendered |= not script.exists()
        lines.append(f"  {b.name}: {missing} of {len(b.runs)} run(s) pending, {b.nodes} node(s) x {b.minutes} min "
                     f"in {b.queue or '-'}: {allocation.submit_line(site, script)}"
                     + ("" if script.exists() else "   (not rendered yet)"))
    if unrendered:
        lines.append(f"render the scripts first: snakemake {profile_hint} bundle")
    lines.append(f"after the jobs, run snakemake {profile_hint} again: the records are aggregated here")
    return "\n".join(lines)
