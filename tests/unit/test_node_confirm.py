"""Screen, then confirm (exabench.analysis.node_confirm) on synthetic campaigns: the first pass flags,
a confirmation round measures each flagged node again beside known-good nodes, and only what it
confirms is drained. The round's figures are all halved (a loaded machine): the suspect is judged
by its ratio to the controls of the same round, so the load cancels."""

from __future__ import annotations

import json
import re

from exabench.analysis import node_confirm as nc
from exabench.analysis import node_verdict as nv
from exabench.analysis.verdict_document import write_files

from helpers_node_verdict import NODES, WOBBLE, _campaign, _record, _stopped_by_n03

CRIT = nv.Criteria(confirm=True)
TESTS = {"node": (("stream", "triad_gbs", "GB/s", 10.0), ("gemm", "tflops", "TFLOP/s", 0.1)),
         "pair": (("pingpong", "bandwidth", "GB/s", 0.2), ("allreduce", "busbw", "GB/s", 0.2))}


def _round(verdict, slow=(), slow_link=(), failing=(), load=0.5):
    """(confirm.json's content, records) of a confirmation round of the first pass's flagged nodes: every
    figure times `load`; nodes in `slow` at a third, pairs with a node of `slow_link` at an eighth, runs
    on `failing` nodes failed."""
    flagged = nc.suspects(verdict)
    controls = nc.controls(verdict, flagged)
    planned, records = [], {}
    for name, nodes, kind, role in nc.groups(flagged, controls, 1):
        for bench, metric, unit, base in TESTS[kind]:
            config = f"{bench}.tiny.n{len(nodes)}r1t1"
            run_id = f"{config}.node-{name}"
            planned.append({"group": name, "kind": kind, "round": 0, "nodes": list(nodes), "run_id": run_id,
                            "configuration": config, "benchmark": bench, "record": "-", "role": role, "confirm": 1})
            wobble = 1.0
            for n in nodes:
                wobble *= WOBBLE[NODES.index(n)]
            value = base * wobble * load / (3 if set(nodes) & set(slow) else 1) / (
                8 if kind == "pair" and set(nodes) & set(slow_link) else 1)
            records[run_id] = _record(run_id, bench, metric, value, unit,
                                      status="failed" if set(nodes) & set(failing) else "ok")
    doc = {"round": 1, "suspects": flagged, "controls": controls, "in_doubt": nc.in_doubt(verdict, CRIT),
           "planned": planned}
    return doc, records


def _noisy_once(node="n05", factor=0.46):
    """A clean campaign but for one GEMM figure of `node` at `factor` of its own (one noisy sample)."""
    planned, records = _campaign()
    rec = records[f"gemm.tiny.n1r1t1.node-{node}"]
    rec["metrics"]["tflops"]["value"] *= factor
    return planned, records


def test_a_healthy_node_flagged_by_one_noisy_figure_is_cleared_not_drained(tmp_path):
    first = nv.judge(*_noisy_once(), CRIT)
    assert first["status"]["n05"] == "suspect" and nv.exit_code(first) == 2  # the first pass alone cannot decide
    v = nc.judge(first, *_round(first), CRIT)
    assert v["status"]["n05"] == "suspect-cleared" and v["bad_nodes"] == {} and nv.drain_lines(v) == []
    assert nv.exit_code(v) == 0
    assert v["confirmation"]["nodes"]["n05"]["result"] == "cleared"
    doc = write_files(v, tmp_path, "c", "camp")  # validated against verdict.schema.yaml
    n05 = doc["nodes"]["n05"]
    assert n05["severity"] == "none" and n05["drain"] is None and n05["confirmation"]["result"] == "cleared"
    gemm = next(t for t in n05["confirmation"]["tests"] if t["test"] == "gemm.tiny.n1r1t1")
    assert gemm["status"] == "pass" and 0.9 < gemm["ratio"] < 1.1  # the round's load cancels in the ratio
    assert any(e.startswith("first pass: ") for e in n05["evidence"])
    assert json.loads((tmp_path / "verdict.json").read_text())["confirmation"]["controls"] == v["confirmation"][
        "controls"]


