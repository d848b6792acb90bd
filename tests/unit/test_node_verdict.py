"""The cluster verdict (exabench.analysis.node_verdict) on records laid out as the every-node group
jobs write them: a slow node and a slow link are named, nothing else; a node that was down is
reported, not failed; a node whose runs fail is a bad node; the drain list and JUnit say so.
The pairing rounds (exabench.campaign.node_groups.pair_rounds) give every node distinct partners."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from exabench.analysis import node_verdict as nv
from exabench.campaign.node_groups import NodeGroup, node_groups, pair_rounds
from exabench.config import validate
from exabench.errors import ConfigError

from helpers_sites import site

NODES = [f"n{i:02d}" for i in range(1, 9)]
# A clean cluster's spread: each node's figure a few per cent off the median, deterministically.
WOBBLE = [1.00, 0.97, 1.03, 0.99, 1.02, 0.98, 1.01, 0.96]


def _record(run_id: str, bench: str, metric: str, value: float, unit: str, hib: bool = True, status: str = "ok"):
    return {"run_id": run_id, "benchmark": bench, "status": status, "error": None if status == "ok" else "boom",
            "metrics": {metric: {"value": value, "unit": unit, "samples": [], "higher_is_better": hib}} if status == "ok"
            else {}, "workload": {"headline": metric}}


def _campaign(slow_node=None, slow_link=None, down=(), failing=None, rounds=3):
    """(planned, records): STREAM and GEMM per node, ping-pong and allreduce per pair of `rounds` rounds."""
    planned, records = [], {}
    for i, node in enumerate(NODES):
        for bench, metric, unit, base in (("stream", "triad_gbs", "GB/s", 10.0), ("gemm", "tflops", "TFLOP/s", 0.1)):
            run_id = f"{bench}.tiny.n1r1t1.node-{node}"
            p = {"group": node, "kind": "node", "round": 0, "nodes": [node], "run_id": run_id,
                 "configuration": f"{bench}.tiny.n1r1t1", "benchmark": bench, "record": "-"}
            if node in down:
                p["status"] = f"{nv.DOWN} ({node}: down*)"
            else:
                value = base * WOBBLE[i] / (3 if node == slow_node else 1)
                records[run_id] = _record(run_id, bench, metric, value, unit,
                                          status="failed" if node == failing else "ok")
            planned.append(p)
    for r, pairs in enumerate(pair_rounds(NODES, rounds)):
        for a, b in pairs:
            for bench, metric in (("pingpong", "bandwidth"), ("allreduce", "busbw")):
                run_id = f"{bench}.tiny.n2r1t1.node-{a}..{b}"
                p = {"group": f"{a}..{b}", "kind": "pair", "round": r + 1, "nodes": [a, b], "run_id": run_id,
                     "configuration": f"{bench}.tiny.n2r1t1", "benchmark": bench, "record": "-"}
                if {a, b} & set(down):
                    p["status"] = f"{nv.DOWN} ({' '.join(n for n in (a, b) if n in down)}: down*)"
                else:
                    wobble = WOBBLE[NODES.index(a)] * WOBBLE[NODES.index(b)]
                    value = 0.2 * wobble / (8 if slow_link in (a, b) else 1) / (1.5 if slow_node in (a, b) else 1)
                    records[run_id] = _record(run_id, bench, metric, value, "GB/s")
                planned.append(p)
    return planned, records


def test_pairing_rounds_are_perfect_matchings_with_no_pair_twice():
    for n in (4, 5, 8, 16, 17):
        nodes = [f"n{i}" for i in range(n)]
        rounds = pair_rounds(nodes, n)
        assert len(rounds) == n - 1 + n % 2  # all rounds there are
        seen = [frozenset(p) for rnd in rounds for p in rnd]
        assert len(seen) == len(set(seen)) == n * (n - 1) // 2  # every pair exactly once over all rounds
        for rnd in rounds:
            members = [x for p in rnd for x in p]
            assert len(members) == len(set(members)) and len(members) == n - n % 2
    three = pair_rounds(NODES, 3)
    partners = {n: {q for rnd in three for p in rnd if n in p for q in p if q != n} for n in NODES}
    assert all(len(ps) == 3 for ps in partners.values())


def test_every_node_groups_of_several_kinds():
    config = {"every_node": {"nodes": "n[01-08]", "group": [1, "pairs", "all"], "pair_rounds": 2}}
    groups = node_groups(config, site("slurm-local", max_nodes=8), "c.yaml")
    kinds = [g.kind for g in groups]
    assert kinds.count("group") == 8 and kinds.count("pair") == 8 and kinds.count("all") == 1
    assert groups[-1] == NodeGroup("all", tuple(NODES), "all")
    assert {g.round for g in groups if g.kind == "pair"} == {1, 2}
    with pytest.raises(ConfigError, match=r"every_node.pair_rounds.* = 8 .*1 to 7 for 8 nodes"):
        node_groups({"every_node": {"nodes": "n[01-08]", "group": "pairs", "pair_rounds": 8}},
                    site("slurm-local", max_nodes=8), "c.yaml")
    with pytest.raises(ConfigError, match=r"at least 3 nodes for group: pairs"):
        node_groups({"every_node": {"nodes": "n[1-2]", "group": "pairs"}}, site("slurm-local"), "c.yaml")
    validate({"campaign": "x", "every_node": config["every_node"], "benchmarks": [{"name": "stream"}]}, "config", "c")


def test_a_clean_cluster_flags_nothing():
    v = nv.judge(*_campaign())
    assert v["bad_nodes"] == {} and v["bad_links"] == {} and v["down"] == [] and not nv.flagged(v)
    assert nv.drain_lines(v) == []


def test_the_slow_node_and_the_slow_link_are_named_and_nothing_else():
    v = nv.judge(*_campaign(slow_node="n03", slow_link="n06"))
    assert list(v["bad_nodes"]) == ["n03"] and list(v["bad_links"]) == ["n06"]
    assert any("stream.tiny.n1r1t1 triad_gbs" in e and "0.3" in e for e in v["bad_nodes"]["n03"])
    assert any("partners fine" in e for e in v["bad_links"]["n06"])
    assert v["unexplained_pairs"] == []
    drain = nv.drain_lines(v)
    assert [d.split()[2] for d in drain] == ["nodename=n03", "nodename=n06"]
    assert all(d.startswith("scontrol update nodename=") and 'state=drain reason="exabench acceptance: ' in d
               for d in drain)
    suites = {s.get("name"): s for s in ET.fromstring(nv.junit_xml(v, "c")).iter("testsuite")}
    failing = {(name, c.get("name")) for name, s in suites.items() for c in s.iter("testcase")
               if c.find("failure") is not None}
    assert failing == {("c.nodes", "n03"), ("c.links", "n06")}
    assert len(list(suites["c.nodes"].iter("testcase"))) == len(list(suites["c.links"].iter("testcase"))) == 8


def test_one_slow_pair_alone_convicts_no_link():
    planned, records = _campaign()
    key = next(k for k in records if k.startswith("pingpong") and "n02..n" in k)
    for bench in ("pingpong", "allreduce"):
        rec = records[key.replace("pingpong", bench)]
        metric = next(iter(rec["metrics"]))
        rec["metrics"][metric]["value"] /= 8
    v = nv.judge(planned, records)
    assert v["bad_links"] == {} and v["bad_nodes"] == {} and len(v["unexplained_pairs"]) == 1


def test_a_down_node_is_not_run_not_failed_and_a_failing_node_is_bad():
    v = nv.judge(*_campaign(down=("n05",)))
    assert v["down"] == ["n05"] and not nv.flagged(v)
    cases = {c.get("name"): c for c in ET.fromstring(nv.junit_xml(v, "c")).iter("testcase")}
    assert cases["n05"].find("skipped").get("message") == f"n05: {nv.DOWN}"
    assert "not run: node down" in nv.verdict_markdown(v, "c")
    v = nv.judge(*_campaign(failing="n02"))
    assert list(v["bad_nodes"]) == ["n02"] and "run failed: boom" in v["bad_nodes"]["n02"][0]
    assert v["bad_links"] == {}


@pytest.mark.parametrize("factor", [1.2, 1.5])
def test_slowdowns_below_the_minimum_effect_are_not_flagged_above_are(factor):
    planned, records = _campaign()
    for k, rec in records.items():
        if k.startswith("stream") and k.endswith("n04"):
            rec["metrics"]["triad_gbs"]["value"] /= factor
    v = nv.judge(planned, records)
    assert list(v["bad_nodes"]) == ([] if factor < 1 + nv.MIN_EFFECT else ["n04"])


def test_write_verdict_writes_every_output(tmp_path, monkeypatch):
    planned, records = _campaign(slow_node="n01")
    planned[0]["record"] = str(tmp_path / "broken.json")  # n01's STREAM record: not a record, so a failed run
    (tmp_path / "broken.json").write_text("{")
    del records[planned[0]["run_id"]]
    # the other synthetic records carry only what the verdict reads (no full record schema)
    real = nv.read_node_record
    monkeypatch.setattr(nv, "read_node_record", lambda p: real(p) if p["record"].endswith("broken.json")
                        else json.loads(open(p["record"]).read()))
    for p in planned:
        if p["run_id"] in records:
            p["record"] = str(tmp_path / "records" / f"{p['run_id']}.json")
            (tmp_path / "records").mkdir(exist_ok=True)
            (tmp_path / "records" / f"{p['run_id']}.json").write_text(json.dumps(records[p["run_id"]]))
    (tmp_path / "jobs.json").write_text(json.dumps({"planned": planned}))
    v = nv.write_verdict(tmp_path / "jobs.json", tmp_path / "out", "c")
    assert list(v["bad_nodes"]) == ["n01"] and "unreadable record" in v["bad_nodes"]["n01"][0]
    out = tmp_path / "out"
    assert (out / "drain.txt").read_text().startswith("scontrol update nodename=n01 state=drain")
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "allreduce.tiny.n2r1t1.busbw.png", "gemm.tiny.n1r1t1.tflops.png", "pingpong.tiny.n2r1t1.bandwidth.png",
        "stream.tiny.n1r1t1.triad_gbs.png"]
    assert "FLAGGED: nodes n01; links none" in (out / "verdict.md").read_text()
    assert len((out / "tests.csv").read_text().splitlines()) == 1 + len(planned)
