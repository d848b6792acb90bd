"""Faults in time (exabench.analysis.node_stability) on synthetic campaigns whose best_of tests were
sampled over a window: a node's link that comes and goes (fast in its best samples, throttled in
others) is unstable, confirmed and drained; a quiet cluster's small spreads flag nobody; a steady
slow link stays slow; a node stable again in the confirmation round is cleared."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from exabench.analysis import node_confirm as nc
from exabench.analysis import node_stability as stab
from exabench.analysis import node_verdict as nv
from exabench.analysis.verdict_document import write_files

from helpers_node_verdict import NODES, WOBBLE, _campaign, _record

CRIT = nv.Criteria(confirm=True, best_of=("stream", "pingpong"))
TESTS = {"node": (("stream", "triad_gbs", "GB/s", 10.0),), "pair": (("pingpong", "bandwidth", "GB/s", 0.2),)}


def _samples(value: float, k: int, flapping: bool = False, depth: float = 0.2) -> list[float]:
    """40 samples whose best is `value`: a healthy spread (the slowest `depth` below the best, a little
    more with k), or, flapping, 36 such samples and 4 at a fiftieth (throttled: long samples, a
    third or more of the window's time)."""
    low = 1 - depth - 0.01 * (k % 4)
    steady = [value * (1 - (1 - low) * (i % 9) / 8) for i in range(36 if flapping else 40)]
    return steady + ([value / 50] * 4 if flapping else [])


def _windowed(records: dict, links=(), nodes=(), depth: float = 0.2) -> None:
    """Give the STREAM and ping-pong records samples over a window (window_s 8): the pairs of nodes with
    a flapping link in `links`, the own runs of flapping `nodes`, come and go."""
    for k, (run_id, rec) in enumerate(sorted(records.items())):
        if rec["benchmark"] in ("stream", "pingpong") and rec["status"] == "ok":
            m = next(iter(rec["metrics"].values()))
            on = set(run_id.split(".node-")[1].split(".confirm")[0].split(".."))
            flapping = on & set(links) if len(on) == 2 else on & set(nodes)
            m["samples"] = _samples(m["value"], k, bool(flapping), depth)
            rec["params"] = {"window_s": 8.0}


def _round(verdict, links=(), nodes=()):
    """(confirm.json, records) of a confirmation round, its STREAM and ping-pong sampled over a window."""
    flagged = nc.suspects(verdict)
    controls = nc.controls(verdict, flagged)
    planned, records = [], {}
    for name, group, kind, role in nc.groups(flagged, controls, 1):
        for bench, metric, unit, base in TESTS[kind]:
            config = f"{bench}.tiny.n{len(group)}r1t1"
            run_id = f"{config}.node-{name}"
            planned.append({"group": name, "kind": kind, "round": 0, "nodes": list(group), "run_id": run_id,
                            "configuration": config, "benchmark": bench, "record": "-", "role": role, "confirm": 1})
            wobble = 1.0
            for n in group:
                wobble *= WOBBLE[NODES.index(n)]
            records[run_id] = _record(run_id, bench, metric, base * wobble * 0.5, unit)
    _windowed(records, links, nodes)
    return {"round": 1, "suspects": flagged, "controls": controls, "in_doubt": nc.in_doubt(verdict, CRIT),
            "planned": planned}, records


def test_the_slow_quarter_is_weighted_by_time():
    steady = stab.sample_spread(_samples(1.0, 0))
    assert steady.best == 1.0 and steady.ratio == pytest.approx(1 / 0.825, rel=0.05)
    # 4 throttled samples of 40 by count, most of the window by time: the slow quarter is throttled
    flapping = stab.sample_spread(_samples(1.0, 0, flapping=True))
    assert flapping.best == 1.0 and flapping.slow == flapping.worst == pytest.approx(0.02)
    assert flapping.ratio == pytest.approx(50)
    times = stab.sample_spread([1.0, 1.0, 1.0, 50.0], higher_is_better=False)  # a time: larger is worse
    assert times.best == 1.0 and times.ratio == pytest.approx(50)
    assert stab.sample_spread([1.0, 2.0, 3.0]) is None  # too few samples to judge


def test_the_spreads_reference_leaves_out_the_unstable():
    """Two flapping pairs of six (spread 55) against steady ones (1.1 and 2.5): among all six the MAD is
    so wide that they are within z_max; left out of the reference, they are far beyond it."""
    ratios = [55.0, 55.0, 2.5, 2.5, 1.1, 1.1]
    plain = stab.spread_reference(ratios)
    assert stab.spread_z(55.0, plain, plain.log_mad, 0.01) < nv.OUTLIER_Z
    ref = stab.healthy_reference(ratios, 0.01, nv.Z_SCREEN, stab.UNSTABLE_FACTOR)
    assert ref.peers == 4 and stab.spread_z(55.0, ref, ref.log_mad, 0.01) > nv.OUTLIER_Z
    assert stab.healthy_reference([1.02, 1.03, 1.05, 1.2], 0.01, nv.Z_SCREEN, stab.UNSTABLE_FACTOR).peers == 4


def test_a_flapping_link_is_unstable_then_confirmed_and_drained(tmp_path):
    planned, records = _campaign()
    _windowed(records, links=("n05",))
    first = nv.judge(planned, records, CRIT)
    # its best samples are as fast as its peers': not slow, but every pair of n05 unstable
    assert first["bad_links"] == {} and first["bad_nodes"] == {} and first["unstable"] == {"n05": "link"}
    assert first["status"]["n05"] == "suspect" and nv.exit_code(first) == 2
    assert [n for n, s in first["status"].items() if s != "pass"] == ["n05"]
    shaky = [r for r in first["rows"] if r["verdict"] == "unstable"]
    assert {r["subject"] for r in shaky} == {" ".join(p) for p in
                                             (("n05", "n06"), ("n05", "n08"), ("n03", "n05"))}
    assert all(r["spread"] == pytest.approx(50) and r["spread_z"] > CRIT.z_max for r in shaky)
    doc = write_files(first, tmp_path / "first", "c", "x")  # validated against verdict.schema.yaml
    assert doc["nodes"]["n05"]["cause"] == "unstable link (first pass only)"
    assert doc["nodes"]["n05"]["action"].startswith("re-test (unstable")
    v = nc.judge(first, *_round(first, links=("n05",)), CRIT)
    assert v["status"]["n05"] == "drain" and list(v["bad_links"]) == ["n05"] and nv.exit_code(v) == 1
    assert [n for n, s in v["status"].items() if s != "pass"] == ["n05"]
    doc = write_files(v, tmp_path, "c", "x")
    n05 = doc["nodes"]["n05"]
    assert n05["cause"] == "unstable link" and n05["severity"] == "clear"
    assert n05["confirmation"]["result"] == "confirmed"
    pair = next(t for t in n05["tests"] if t["status"] == "unstable")
    assert pair["samples"]["best"] == pytest.approx(pair["figure"]) and pair["samples"]["spread"] == pytest.approx(50)
    assert pair["samples"]["spread_reference"] == pytest.approx(1.2, abs=0.05)
    assert {t["status"] for t in n05["confirmation"]["tests"] if t["kind"] == "pair"} == {"unstable"}
    assert nv.drain_lines(v) == ['scontrol update nodename=n05 state=drain reason="exabench acceptance: '
                                 'unstable link: every pair unstable, partners steady elsewhere"']
    links = next(s for s in ET.fromstring(nv.junit_xml(v, "c")).iter("testsuite") if s.get("name") == "c.links")
    assert [(c.get("name"), c.find("failure").get("type")) for c in links.iter("testcase")
            if c.find("failure") is not None] == [("n05", "unstable-link")]
    assert "UNSTABLE" in nv.verdict_markdown(v, "c")


def test_a_quiet_clusters_spreads_flag_nobody():
    """Spreads of 1.01 to 1.06 (one at 1.2: far beyond its peers in robust z, but not twice their
    median spread): nobody is unstable."""
    planned, records = _campaign()
    _windowed(records, depth=0.01)
    pp = sorted(k for k in records if k.startswith("pingpong"))[0]
    records[pp]["metrics"]["bandwidth"]["samples"] = _samples(records[pp]["metrics"]["bandwidth"]["value"], 0,
                                                              depth=0.3)
    v = nv.judge(planned, records, CRIT)
    row = next(r for r in v["rows"] if r["run_id"] == pp)
    assert row["spread_z"] > CRIT.z_max and row["spread"] < CRIT.unstable_factor * row["spread_reference"]
    assert set(v["status"].values()) == {"pass"} and v["unstable"] == {} and nv.exit_code(v) == 0


def test_a_steady_slow_link_stays_slow_not_unstable():
    planned, records = _campaign(slow_link="n06")
    _windowed(records)
    first = nv.judge(planned, records, CRIT)
    assert list(first["bad_links"]) == ["n06"] and first["unstable"] == {}
    assert not any(r["verdict"] == "unstable" for r in first["rows"])
    assert "bad link: every pair slow" in nv.drain_line("n06", first)


def test_a_node_unstable_in_the_first_pass_and_stable_in_the_round_is_cleared(tmp_path):
    planned, records = _campaign()
    _windowed(records, nodes=("n04",))  # n04's own STREAM comes and goes; its pairs are steady
    first = nv.judge(planned, records, CRIT)
    assert first["unstable"] == {"n04": "node"} and first["status"]["n04"] == "suspect"
    v = nc.judge(first, *_round(first), CRIT)
    assert v["status"]["n04"] == "suspect-cleared" and nv.exit_code(v) == 0 and nv.drain_lines(v) == []
    stream = next(r for r in v["confirmation"]["rows"] if r["configuration"] == "stream.tiny.n1r1t1")
    assert stream["verdict"] == "pass" and stream["spread"] < 2
    write_files(v, tmp_path, "c", "x")
    again = nc.judge(first, *_round(first, nodes=("n04",)), CRIT)  # still unstable: drained, cause unstable
    assert again["status"]["n04"] == "drain" and "bad node: stream.tiny.n1r1t1 unstable 50x spread" in nv.drain_line(
        "n04", again)
    assert "confirmed stream.tiny.n1r1t1 unstable 50x spread" in nv.drain_line("n04", again)
    assert write_files(again, tmp_path, "c", "x")["nodes"]["n04"]["cause"] == "unstable"