def test_a_truly_slow_node_is_confirmed_and_drained():
    first = nv.judge(*_campaign(slow_node="n03"), CRIT)
    assert "n03" in first["bad_nodes"]
    controls = nc.controls(first, nc.suspects(first))
    assert len(controls) == 2 and "n03" not in controls
    v = nc.judge(first, *_round(first, slow=("n03",)), CRIT)
    assert v["status"]["n03"] == "drain" and nv.exit_code(v) == 1
    assert any(e.startswith("confirmation stream.tiny.n1r1t1 triad_gbs") for e in v["bad_nodes"]["n03"])
    assert [line.split()[2] for line in nv.drain_lines(v)] == ["nodename=n03"]
    assert re.search(r"confirmed stream.tiny.n1r1t1 0.3\dx controls", nv.drain_lines(v)[0])
    assert [n for n, s in v["status"].items() if s != "pass"] == ["n03"]


def test_a_slow_link_is_confirmed_by_its_pairs_with_the_controls():
    first = nv.judge(*_campaign(slow_link="n06"), CRIT)
    assert list(first["bad_links"]) == ["n06"]
    v = nc.judge(first, *_round(first, slow_link=("n06",)), CRIT)
    assert v["status"]["n06"] == "drain" and list(v["bad_links"]) == ["n06"] and v["bad_nodes"] == {}
    assert sum(e.startswith("confirmation pair n06 ") for e in v["bad_links"]["n06"]) == 2 * 2  # 2 controls, 2 tests


def test_a_link_slow_in_one_pair_test_with_every_control_is_confirmed_though_another_test_passes():
    """On the 16-node cluster a link at 2 Gbit/s: its ping-pongs with both controls 0.09x theirs, its Gloo
    allreduce (noisier: a wide first-pass spread) passing; judged all pair tests together it was cleared."""
    first = nv.judge(*_campaign(slow_link="n06"), CRIT)
    doc, records = _round(first, slow_link=("n06",))
    for run_id, rec in records.items():
        if run_id.startswith("allreduce.") and "n06" in run_id:
            rec["metrics"]["busbw"]["value"] *= 8  # as fast as the controls' pair
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n06"] == "drain" and list(v["bad_links"]) == ["n06"]
    assert all(e.startswith("confirmation pair n06 ") and " bandwidth " in e for e in v["bad_links"]["n06"][-2:])
    # slow with one control and not the other: not cleared, not drained
    ctrl = doc["controls"][0]
    records[f"pingpong.tiny.n2r1t1.node-n06..{ctrl}{nc.SUFFIX}1"]["metrics"]["bandwidth"]["value"] *= 8
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n06"] == "inconclusive", v["confirmation"]["nodes"]["n06"]
    assert any("with one control, not the other" in e for e in v["confirmation"]["nodes"]["n06"]["evidence"])


def test_a_first_pass_fault_gone_in_the_round_is_cleared():
    first = nv.judge(*_campaign(slow_node="n03"), CRIT)
    v = nc.judge(first, *_round(first), CRIT)  # n03 well in the confirmation round
    assert v["status"]["n03"] == "suspect-cleared" and nv.exit_code(v) == 0 and nv.drain_lines(v) == []


def test_a_failed_run_is_drained_only_when_it_fails_again():
    first = nv.judge(*_campaign(failing="n04"), CRIT)
    assert "n04" in first["bad_nodes"]
    again = nc.judge(first, *_round(first, failing=("n04",)), CRIT)
    assert again["status"]["n04"] == "drain" and nv.exit_code(again) == 1
    assert any(e.startswith("confirmation stream.tiny.n1r1t1: run failed") for e in again["bad_nodes"]["n04"])
    once = nc.judge(first, *_round(first), CRIT)
    assert once["status"]["n04"] == "suspect-cleared"


