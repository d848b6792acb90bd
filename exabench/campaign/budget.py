"""The node-hour budget: a campaign that would ask a machine's scheduler for more node-hours than its
budget is refused before anything is rendered for submission, naming its total, its largest jobs and
how to raise the budget on purpose. A site's default campaign sized for the whole machine asks tens
of thousands of node-hours (Summit's acceptance suite: about 87,000); the plan printed the figure,
and nothing asked before the scripts were written.

The figure judged is the one `exabench plan` prints: on a bundle site the bundles' (the allocations
the scripts ask for), elsewhere each run's own job (its nodes for the walltime its header asks)."""

from __future__ import annotations

from exabench.campaign.plan import Run, node_hours
from exabench.campaign.site import Site
from exabench.errors import ConfigError

LARGEST_SHOWN = 3


def budget_of(config: dict, site: Site) -> float:
    """The campaign's budget in node-hours: the config's, else the site's; 0 where none applies (no
    scheduler: nothing is charged)."""
    if site.scheduler == "none":
        return 0
    own = config.get("node_hours_budget")
    return site.node_hours_budget if own is None else own


def requested_jobs(runs: list[Run], bundles: list, site: Site) -> list[tuple[str, int, float]]:
    """(job, nodes, node-hours) of every allocation the campaign asks for, largest first."""
    if site.submit == "bundles":
        jobs = [(f"bundle {b.name}", b.nodes, b.node_hours) for b in bundles]
    else:
        jobs = [(f"run {r.run_id}", r.layout.nodes, node_hours(r, site)) for r in runs]
    return sorted(jobs, key=lambda j: -j[2])


def check_budget(config: dict, site: Site, runs: list[Run], bundles: list, config_file: str) -> None:
    """Refuse a campaign over its node-hour budget (ConfigError naming the total, the largest jobs,
    and how to raise it)."""
    budget = budget_of(config, site)
    if not budget:
        return
    jobs = requested_jobs(runs, bundles, site)
    total = sum(hours for _, _, hours in jobs)
    if total <= budget:
        return
    largest = "; ".join(f"{name}: {nodes:,} nodes, {hours:,.1f} node-hours" for name, nodes, hours in jobs[:LARGEST_SHOWN])
    where = "--config" if config.get("node_hours_budget") is not None else site.path or site.name
    raise ConfigError(
        where, "node_hours_budget", budget,
        f"a campaign of at most {budget:,.0f} node-hours; to spend more on purpose, raise it for this campaign "
        f"with --config node_hours_budget={_round_up(total)} (or node_hours_budget: in {config_file}), or plan "
        "fewer or smaller runs (scale: rack, a narrower nodes sweep)",
        f"is below the {total:,.1f} node-hours that campaign {config.get('campaign', '-')} ({config_file}) asks "
        f"of site {site.name} in {len(jobs):,} jobs (largest: {largest})")


def _round_up(hours: float) -> int:
    """A budget just above `hours`, in round figures (87,591.3 -> 88000)."""
    step = 10 ** max(0, len(str(int(hours))) - 2)
    return int(-(-hours // step) * step) or 1
