"""The confirmation round of the paths a user submits by hand (every_node_script, node groups' submit.sh,
then node_check): the first pass drains nothing; its flagged nodes get a round of jobs written beside
a submit script, the verdict waits for their records, then confirms or clears as node_acceptance does."""

from __future__ import annotations

import json
import os

from exabench.analysis import node_verdict as nv
from exabench.analysis import node_confirm_scripts as rounds
from exabench.campaign.plan import Run
from exabench.campaign.site import Layout, load_site
from helpers_node_verdict import NODES, _campaign, _record
from helpers_sites import REPO

TEMPLATE = json.loads((REPO / "tests" / "data" / "nodes" / "kmeans.tiny.float64.n1r1t1.node-c001.json").read_text())

CRIT = nv.Criteria(confirm=True)
TESTS = {"stream": ("triad_gbs", "GB/s", 10.0), "gemm": ("tflops", "TFLOP/s", 0.1)}


def _first(slow_node=None):
    """The every-node job's first pass (node tests only: the script path has no pairs) and the campaign's runs."""
    planned, records = _campaign(slow_node=slow_node)
    planned = [p for p in planned if p["kind"] == "node"]
    runs = [Run(run_id=f"{b}.tiny.n1r1t1", benchmark=b, suite="micro", framework="numpy", preset="tiny", params={},
                layout=Layout(1, 1, 1), timeout_s=120) for b in TESTS]
    return nv.judge(planned, {p["run_id"]: records[p["run_id"]] for p in planned}, CRIT), runs


def _record_round(doc, slow=(), factor=3.0):
    """Each planned run's record file, as a run writes it (a real record's fields), its figure `factor`
    times worse on the `slow` nodes."""
    for p in doc["planned"]:
        metric, unit, base = TESTS[p["benchmark"]]
        value = base * 0.6 / (factor if set(p["nodes"]) & set(slow) else 1)  # the round's own load: 0.6
        short = _record(p["run_id"], p["benchmark"], metric, value, unit)
        with open(p["record"], "w") as f:
            json.dump({**TEMPLATE, **short, "workload": {**TEMPLATE["workload"], "headline": metric}}, f)


def _setup(tmp_path, slow_node="n03"):
    site = load_site(REPO / "profiles" / "local" / "site.yaml")
    (tmp_path / "records" / "nodes").mkdir(parents=True)
    first, runs = _first(slow_node)
    return site, first, runs


def test_a_flagged_node_gets_a_round_to_submit_and_nothing_is_drained_before_it(tmp_path):
    site, first, runs = _setup(tmp_path)
    assert first["status"]["n03"] == "drain"  # slow in both tests: the first pass alone would drain it
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    assert doc["round"] == 1 and doc["suspects"] == ["n03"] and len(doc["controls"]) == 2 and not doc["in_doubt"]
    groups = tmp_path / "nodes" / "groups"
    # each suspect and control alone, both tests each; no pairs on a path whose first pass had none
    assert sorted(p["group"] for p in doc["planned"]) == sorted(
        f"{n}.confirm-1" for n in ["n03", *doc["controls"]] for _ in TESTS)
    assert {p["role"] for p in doc["planned"] if p["group"] == "n03.confirm-1"} == {"suspect"}
    submit = (groups / "confirm-1-submit.sh").read_text()
    assert all(f"{n}.confirm-1.sh" in submit for n in ["n03", *doc["controls"]])
    # no scheduler: the jobs run here, started together so that their load is shared (side by side)
    assert 'else bash "$1" & fi; }' in submit and "\nwait  #" in submit
    assert os.access(groups / "n03.confirm-1.sh", os.X_OK)
    v = rounds.judged(first, doc, CRIT)
    assert v["status"]["n03"] == "suspect" and nv.drain_lines(v) == [] and nv.exit_code(v) == 2
    todo = rounds.pending(doc)
    assert todo.startswith("confirmation round 1 (n03 beside controls") and str(groups / "confirm-1-submit.sh") in todo
    assert v["suspects"]["n03"][-1] == f"to confirm: {todo}"
    # node_check again before the round ran: the same round, not a new one
    assert rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")["round"] == 1


def test_the_round_confirms_a_slow_node_and_drains_it(tmp_path):
    site, first, runs = _setup(tmp_path)
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    _record_round(doc, slow=["n03"])
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    assert rounds.pending(doc) == ""
    v = rounds.judged(first, doc, CRIT)
    assert v["status"]["n03"] == "drain" and v["confirmation"]["nodes"]["n03"]["result"] == "confirmed"
    assert {r["verdict"] for r in v["confirmation"]["rows"]} == {"slow"}  # measured slow, not a failed read
    assert nv.exit_code(v) == 1 and [line.split()[2] for line in nv.drain_lines(v)] == ["nodename=n03"]


def test_the_round_clears_a_node_that_measures_well_beside_the_controls(tmp_path):
    site, first, runs = _setup(tmp_path, slow_node="n05")
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    _record_round(doc)  # n05 as fast as the controls in the round
    v = rounds.judged(first, rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp"), CRIT)
    assert v["status"]["n05"] == "suspect-cleared" and nv.exit_code(v) == 0 and nv.drain_lines(v) == []


def test_a_half_recorded_round_waits_and_a_baseline_in_doubt_renders_no_round(tmp_path):
    site, first, runs = _setup(tmp_path)
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    _record_round({**doc, "planned": doc["planned"][:3]})
    doc = rounds.confirmation(first, CRIT, runs, site, tmp_path, "camp")
    assert "3 of 6 runs recorded" in rounds.pending(doc) and rounds.judged(first, doc, CRIT)["status"]["n03"] == \
        "suspect"
    # three of eight nodes slow: no healthy majority to take controls from; no jobs, every one inconclusive
    planned, records = _campaign()
    planned = [p for p in planned if p["kind"] == "node"]
    for node in NODES[:3]:
        for b, (metric, _, _) in TESTS.items():
            records[f"{b}.tiny.n1r1t1.node-{node}"]["metrics"][metric]["value"] /= 3
    crowded = nv.judge(planned, {p["run_id"]: records[p["run_id"]] for p in planned}, CRIT)
    other = tmp_path / "other"
    (other / "records" / "nodes").mkdir(parents=True)
    doc = rounds.confirmation(crowded, CRIT, runs, site, other, "camp")
    v = rounds.judged(crowded, doc, CRIT)
    # every test's baseline is in doubt: the first pass judges nobody, so there is nothing to confirm
    assert v["status"] == {n: "inconclusive" for n in NODES} and v["baseline_in_doubt"]
    assert nv.exit_code(v) == 2 and doc is None and not (other / "nodes").exists()


def test_node_acceptances_round_leaves_out_pairs_a_campaign_of_single_node_tests_has_none(tmp_path):
    """On the 8-node cluster, a campaign of node tests only: the round asked for pairs with the controls
    and stopped ("'n03..n05.confirm-1' has no run")."""
    from exabench.analysis import node_confirm
    from exabench.campaign import node_jobs
    site = load_site(REPO / "profiles" / "slurm-cluster" / "site.yaml")
    _, runs = _first()
    spec = node_confirm.groups(["n03"], ["n05", "n08"], 1)
    assert any(kind == "pair" for _, _, kind, _ in spec)
    scripts, planned = node_jobs.confirmation_jobs(runs, site, tmp_path, spec, 1, "camp")
    assert sorted(scripts) == ["n03.confirm-1", "n05.confirm-1", "n08.confirm-1"]
    assert len(planned) == 3 * len(runs) and {p["kind"] for p in planned} == {"node"}
    assert all(path.exists() for path in scripts.values())
