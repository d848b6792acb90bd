"""Schema validation: every bad value stops with a message naming file, key, value and what is valid."""

from __future__ import annotations

import pytest

from exabench.config import load_and_validate
from exabench.errors import ConfigError
from exabench.campaign.plan import expand
from exabench.campaign.site import load_site

GOOD = {"benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [2]}}]}


def test_defaults_are_filled(write_yaml):
    cfg = load_and_validate(write_yaml("c.yaml", GOOD), "config")
    assert cfg["preset"] == "tiny" and cfg["repeats"] == 1 and cfg["site"] == "profiles/local/site.yaml"
    assert cfg["benchmarks"][0]["params"] == {}


@pytest.mark.parametrize("config, key, value, valid", [
    ({"benchmarks": [{"name": "kmeans"}], "preset": "huge"}, "preset", "'huge'", "one of 'tiny', 'small', 'full'"),
    ({"benchmarks": [{"name": "kmeans"}], "repeat": 2}, "repeat", "2", "benchmarks, campaign, every_node, max_runs, node_hours_budget, preset"),
    ({"benchmarks": [{"name": "kmeans", "sweep": {"nodes": [0]}}]}, "benchmarks[0].sweep.nodes[0]", "0",
     "minimum 1"),
    ({"benchmarks": [{"name": "kmeans", "sweep": {"k": 3}}]}, "benchmarks[0].sweep.k", "3", "type array"),
    ({"benchmarks": []}, "benchmarks", "[]", "minItems 1"),
    ({"campaign": "a b;rm", "benchmarks": [{"name": "kmeans"}]}, "campaign", "'a b;rm'", "a string matching"),
    ({"benchmarks": [{"sweep": {}}]}, "benchmarks[0].name", "None", "must be present"),
])
def test_schema_errors_name_file_key_value_and_valid(write_yaml, config, key, value, valid):
    path = write_yaml("bad.yaml", config)
    with pytest.raises(ConfigError) as err:
        load_and_validate(path, "config")
    msg = str(err.value)
    assert msg.startswith(str(path)), msg
    assert f"key '{key}'" in msg, msg
    assert f"= {value}" in msg, msg
    assert valid in msg, msg


def test_yaml_syntax_error_names_file(write_yaml):
    path = write_yaml("broken.yaml", "benchmarks: [\n  - name: kmeans\n")
    with pytest.raises(ConfigError, match="broken.yaml.*cannot be parsed"):
        load_and_validate(path, "config")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml.*does not exist"):
        load_and_validate(tmp_path / "nope.yaml", "config")


@pytest.mark.parametrize("change, key, valid", [
    ({"launcher": "qsub"}, "launcher", "one of local, mpirun, torchrun with scheduler none"),
    ({"name": "Local Site"}, "name", "a string matching"),
    ({"node": {"cores_per_socket": 0}}, "node.cores_per_socket", "integer >= 1 or 'auto'"),
    ({"node": {"cores_per_socket": 4, "smt": 3}}, "node.smt", "one of 1, 2, 4, 8"),
    ({"env": {"BAD NAME": "1"}}, "env", "a string matching"),
    ({"scheduler": "slurm", "node": {"cores_per_socket": "auto"}}, "node.cores_per_socket", "an integer"),
    ({"node": {"cores_per_socket": 2, "reserved_cores": 2}}, "node.reserved_cores", "fewer than"),
])
def test_site_errors(write_yaml, local_site_dict, change, key, valid):
    path = write_yaml("site.yaml", {**local_site_dict, **change})
    with pytest.raises(ConfigError) as err:
        load_site(path)
    msg = str(err.value)
    assert str(path) in msg and f"key '{key}'" in msg and valid in msg, msg


def test_unknown_benchmark_and_parameter(write_yaml, two_core_site):
    cfg = load_and_validate(write_yaml("c.yaml", {"benchmarks": [{"name": "kmeanz"}]}), "config")
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.name' = 'kmeanz' is not a known benchmark.*kmeans"):
        expand(cfg, two_core_site, "c.yaml")
    cfg = load_and_validate(write_yaml("c.yaml", {"benchmarks": [{"name": "kmeans", "params": {"kk": 1}}]}),
                            "config")
    with pytest.raises(ConfigError, match=r"params\.kk. = 1 is not a parameter.*size_per_node"):
        expand(cfg, two_core_site, "c.yaml")


@pytest.mark.parametrize("sweep, key, valid", [
    ({"k": [3, "four"]}, "sweep.k", "int"),
    ({"dtype": ["float16"]}, "sweep.dtype", "one of 'float64', 'float32'"),
    ({"maxiter": [0]}, "sweep.maxiter", ">= 1"),
])
def test_bad_parameter_values(write_yaml, two_core_site, sweep, key, valid):
    cfg = load_and_validate(write_yaml("c.yaml", {"benchmarks": [{"name": "kmeans", "sweep": sweep}]}), "config")
    with pytest.raises(ConfigError) as err:
        expand(cfg, two_core_site, "c.yaml")
    assert f"benchmarks[0].{key}" in str(err.value) and valid in str(err.value), str(err.value)


def test_layout_that_does_not_fit_names_the_limit(write_yaml, two_core_site):
    cfg = load_and_validate(write_yaml("c.yaml", {"benchmarks": [
        {"name": "kmeans", "sweep": {"ranks_per_node": [2], "threads_per_rank": [4]}}]}), "config")
    with pytest.raises(ConfigError, match=r"does not fit site 'local'.*2 usable cores per node"):
        expand(cfg, two_core_site, "c.yaml")
