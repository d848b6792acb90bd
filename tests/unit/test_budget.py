"""The node-hour budget (exabench.campaign.budget): a campaign over it is refused before anything is
rendered, naming its total, its largest jobs and the override; 0 and scheduler-less sites have none."""

from __future__ import annotations

import dataclasses

import pytest

from exabench.campaign.budget import _round_up, budget_of, check_budget, requested_jobs
from exabench.campaign.bundles import plan_bundles
from exabench.campaign.plan import expand, node_hours
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.errors import ConfigError
from helpers_sites import REPO

CAMPAIGN = {"campaign": "b", "timeout_s": 3300,
            "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [1, 8, 64]}}]}


def _plan(site_name: str, **config):
    site = load_site(REPO / "profiles" / site_name / "site.yaml")
    cfg = validate({**CAMPAIGN, **config}, "config", "c.yaml")
    runs = expand(cfg, site, "c.yaml")
    return cfg, site, runs, plan_bundles(runs, site, cfg["campaign"], "c.yaml")


def test_a_campaign_over_the_sites_budget_is_refused_naming_total_largest_jobs_and_override():
    cfg, site, runs, bundles = _plan("frontier")  # 73 nodes for an hour each: 73 node-hours
    assert budget_of(cfg, site) == 1000 and site.node_hours_budget == 1000
    check_budget(cfg, site, runs, bundles, "c.yaml")  # within the default
    total = sum(node_hours(r, site) for r in runs)
    assert total == pytest.approx(73.0)
    small = dataclasses.replace(site, node_hours_budget=50)
    with pytest.raises(ConfigError) as caught:
        check_budget(cfg, small, runs, bundles, "c.yaml")
    msg = str(caught.value)
    assert msg.startswith(f"{site.path}: key 'node_hours_budget' = 50 is below the 73.0 node-hours")
    assert "in 3 jobs (largest: run kmeans" in msg and ".n64" in msg.split("largest: ")[1].split(";")[0]
    assert "--config node_hours_budget=73" in msg and "node_hours_budget: in c.yaml" in msg


def test_the_campaigns_own_budget_wins_and_zero_means_none():
    cfg, site, runs, bundles = _plan("frontier", node_hours_budget=10)
    with pytest.raises(ConfigError, match=r"^--config: key 'node_hours_budget' = 10 is below the 73.0"):
        check_budget(cfg, site, runs, bundles, "c.yaml")
    cfg, site, runs, bundles = _plan("frontier", node_hours_budget=0)
    check_budget(cfg, dataclasses.replace(site, node_hours_budget=1), runs, bundles, "c.yaml")


def test_a_bundle_site_is_judged_on_its_bundles_and_a_site_without_scheduler_has_no_budget():
    cfg, site, runs, bundles = _plan("summit")
    jobs = requested_jobs(runs, bundles, site)
    assert [j[0] for j in jobs] == sorted((f"bundle {b.name}" for b in bundles), key=lambda n: -dict(
        (f"bundle {b.name}", b.node_hours) for b in bundles)[n])
    assert sum(h for *_, h in jobs) == pytest.approx(sum(b.node_hours for b in bundles))
    local = load_site(REPO / "profiles" / "local" / "site.yaml")
    assert budget_of({"node_hours_budget": 1}, local) == 0


@pytest.mark.parametrize("hours,up", [(87_591.2, 88_000), (73.0, 73), (999.5, 1000), (0.2, 1), (123_456, 130_000)])
def test_the_suggested_budget_is_a_round_figure_just_above(hours, up):
    assert _round_up(hours) == up and _round_up(hours) >= hours