def test_a_control_that_fails_leaves_the_suspect_inconclusive():
    first = nv.judge(*_campaign(slow_node="n03"), CRIT)
    control = nc.controls(first, ["n03"])
    doc, records = _round(first, slow=("n03",), failing=control)
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n03"] == "inconclusive" and nv.exit_code(v) == 2 and nv.drain_lines(v) == []


def test_too_many_flagged_nodes_put_the_baseline_in_doubt():
    planned, records = _campaign(slow_link="n06")
    for node, bench, metric in (("n02", "stream", "triad_gbs"), ("n04", "gemm", "tflops")):
        records[f"{bench}.tiny.n1r1t1.node-{node}"]["metrics"][metric]["value"] /= 3
    # one slow figure each: suspects, confirmed but not counted against the baseline
    assert nc.suspects(nv.judge(planned, records, CRIT)) == ["n02", "n04", "n06"]
    assert nc.in_doubt(nv.judge(planned, records, CRIT), CRIT) == ""
    for node, bench, metric in (("n02", "gemm", "tflops"), ("n04", "stream", "triad_gbs")):
        records[f"{bench}.tiny.n1r1t1.node-{node}"]["metrics"][metric]["value"] /= 3
    first = nv.judge(planned, records, CRIT)
    assert nc.suspects(first) == ["n02", "n04", "n06"]  # 3 of 8 bad on firm evidence: more than 30 %
    why = nc.in_doubt(first, CRIT)
    assert why.startswith("baseline in doubt: 3 of 8 nodes flagged")
    v = nc.judge(first, {"round": None, "suspects": nc.suspects(first), "controls": [], "in_doubt": why,
                         "planned": []}, {}, CRIT)
    assert {n: s for n, s in v["status"].items() if s != "pass"} == {n: "inconclusive" for n in ("n02", "n04", "n06")}
    assert nv.exit_code(v) == 2 and nv.drain_lines(v) == []


def test_the_screen_flags_on_the_lower_threshold_only_when_a_round_confirms():
    first_without = nv.judge(*_noisy_once(factor=0.88), nv.Criteria(min_effect=0.05))
    first_with = nv.judge(*_noisy_once(factor=0.88), nv.Criteria(min_effect=0.05, confirm=True))
    z = next(r["z"] for r in first_with["rows"] if r["run_id"] == "gemm.tiny.n1r1t1.node-n05")
    assert -CRIT.z_max < z < -CRIT.z_screen  # between the screen and the judgement
    assert first_without["status"]["n05"] == "pass"
    assert first_with["status"]["n05"] == "suspect" and first_with["suspects"]["n05"][0].startswith("screen: ")


def test_pairs_slow_with_several_partners_point_at_their_common_node():
    planned, records = _campaign(slow_link="n06")
    partner = sorted(n for p in planned if p["kind"] == "pair" and "n06" in p["nodes"] for n in p["nodes"]
                     if n != "n06")[0]
    for p in planned:  # the partner's other pairs slow as well: its alibi for n06 is spoilt
        if p["kind"] == "pair" and partner in p["nodes"] and "n06" not in p["nodes"]:
            for metric in records[p["run_id"]]["metrics"].values():
                metric["value"] /= 8
    without = nv.judge(planned, records, nv.Criteria())
    assert without["bad_links"] == {} and without["status"]["n06"] == "pass"  # the old rule names nobody
    first = nv.judge(planned, records, CRIT)
    assert first["suspects"]["n06"][0].startswith("pairs slow with 3 partners")
    v = nc.judge(first, *_round(first, slow_link=("n06",)), CRIT)
    assert v["status"]["n06"] == "drain" and list(v["bad_links"]) == ["n06"]


