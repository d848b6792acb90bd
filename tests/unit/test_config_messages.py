"""Messages that must not mislead (issue 35, class E): a quoted number where an integer belongs says
so; a sweep key that is neither a layout key nor a parameter lists both, closest first; distinct
swept values get distinct run ids, and two values of one entry that still meet say so."""

from __future__ import annotations

import pytest

from exabench.campaign.plan import expand
from exabench.config import validate
from exabench.errors import ConfigError


def plan(entry: dict, site):
    cfg = validate({"campaign": "m", "benchmarks": [entry]}, "config", "c.yaml")
    return expand(cfg, site, "c.yaml")


@pytest.mark.parametrize("key,value", [("nodes", "2"), ("ranks_per_node", "2"), ("threads_per_rank", "1"),
                                       ("gpus_per_rank", "1")])
def test_a_quoted_count_says_integers_are_valid_and_to_drop_the_quotes(key, value):
    with pytest.raises(ConfigError) as err:
        validate({"benchmarks": [{"name": "kmeans", "sweep": {key: [value]}}]}, "config", "c.yaml")
    assert f"key 'benchmarks[0].sweep.{key}[0]' = '{value}'" in str(err.value)
    assert "integer" in err.value.valid and f"without quotes: {value}, not '{value}'" in err.value.valid


@pytest.mark.parametrize("typo,meant", [("rank_per_node", "ranks_per_node"), ("nodse", "nodes"),
                                        ("threads_per_ranks", "threads_per_rank"), ("maxiters", "maxiter"),
                                        ("zzz", None)])
def test_a_sweep_key_typo_lists_layout_keys_and_parameters_closest_first(two_core_site, typo, meant):
    with pytest.raises(ConfigError) as err:
        plan({"name": "kmeans", "sweep": {typo: [1]}}, two_core_site)
    assert err.value.key == f"benchmarks[0].sweep.{typo}" and "is not a layout key or a parameter" in str(err.value)
    assert "layout keys: nodes, ranks_per_node" in err.value.valid and "parameters of 'kmeans': " in err.value.valid
    assert (f"did you mean '{meant}'?" in err.value.valid) if meant else "did you mean" not in err.value.valid


@pytest.mark.parametrize("values", [[-1, 1], [-3, 3, 0], [-12, 12, 2]])
def test_negative_and_positive_swept_values_get_distinct_run_ids(two_core_site, values):
    key = "seed"
    runs = plan({"name": "kmeans", "sweep": {key: values, "ranks_per_node": [1]}}, two_core_site)
    assert len({r.run_id for r in runs}) == len(values)


@pytest.mark.parametrize("key,values", [("tolerance", [0.5, 0.50]), ("seed", [7, 7])])
def test_two_values_of_one_entry_with_one_run_id_are_named_not_blamed_on_labels(two_core_site, key, values):
    with pytest.raises(ConfigError) as err:
        plan({"name": "kmeans", "sweep": {key: values, "ranks_per_node": [1]}}, two_core_site)
    assert err.value.key == "benchmarks[0].sweep" and "for both" in str(err.value)
    assert "label" not in str(err.value) and "change or drop one" in err.value.valid


@pytest.fixture
def gap_site(tmp_path):
    """Frontier with only its two smallest queues (up to 183 nodes) left: more nodes fit no queue."""
    from pathlib import Path

    import yaml

    from exabench.campaign.site import load_site
    root = Path(__file__).resolve().parents[2] / "profiles" / "frontier"
    data = yaml.safe_load((root / "site.yaml").read_text())
    data["queues"] = [q for q in data["queues"] if q["max_nodes"] <= 183]
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site(path)


@pytest.mark.parametrize("nodes", [520, 184, 9000])
def test_nodes_no_queue_takes_are_blamed_on_the_node_count_not_on_timeout_s(gap_site, nodes):
    cfg = validate({"campaign": "m", "timeout_s": 600, "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [nodes]}}]},
                   "config", "c.yaml")
    with pytest.raises(ConfigError) as err:
        expand(cfg, gap_site, "c.yaml")
    assert err.value.key == "benchmarks[0].sweep.nodes" and err.value.value == nodes, str(err.value)
    assert "is more nodes than any queue" in str(err.value) and "timeout_s" not in err.value.key


def test_a_time_limit_no_queue_takes_is_still_blamed_on_timeout_s(gap_site):
    cfg = validate({"campaign": "m", "timeout_s": 50000, "benchmarks": [{"name": "kmeans", "sweep": {"nodes": [100]}}]},
                   "config", "c.yaml")
    with pytest.raises(ConfigError) as err:
        expand(cfg, gap_site, "c.yaml")
    assert err.value.key == "timeout_s"


@pytest.mark.parametrize("sockets,per_socket,numa,ok", [(2, 16, 3, False), (2, 16, 1, False), (2, 20, 5, False),
                                                        (1, 32, 3, False), (2, 16, 4, True), (1, 32, 8, True)])
def test_a_numa_count_the_node_cannot_have_is_the_sites_error(write_yaml, local_site_dict, sockets, per_socket,
                                                               numa, ok):
    from exabench.campaign.site import load_site
    data = dict(local_site_dict)
    data["node"] = {**data["node"], "sockets": sockets, "cores_per_socket": per_socket, "numa_domains": numa}
    path = write_yaml("site.yaml", data)
    if ok:
        assert load_site(path).node.numa == numa
        return
    with pytest.raises(ConfigError) as err:
        load_site(path)
    assert err.value.file == str(path) and err.value.key == "node.numa_domains" and err.value.value == numa
    assert f"divides the node's {sockets * per_socket} cores evenly" in err.value.valid
