"""Plan expansion: cartesian sweeps, layout defaults, stable readable ids."""

from __future__ import annotations

import pytest

from exabench.config import validate
from exabench.errors import ConfigError
from exabench.campaign.plan import expand, plan_table
from exabench.campaign.site import resolve_layout


def plan(site, benchmarks, **top):
    return expand(validate({"benchmarks": benchmarks, **top}, "config", "c.yaml"), site, "c.yaml")


def test_sweep_is_a_cartesian_product_with_readable_ids(two_core_site):
    runs = plan(two_core_site, [{"name": "kmeans", "sweep": {"ranks_per_node": [1, 2], "k": [2, 3, 4]}}])
    assert [r.run_id for r in runs] == [
        "kmeans.tiny.float64.k-2.n1r1t2", "kmeans.tiny.float64.k-3.n1r1t2", "kmeans.tiny.float64.k-4.n1r1t2",
        "kmeans.tiny.float64.k-2.n1r2t1", "kmeans.tiny.float64.k-3.n1r2t1", "kmeans.tiny.float64.k-4.n1r2t1"]
    assert runs[4].params["k"] == 3 and runs[4].params["size_per_node"] == "20000rows"  # tiny preset applied
    assert runs[4].swept == {"k": 3}
    assert runs[0].layout.threads_per_rank == 2  # one rank gets both cores


def test_ids_are_stable_and_unique(two_core_site):
    bench = [{"name": "resnet50", "sweep": {"precision": ["fp32", "bf16"]}}, {"name": "kmeans"}]
    a = [r.run_id for r in plan(two_core_site, bench, repeats=2)]
    b = [r.run_id for r in plan(two_core_site, bench, repeats=2)]
    assert a == b and len(set(a)) == len(a) == 6
    assert "resnet50.tiny.bf16.n1r1t2.rep2" in a
    # The repeats of one run are one series in the results store: a regression test's runs.
    from exabench.records.store import series_of
    assert {series_of(i) for i in a} == {"resnet50.tiny.fp32.n1r1t2", "resnet50.tiny.bf16.n1r1t2",
                                          "kmeans.tiny.float64.n1r1t2"}


def test_preset_and_fixed_params(two_core_site):
    (run,) = plan(two_core_site, [{"name": "resnet50", "preset": "full", "params": {"batch_size": 8}}])
    assert run.preset == "full" and run.params["image_size"] == 224 and run.params["batch_size"] == 8
    assert run.run_id == "resnet50.full.fp32.n1r1t2"


def test_preset_sizes_give_every_key_the_preset_sets_its_value_and_keep_the_campaigns_in_resized(two_core_site):
    # A rehearsal of a site's campaign (64GB a node, batch 256) on a laptop: the same run ids and
    # layouts, each run at preset tiny's sizes, the campaign's own values kept beside them.
    bench = [{"name": "kmeans", "sweep": {"size_per_node": ["8GB", "64GB"]}},
             {"name": "resnet50", "params": {"batch_size": 256, "channels_last": True}}]
    own, fitted = plan(two_core_site, bench), plan(two_core_site, bench, preset_sizes=True)
    assert [(r.run_id, r.layout) for r in fitted] == [(r.run_id, r.layout) for r in own]
    assert [r.params["size_per_node"] for r in own[:2]] == ["8GB", "64GB"]
    assert [(r.params["size_per_node"], r.resized) for r in fitted[:2]] == [
        ("20000rows", {"size_per_node": "8GB"}), ("20000rows", {"size_per_node": "64GB"})]
    assert fitted[2].params["batch_size"] == 4 and fitted[2].params["channels_last"] is True  # not a preset key
    assert fitted[2].resized == {"batch_size": 256} and all(r.resized == {} for r in own)
    assert "resized" not in own[0].to_dict() and fitted[0].to_dict()["resized"] == {"size_per_node": "8GB"}


def test_duplicate_runs_need_a_label(two_core_site):
    with pytest.raises(ConfigError, match="plans run 'kmeans.tiny.float64.n1r1t2' twice.*label"):
        plan(two_core_site, [{"name": "kmeans"}, {"name": "kmeans"}])
    runs = plan(two_core_site, [{"name": "kmeans"}, {"name": "kmeans", "label": "big", "params": {"cols": 500}}])
    assert runs[1].run_id == "kmeans.big.tiny.float64.n1r1t2"


def test_layout_keys_belong_in_the_sweep(two_core_site):
    with pytest.raises(ConfigError, match=r"params\.nodes.*is a layout key"):
        plan(two_core_site, [{"name": "kmeans", "params": {"nodes": 2}}])


def test_nodes_beyond_the_machine(two_core_site):
    with pytest.raises(ConfigError, match="max_nodes = 1"):
        plan(two_core_site, [{"name": "kmeans", "sweep": {"nodes": [2]}}])


def test_layout_defaults_share_cores_evenly(two_core_site):
    assert resolve_layout(two_core_site, ranks_per_node=2).threads_per_rank == 1
    assert resolve_layout(two_core_site).ranks_per_node == 1


def test_plan_table_rows(two_core_site):
    rows = plan_table(plan(two_core_site, [{"name": "kmeans", "sweep": {"k": [2, 3]}}]))
    assert [r["param.k"] for r in rows] == [2, 3] and rows[0]["ranks"] == 1


def test_a_campaign_above_max_runs_is_refused_before_it_is_expanded(two_core_site):
    """A 10-million-run sweep is sized, not expanded: the message names the entry and the product,
    at once and without building a run."""
    huge = {"name": "gemm", "sweep": {"m": list(range(1, 101)), "n": list(range(1, 101)),
                                      "k": list(range(1, 1001))}}
    with pytest.raises(ConfigError) as err:
        plan(two_core_site, [{"name": "kmeans"}, huge])
    message = str(err.value)
    assert "benchmarks[1].sweep" in message and "100 x 100 x 1000 = 10,000,000 runs" in message
    assert "max_runs = 200,000" in message
    # repeats count too, and a campaign under a lowered limit is refused the same way
    with pytest.raises(ConfigError, match=r"3 x 2 repeats = 6 runs"):
        plan(two_core_site, [{"name": "kmeans", "sweep": {"k": [2, 3, 4]}}], repeats=2, max_runs=5)
    assert len(plan(two_core_site, [{"name": "kmeans", "sweep": {"k": [2, 3, 4]}}], repeats=2, max_runs=6)) == 6