def test_controls_disagreeing_on_a_test_the_node_was_not_flagged_on_do_not_keep_it_undecided():
    """On the 16-node cluster (clean, shared cores) two nodes flagged on GEMM measured as the controls in
    the round, but the controls' K-Means figures differed by 27 %: the nodes stayed inconclusive and a
    clean cluster exited 2. Only the tests a node was flagged on must be judged to clear it."""
    first = nv.judge(*_noisy_once(), CRIT)  # n05 flagged on GEMM alone
    doc, records = _round(first)
    ctrl = doc["controls"][0]
    records[f"stream.tiny.n1r1t1.node-{ctrl}{nc.SUFFIX}1"]["metrics"]["triad_gbs"]["value"] *= 1.6
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n05"] == "suspect-cleared" and nv.exit_code(v) == 0
    evidence = v["confirmation"]["nodes"]["n05"]["evidence"]
    assert any(e.startswith("confirmation stream.tiny.n1r1t1: not judged (in-doubt: the controls disagree") for e in
               evidence), evidence
    # the same disagreement on the test it was flagged on leaves it undecided
    records[f"gemm.tiny.n1r1t1.node-{ctrl}{nc.SUFFIX}1"]["metrics"]["tflops"]["value"] *= 1.6
    assert nc.judge(first, doc, records, CRIT)["status"]["n05"] == "inconclusive"


def test_two_slow_nodes_of_eight_and_one_noisy_figure_are_judged_not_put_in_doubt():
    """The 8-node cluster, two nodes at 2.5x slower: a third node's one GEMM figure at 0.71x made 3 of 8
    outside the GEMM reference, that test judged nobody, no node passed, no control was left and every
    node was undecided. Now the two (bad in every test) are drained and the noisy one is cleared."""
    planned, records = _campaign()
    planned = [p for p in planned if p["kind"] == "node"]
    for node in ("n03", "n06"):
        for bench, metric in (("stream", "triad_gbs"), ("gemm", "tflops")):
            records[f"{bench}.tiny.n1r1t1.node-{node}"]["metrics"][metric]["value"] /= 2.5
    records["gemm.tiny.n1r1t1.node-n07"]["metrics"]["tflops"]["value"] *= 0.71
    first = nv.judge(planned, records, CRIT)
    assert first["baseline_in_doubt"] == [] and nc.in_doubt(first, CRIT) == ""
    assert nc.suspects(first) == ["n03", "n06", "n07"]
    v = nc.judge(first, *_round(first, slow=("n03", "n06")), CRIT)
    assert {n: s for n, s in v["status"].items() if s != "pass"} == {"n03": "drain", "n06": "drain",
                                                                      "n07": "suspect-cleared"}
    assert nv.exit_code(v) == 1


def test_controls_only_stopped_in_the_first_pass_pass_once_the_round_measured_them():
    # One launch across every node: n03's rank killed, every other node's STREAM stopped with it. The
    # round runs n03 (failing again) beside two of the stopped nodes: n03 is drained, the two controls
    # that ran STREAM ok pass, the other stopped nodes stay inconclusive (never measured on it).
    first = nv.judge(*_stopped_by_n03([n for n in NODES if n != "n03"], "1 of its 2 rank(s) ended with no "
                                      "record, no error and no stop signal from the launch (exit 137)", 137), CRIT)
    doc, records = _round(first, failing=("n03",))
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n03"] == "drain" and len(doc["controls"]) == 2
    assert {n for n, s in v["status"].items() if s == "pass"} == set(doc["controls"])
    assert {n for n, s in v["status"].items() if s == "inconclusive"} == set(NODES) - set(doc["controls"]) - {"n03"}


def test_a_suspect_whose_round_failed_as_its_controls_did_is_not_confirmed():
    # The round's jobs failed on every node alike (on the namespace cluster mpirun found too few slots
    # in the group jobs' allocation): the suspect's failure is the round's, not the node's.
    first = nv.judge(*_noisy_once(), CRIT)
    doc, records = _round(first, failing=tuple(NODES))
    v = nc.judge(first, doc, records, CRIT)
    assert v["status"]["n05"] == "inconclusive" and v["bad_nodes"] == {}
    assert any("the controls' runs of this test failed too" in r["note"] for r in v["confirmation"]["rows"])
