"""The cluster verdict (exabench.analysis.node_verdict) on records laid out as the every-node group
jobs write them: a slow node and a slow link are named, nothing else; a node that was down is
not accepted but not drained; a node whose runs fail is a bad node; one slow figure makes a suspect;
the reference is the healthy majority's; the drain list, JUnit and verdict.json say so.
The pairing rounds (exabench.campaign.node_groups.pair_rounds) give every node distinct partners."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from exabench.analysis import node_verdict as nv
from exabench.analysis import node_verdict_files as files
from exabench.analysis.verdict_document import write_files
from exabench.campaign.node_groups import NodeGroup, node_groups, pair_rounds
from exabench.config import validate
from exabench.errors import ConfigError

from helpers_node_verdict import NODES, _campaign, _record
from helpers_png import pixels, shows_data
from helpers_sites import site


def _cases(junit: str) -> dict:
    """JUnit test cases by name, of the suites nodes and node-tests (a node's link case has its name too)."""
    return {c.get("name"): c for s in ET.fromstring(junit).iter("testsuite")
            if s.get("name") in ("c.nodes", "c.node-tests") for c in s.iter("testcase")}


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
    # n06 is drained for its link: its node case fails too, its own tests pass
    assert failing == {("c.nodes", "n03"), ("c.nodes", "n06"), ("c.links", "n06"),
                       ("c.node-tests", "n03 gemm.tiny.n1r1t1 tflops"),
                       ("c.node-tests", "n03 stream.tiny.n1r1t1 triad_gbs")}
    assert len(list(suites["c.nodes"].iter("testcase"))) == len(list(suites["c.links"].iter("testcase"))) == 8
    assert len(list(suites["c.node-tests"].iter("testcase"))) == 16


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
    assert v["down"] == ["n05"] and v["bad_nodes"] == {} and nv.drain_lines(v) == []
    # not accepted: a node down during acceptance is undecided (exit 2), unless accept_down is set
    assert v["status"]["n05"] == "down" and nv.exit_code(v) == 2 and nv.flagged(v)
    cases = _cases(nv.junit_xml(v, "c"))
    assert cases["n05"].find("error").get("type") == "node-down"
    assert cases["n05 stream.tiny.n1r1t1 triad_gbs"].find("skipped").get("message").endswith(f"{nv.DOWN} (n05: down*)")
    assert "not run: node down" in nv.verdict_markdown(v, "c")
    assert "UNDECIDED: down n05" in nv.verdict_markdown(v, "c")
    accepted = nv.judge(*_campaign(down=("n05",)), nv.Criteria(accept_down=True))
    assert nv.exit_code(accepted) == 0
    cases = _cases(nv.junit_xml(accepted, "c"))
    assert cases["n05"].find("skipped") is not None
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
    # one slow figure is a suspect to re-test, never a drain on its own
    assert v["bad_nodes"] == {} and list(v["suspects"]) == ([] if factor < 1 + nv.MIN_EFFECT else ["n04"])
    assert nv.exit_code(v) == (0 if factor < 1 + nv.MIN_EFFECT else 2)


def test_a_first_pass_figure_is_a_suspect_and_a_confirmed_one_a_drain():
    """One slow test (no repeated samples): suspect, action re-test, exit 2, no drain line. The same
    test judged on the best of its samples, every one of them slow: confirmed, drained."""
    from exabench.analysis.verdict_document import document
    planned, records = _campaign()
    rec = records["stream.tiny.n1r1t1.node-n04"]
    rec["metrics"]["triad_gbs"]["value"] /= 2
    v = nv.judge(planned, records)
    assert list(v["suspects"]) == ["n04"] and v["status"]["n04"] == "suspect" and nv.drain_lines(v) == []
    n04 = document(v, "c", "x")["nodes"]["n04"]
    assert n04["status"] == "suspect" and n04["action"].startswith("re-test") and n04["drain"] is None
    for r in records.values():  # STREAM's samples repeat the triad: four samples, n04's all at half speed
        if r["benchmark"] == "stream":
            m = r["metrics"]["triad_gbs"]
            m["samples"] = [m["value"] * f for f in (0.9, 0.95, 1, 0.97)]
    v = nv.judge(planned, records, nv.Criteria(best_of=("stream",)))
    assert list(v["bad_nodes"]) == ["n04"] and v["suspects"] == {} and nv.exit_code(v) == 1
    assert nv.drain_lines(v)[0].startswith("scontrol update nodename=n04 state=drain")


def test_write_verdict_writes_every_output(tmp_path, monkeypatch):
    planned, records = _campaign(slow_node="n01")
    planned[0]["record"] = str(tmp_path / "broken.json")  # n01's STREAM record: not a record, so a failed run
    (tmp_path / "broken.json").write_text("{")
    del records[planned[0]["run_id"]]
    # the other synthetic records carry only what the verdict reads (no full record schema)
    real = files.read_node_record
    monkeypatch.setattr(files, "read_node_record", lambda p: real(p) if p["record"].endswith("broken.json")
                        else json.loads(open(p["record"]).read()))
    for p in planned:
        if p["run_id"] in records:
            p["record"] = str(tmp_path / "records" / f"{p['run_id']}.json")
            (tmp_path / "records").mkdir(exist_ok=True)
            (tmp_path / "records" / f"{p['run_id']}.json").write_text(json.dumps(records[p["run_id"]]))
    (tmp_path / "jobs.json").write_text(json.dumps({"planned": planned}))
    v = files.write_verdict(tmp_path / "jobs.json", tmp_path / "out", "c")
    assert list(v["bad_nodes"]) == ["n01"] and "unreadable record" in v["bad_nodes"]["n01"][0]
    out = tmp_path / "out"
    assert (out / "drain.txt").read_text().startswith("scontrol update nodename=n01 state=drain")
    assert sorted(p.name for p in (out / "plots").iterdir()) == [
        "allreduce.tiny.n2r1t1.busbw.png", "gemm.tiny.n1r1t1.tflops.png", "heat_map.json", "heat_map.png",
        "index.json", "index.md", "pingpong.tiny.n2r1t1.bandwidth.png", "stream.tiny.n1r1t1.triad_gbs.png"]
    assert [e["file"] for e in json.loads((out / "plots" / "index.json").read_text())][0] == "heat_map.png"
    for png in (out / "plots").glob("*.png"):
        assert shows_data(pixels(png)), png.name
    assert "FLAGGED: nodes n01; links none" in (out / "verdict.md").read_text()
    assert len((out / "tests.csv").read_text().splitlines()) == 1 + len(planned)


def test_a_node_that_dies_after_its_own_tests_is_not_accepted_and_its_tests_pass_in_junit():
    """Its single-node runs recorded and fine, its pairs not run: exit 2, and JUnit shows its own
    tests as they ran (passed), the node's case an error, nothing drained."""
    planned, records = _campaign()
    for p in planned:
        if p["kind"] == "pair" and "n05" in p["nodes"]:
            records.pop(p["run_id"], None)
            p["status"] = f"{nv.DOWN} (n05: down*)"
    v = nv.judge(planned, records)
    assert v["down"] == ["n05"] and v["status"]["n05"] == "down" and nv.exit_code(v) == 2
    assert nv.drain_lines(v) == []
    cases = _cases(nv.junit_xml(v, "c"))
    for test in ("stream.tiny.n1r1t1 triad_gbs", "gemm.tiny.n1r1t1 tflops"):
        assert len(cases[f"n05 {test}"]) == 0  # ran and passed: no skipped, failure or error
    assert cases["n05"].find("error").get("type") == "node-down"


def test_verdict_json_validates_against_its_schema_and_gives_figures_as_numbers(tmp_path):
    import jsonschema

    from exabench.config import load_schema
    from exabench.analysis.verdict_document import validated
    v = nv.judge(*_campaign(slow_node="n03", slow_link="n06"))
    doc = json.loads(json.dumps(write_files(v, tmp_path, "c", "cluster-acceptance")))
    written = json.loads((tmp_path / "verdict.json").read_text())
    jsonschema.Draft202012Validator(load_schema("verdict")).validate(written)
    assert written["schema"] == "exabench-verdict/1" and written["campaign"] == "cluster-acceptance"
    assert written["exit_code"] == 1 and written["decision"] == "drain" and written["date"].endswith("+00:00")
    assert written["thresholds"]["z_max"] == nv.OUTLIER_Z and "git_commit" in written["code_version"]
    healthy = written["nodes"]["n01"]
    assert healthy["status"] == "pass" and healthy["cause"] is None and healthy["drain"] is None
    stream = next(t for t in healthy["tests"] if t["test"] == "stream.tiny.n1r1t1")
    assert all(isinstance(stream[k], float) for k in ("figure", "reference", "ratio", "z"))
    assert stream["figure"] == pytest.approx(10.0) and stream["status"] == "pass"
    slow = written["nodes"]["n03"]
    assert slow["status"] == "drain" and slow["cause"] == "slow" and slow["severity"] == "clear"
    assert slow["drain"].startswith("scontrol update nodename=n03 state=drain")
    assert written["nodes"]["n06"]["cause"] == "bad link" and written["drain"] == nv.drain_lines(v)
    doc["nodes"]["n01"]["status"] = "fine"
    with pytest.raises(ConfigError, match=r"v.json: .*nodes.n01.status.* = 'fine'.*pass.*drain"):
        validated(doc, "v.json")


@pytest.mark.parametrize("case, code, says", [
    ({}, 0, "cluster acceptance passed: nothing flagged"),
    # no bad link: no "check the links of no node"
    ({"slow_node": "n03"}, 1, "cluster acceptance FAILED: drain n03 (n03: slow) (drain list: "),
    ({"slow_node": "n03", "slow_link": "n06"}, 1,
     "cluster acceptance FAILED: drain n03 n06 (n03: slow; n06: bad link), check the links of n06"),
    ({"down": ("n05",)}, 2, "cluster acceptance UNDECIDED (exit 2): down n05"),
])
def test_node_acceptance_fails_unless_the_verdict_exits_0(tmp_path, case, code, says):
    from exabench import pipeline
    from exabench.errors import ExabenchError
    v = nv.judge(*_campaign(**case))
    write_files(v, tmp_path, "c", "x")
    if code:
        with pytest.raises(ExabenchError, match=re.escape(says)):
            pipeline.node_acceptance_check(str(tmp_path / "verdict.json"), str(tmp_path / "log"))
    else:
        pipeline.node_acceptance_check(str(tmp_path / "verdict.json"), str(tmp_path / "log"))
    assert says in (tmp_path / "log").read_text()


# A spread as shared cores give it (MAD of the logarithms about 0.14, docs/acceptance.md's table).
WIDE = [1.00, 0.85, 1.18, 0.90, 1.12, 0.80, 1.00, 0.95]


def _nodes_only(slow: dict[str, float]):
    """(planned, records): STREAM and GEMM on each of 8 nodes with a wide spread, `slow` nodes slowed by
    their factor."""
    planned, records = [], {}
    for i, node in enumerate(NODES):
        for bench, metric, unit, base in (("stream", "triad_gbs", "GB/s", 10.0), ("gemm", "tflops", "TFLOP/s", 0.1)):
            run_id = f"{bench}.tiny.n1r1t1.node-{node}"
            planned.append({"group": node, "kind": "node", "round": 0, "nodes": [node], "run_id": run_id,
                            "configuration": f"{bench}.tiny.n1r1t1", "benchmark": bench, "record": "-"})
            records[run_id] = _record(run_id, bench, metric, base * WIDE[i] / slow.get(node, 1), unit)
    return planned, records


def test_two_slow_nodes_of_eight_are_both_drained_against_the_healthy_majority():
    """n07 and n08 at 2.5x slower: with their own figures in the median and the spread (MAD(ln) 0.19
    instead of 0.14) their z is -2.8 and -3.0, under z_max; but below z_screen in both their tests,
    they are left out of the references, and against the six healthy nodes it is -4.2 and -4.5."""
    v = nv.judge(*_nodes_only({"n07": 2.5, "n08": 2.5}))
    assert list(v["bad_nodes"]) == ["n07", "n08"] and v["suspects"] == {} and nv.exit_code(v) == 1
    stream = {r["subject"]: r for r in v["rows"] if r["configuration"] == "stream.tiny.n1r1t1"}
    assert stream["n07"]["z"] == pytest.approx(-4.22, abs=0.01)
    assert stream["n08"]["z"] == pytest.approx(-4.47, abs=0.01)
    assert stream["n07"]["median"] == pytest.approx(9.5)  # the six healthy nodes' median
    assert all(v["status"][n] == "pass" for n in NODES[:6])


def test_a_node_below_the_screen_in_one_test_only_stays_in_the_reference():
    """Slow in STREAM only (GEMM fine): one test is no reason to leave the pair out of the reference, so
    STREAM is judged among all eight as before (z -2.8 and -3.0: not slow)."""
    planned, records = _nodes_only({"n07": 2.5, "n08": 2.5})
    for node, factor in (("n07", 2.5), ("n08", 2.5)):
        records[f"gemm.tiny.n1r1t1.node-{node}"]["metrics"]["tflops"]["value"] *= factor
    v = nv.judge(planned, records)
    assert set(v["status"].values()) == {"pass"}
    stream = {r["subject"]: r for r in v["rows"] if r["configuration"] == "stream.tiny.n1r1t1"}
    assert stream["n07"]["z"] == pytest.approx(-2.77, abs=0.01)


def test_a_healthy_cluster_with_a_wide_spread_flags_nothing():
    v = nv.judge(*_nodes_only({}))
    assert set(v["status"].values()) == {"pass"} and nv.exit_code(v) == 0 and v["baseline_in_doubt"] == []


def test_when_too_many_nodes_disagree_the_baseline_is_in_doubt_not_judged():
    """Three of eight (37 %, above max_outlier_share 30 %) at 2.5x slower: no healthy majority to trust in
    either test; nobody drained, every node inconclusive, exit 2."""
    v = nv.judge(*_nodes_only({"n06": 2.5, "n07": 2.5, "n08": 2.5}))
    assert v["bad_nodes"] == {} and v["suspects"] == {} and nv.drain_lines(v) == []
    assert v["baseline_in_doubt"] == ["gemm.tiny.n1r1t1 tflops", "stream.tiny.n1r1t1 triad_gbs"]
    assert set(v["status"].values()) == {"inconclusive"} and nv.exit_code(v) == 2
    assert "Baseline in doubt" in nv.verdict_markdown(v, "c")
    # with a larger share allowed, the same figures are judged: the three are drained
    v = nv.judge(*_nodes_only({"n06": 2.5, "n07": 2.5, "n08": 2.5}), nv.Criteria(max_outlier_share=0.4))
    assert list(v["bad_nodes"]) == ["n06", "n07", "n08"]


def test_every_node_verdict_keys_reach_the_criteria_and_bad_values_are_refused():
    from exabench import pipeline
    config = validate({"campaign": "x", "benchmarks": [{"name": "stream"}], "every_node": {
        "nodes": "n[1-4]", "verdict": {"z_screen": 2.5, "confirmations": 3, "max_outlier_share": 0.4,
                                       "accept_down": True, "best_of": ["stream"]}}}, "config", "c.yaml")
    crit = pipeline.node_criteria(config["every_node"])
    assert (crit.z_screen, crit.confirmations, crit.max_outlier_share, crit.accept_down, crit.best_of) == (
        2.5, 3, 0.4, True, ("stream",))
    assert pipeline.node_criteria({}) == nv.Criteria(confirm=True)  # node_acceptance confirms by default
    assert pipeline.node_criteria({"verdict": {"confirm": False}}).confirm is False
    for bad, says in (({"max_outlier_share": 1.5}, r"every_node.verdict.max_outlier_share' = 1.5 .*maximum 1"),
                      ({"confirmations": 0}, r"every_node.verdict.confirmations' = 0 .*minimum 1"),
                      ({"accept_down": "maybe"}, r"every_node.verdict.accept_down' = 'maybe' .*boolean"),
                      ({"z_screen": 0}, r"every_node.verdict.z_screen' = 0 ")):
        with pytest.raises(ConfigError, match=says):
            validate({"campaign": "x", "benchmarks": [{"name": "stream"}],
                      "every_node": {"nodes": "n[1-4]", "verdict": bad}}, "config", "c.yaml")
