"""No scheduler: the job script runs on this machine (`bash script`), its one node the host
itself, which is also the only node a node group may name."""

from __future__ import annotations

from exabench.campaign.schedulers.facts import SchedulerFacts

FACTS = SchedulerFacts(name="none", submit="bash", directive="", queue="none", node_list="hostname",
                       queued_by_user="true", pin="this host only (the script runs where it is started)",
                       runs_in_foreground=True)


def pinned(request: dict, site, nodes: tuple[str, ...]) -> dict:
    return request  # node_groups refuses any node but this host
