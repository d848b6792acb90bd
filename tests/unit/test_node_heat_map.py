"""The cluster acceptance's heat map of nodes x tests: drawn from the verdict of a synthetic
8-node campaign with one slow node and one slow link, both marked; not drawn, and said why in the
plots' index, when no node test has a figure to judge."""

from __future__ import annotations

import json

import pytest

from exabench.analysis import node_verdict as nv
from exabench.analysis.figures import NothingToDraw
from exabench.analysis.node_verdict_files import heat_map_json
from exabench.analysis.plots import HEAT_Z_CLIP, draw, index_markdown, node_heat_matrix, plot_node_heat_map
from helpers_node_verdict import NODES, _campaign
from helpers_png import pixels, shows_data


def test_heat_map_marks_the_slow_node_and_the_slow_link(tmp_path):
    v = nv.judge(*_campaign(slow_node="n03", slow_link="n06"))
    m = node_heat_matrix(v)
    assert m["labels"] == ["n01", "n02", "n03 drain", "n04", "n05", "n06 drain (bad link)", "n07", "n08"]
    assert m["node_tests"] == 2
    assert [t.split("\n")[1] for t in m["tests"]] == ["tflops", "triad_gbs", "busbw", "bandwidth"]
    z = dict(zip(NODES, m["z"]))
    assert all(cell < -HEAT_Z_CLIP for cell in z["n03"][:2])  # a third of its peers' figures
    assert all(z["n06"][j] == min(row[j] for row in m["z"]) < -HEAT_Z_CLIP for j in (2, 3))  # its pairs the worst
    assert all(abs(cell) < 3 for node in ("n01", "n07") for cell in z[node])
    assert shows_data(pixels(plot_node_heat_map(v, tmp_path / "heat_map.png")))
    # Its numbers and marks as written beside it (plots/heat_map.json): a cell not judged is null.
    written = json.loads(heat_map_json(v))
    assert written["labels"] == m["labels"] and written["bad_links"] == ["n06"]
    assert written["status"]["n03"] == written["status"]["n06"] == "drain" and written["z"] == m["z"]


def test_heat_map_marks_a_down_node_and_leaves_its_row_unjudged(tmp_path):
    v = nv.judge(*_campaign(slow_node="n03", down=("n08",)))
    m = node_heat_matrix(v)
    assert m["labels"][2] == "n03 drain" and m["labels"][7] == "n08 down"
    assert all(cell != cell for cell in m["z"][7])
    assert json.loads(heat_map_json(v))["z"][7] == [None] * len(m["tests"])
    assert shows_data(pixels(plot_node_heat_map(v, tmp_path / "heat_map.png")))


def test_heat_map_is_not_drawn_without_a_judged_node_test(tmp_path):
    planned, records = _campaign()
    for p in planned:
        if p["kind"] == "node":
            del records[p["run_id"]]
    v = nv.judge(planned, records)
    with pytest.raises(NothingToDraw, match="no node test was judged"):
        plot_node_heat_map(v, tmp_path / "heat_map.png")
    entry = draw("heat_map", "Nodes x tests (robust z)", lambda p: plot_node_heat_map(v, p), tmp_path / "heat_map.png")
    assert "- Nodes x tests (robust z): not drawn, no node test was judged" in index_markdown([entry])
    assert not (tmp_path / "heat_map.png").exists()
