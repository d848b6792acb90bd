"""Network figures of a site (workflow/schemas/site.schema.yaml `network`) and the choice between them
and a fit of the site's allreduce records (exabench/perf/link_params.py): the fit wins, the table says which."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from exabench.perf.alphabeta import Link, ring_allreduce_time
from exabench.perf.link_params import (error_by_range, fit_table, preferred_fits, resolve_links, site_link,
                                       site_machine)
from exabench.errors import ConfigError, ExabenchError
from exabench.perf.site_comm import site_allreduce_projection, site_comm_table, write_site_comm
from exabench.campaign.site import load_site

REPO = Path(__file__).resolve().parents[2]


def _site_with(tmp_path, network) -> Path:
    data = yaml.safe_load((REPO / "profiles/local/site.yaml").read_text())
    data["network"] = network
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("network, key, valid", [
    ({"inter_node_bandwidth_GBps": {"value": 25}}, "network.inter_node_bandwidth_GBps.source", "URL or citation"),
    ({"inter_node_bandwidth_GBps": 25}, "network.inter_node_bandwidth_GBps", "{value: <number>, source:"),
    ({"inter_node_latency_us": {"value": 0, "source": "https://example.org"}}, "network.inter_node_latency_us.value",
     "exclusiveMinimum 0"),
    ({"inter_node_bandwith_GBps": {"value": 1, "source": "https://example.org"}}, "network.inter_node_bandwith_GBps",
     "inter_node_bandwidth_GBps"),
])
def test_a_network_figure_without_a_valid_source_or_value_is_rejected_by_name(tmp_path, network, key, valid):
    path = _site_with(tmp_path, network)
    with pytest.raises(ConfigError) as err:
        load_site(path)
    text = str(err.value)
    assert str(path) in text and f"key '{key}'" in text and valid in text, text


def test_every_network_figure_of_every_profile_is_cited():
    seen = 0
    for path in sorted((REPO / "profiles").glob("*/site.yaml")):
        site = load_site(path)
        for key, fig in site.network.items():
            if key == "interconnect":
                continue
            assert fig["value"] > 0 and fig["source"].startswith("https://"), (path, key, fig)
            seen += 1
    assert seen >= 6  # Summit, Frontier (2 levels each), Stampede2, Perlmutter


def test_site_figures_in_bytes_and_seconds_and_a_missing_latency_is_said():
    link, origin = site_link({"inter_node_bandwidth_GBps": {"value": 25, "source": "https://a.org/x"},
                              "inter_node_latency_us": {"value": 1.5, "source": "https://b.org/y"}}, "inter_node")
    assert link == Link(1.5e-6, 25e9) and "https://a.org/x" in origin and "https://b.org/y" in origin
    link, origin = site_link({"inter_node_bandwidth_GBps": {"value": 25, "source": "https://a.org/x"}}, "inter_node")
    assert link.alpha_s == 0 and "0 assumed" in origin
    assert site_link({}, "intra_node") is None


def _sweep(alpha, bw, nodes, rpn, backend="mpi"):
    n = nodes * rpn
    return pd.DataFrame([{"run_id": f"ar.{backend}.n{nodes}r{rpn}", "backend": backend, "hierarchical": False, "n": n,
                          "nodes": nodes, "ranks_per_node": rpn, "bytes": b,
                          "time_s": ring_allreduce_time(n, b, Link(alpha, bw))}
                         for b in (8, 1024, 65536, 2**20, 2**22)])


def test_fitted_parameters_win_and_the_table_says_which_was_used():
    summit = load_site(REPO / "profiles/summit/site.yaml")
    sweep = _sweep(3e-6, 40e9, nodes=1, rpn=6)  # one node measured: the intra level only
    table = site_comm_table(summit, sweep, 65536, "sweep.csv")
    by = table.set_index("level")
    assert by.loc["intra_node", "origin"] == "fitted"
    assert by.loc["intra_node", "alpha_us"] == pytest.approx(3.0, rel=1e-6)
    assert by.loc["intra_node", "bandwidth_GBps"] == pytest.approx(40.0, rel=1e-6)
    assert by.loc["inter_node", "origin"] == "site" and by.loc["inter_node", "bandwidth_GBps"] == 25
    assert "summit_user_guide" in by.loc["inter_node", "detail"]
    # Without records every level falls back to the site file.
    assert set(site_comm_table(summit, None, 65536)["origin"]) == {"site"}


def test_projection_from_site_figures_alone_reaches_the_whole_machine():
    frontier = load_site(REPO / "profiles/frontier/site.yaml")
    table = site_comm_table(frontier, None, 65536)
    proj = site_allreduce_projection(frontier, table)
    assert proj["nodes"].iloc[-1] == 9472 and (proj["status"] == "PROJECTED").all()
    # latency 0: bandwidth-bound hierarchical ring, 2(g-1)/g S / intra + 2(N-1)/N (S/g) / (inter/g)
    s, g, n = proj["bytes"].iloc[-1], 8, 9472
    expect = 2 * (g - 1) / g * s / 50e9 + 2 * (n - 1) / n * (s / g) / (100e9 / g)
    assert proj["allreduce_ms"].iloc[-1] == pytest.approx(1e3 * expect, rel=1e-9)


def test_a_level_with_neither_fit_nor_figure_is_none_and_blocks_only_what_needs_it():
    stampede2 = load_site(REPO / "profiles/stampede2/site.yaml")  # one rank per KNL node: intra not needed
    table = resolve_links(stampede2)
    assert list(table["origin"]) == ["none", "site"]
    assert site_machine(stampede2, table).inter.bandwidth_Bps == 12.5e9
    perlmutter = load_site(REPO / "profiles/perlmutter/site.yaml")  # 4 GPUs per node, no NVLink figure
    with pytest.raises(ExabenchError, match="intra-node bandwidth"):
        site_machine(perlmutter, resolve_links(perlmutter))
    local = load_site(REPO / "profiles/local/site.yaml")
    with pytest.raises(ExabenchError, match="no inter-node"):
        site_machine(local, resolve_links(local))


def test_fits_per_backend_level_and_regime_with_error_by_size_range():
    sweep = pd.concat([_sweep(5e-6, 2e9, 1, 2, "mpi"), _sweep(50e-6, 1e9, 1, 2, "gloo"),
                       _sweep(20e-6, 0.5e9, 2, 1, "gloo")])
    params, fits = fit_table(sweep, 65536)
    assert {(r.backend, r.level) for r in params.itertuples()} == {("mpi", "intra_node"), ("gloo", "intra_node"),
                                                                  ("gloo", "inter_node")}
    gloo_inter = fits[("gloo", "inter_node", "all")]
    assert gloo_inter.link.alpha_s == pytest.approx(20e-6, rel=1e-6)
    assert gloo_inter.link.bandwidth_Bps == pytest.approx(0.5e9, rel=1e-6)
    ranges = error_by_range(gloo_inter)
    assert list(ranges["sizes"]) == ["< 1 KiB", "1-64 KiB", "64 KiB-1 MiB", ">= 1 MiB"]
    assert ranges["points"].sum() == 5 and ranges["max_rel_error"].max() < 1e-9
    chosen, label = preferred_fits(fits)
    assert chosen["intra_node"].link.alpha_s == pytest.approx(50e-6, rel=1e-6)  # gloo before mpi
    assert "gloo" in label


def test_write_site_comm_files(tmp_path):
    text = write_site_comm(REPO / "profiles/summit/site.yaml", None, tmp_path / "c.csv", tmp_path / "c.md", 65536)
    assert "PROJECTED" in text and "| inter_node | site" in text
    table = pd.read_csv(tmp_path / "c.csv")
    assert list(table["origin"]) == ["site", "site"] and not table["bandwidth_GBps"].isna().any()
    assert math.isclose(table.set_index("level").loc["inter_node", "bandwidth_GBps"], 25)


@pytest.mark.parametrize("site_name, machine", [("summit", "summit"), ("frontier", "frontier"),
                                                ("stampede2", "stampede2_knl")])
def test_site_figures_agree_with_the_reference_files_machines(site_name, machine):
    # The same machine is described twice (site file for runs, reference file for the published cases):
    # where both give a bandwidth, they must not drift apart.
    from exabench.perf.reference import Reference
    ref = Reference(REPO / "results/reference/published_scaling.yaml").machine(machine)
    net = load_site(REPO / f"profiles/{site_name}/site.yaml").network
    assert net["inter_node_bandwidth_GBps"]["value"] * 1e9 == ref.inter.bandwidth_Bps
    if "intra_node_bandwidth_GBps" in net:
        assert net["intra_node_bandwidth_GBps"]["value"] * 1e9 == ref.intra.bandwidth_Bps
