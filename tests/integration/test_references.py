"""References that mean something: published per-GPU figures fail a run below 0.8x, multi-node
runs are judged on scaling efficiency against their campaign's 1-node run, runs without a
citable figure are pending a reference from history, and every real site covers its campaign."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from exabench.analysis import acceptance as acc
from exabench.campaign.plan import expand
from exabench.campaign.site import default_config_file
from exabench.config import load_and_validate
from exabench.errors import ConfigError
from helpers_sites import REPO, site

GPU_SITES = ("summit", "perlmutter", "polaris", "frontier")


def record(run_id, nodes, images_per_s, status="ok", bench="resnet50", params=None, rpn=4):
    """A record as the runner writes it (the fields acceptance reads)."""
    workers = nodes * rpn
    return {"run_id": run_id, "benchmark": bench, "site": "x", "status": status, "error": None,
            "params": params or {"precision": "fp16", "batch_size": 32},
            "layout": {"nodes": nodes, "ranks_per_node": rpn, "threads_per_rank": 8, "gpus_per_rank": 1},
            "workload": {"headline": "throughput", "scaling": "weak"},
            "metrics": {} if status != "ok" else {
                "throughput": {"value": images_per_s, "unit": "images/s", "higher_is_better": True},
                "throughput_per_device": {"value": images_per_s / workers, "unit": "images/s",
                                          "higher_is_better": True}}}


def ref(**kw):
    base = dict(benchmark="resnet50", metric="throughput_per_device", value=1000.0, lower=0.2, upper=0.5,
                unit="images/s", params={})
    return acc.Reference(**{**base, **kw})


@pytest.mark.parametrize("per_gpu,verdict", [(790.0, "fail"), (810.0, "pass"), (1000.0, "pass")])
def test_a_run_below_0_8x_a_published_per_gpu_figure_fails(per_gpu, verdict):
    rows = acc.verdicts([record("r.n1", 1, per_gpu, rpn=1)], [ref(params={"nodes": 1})])
    assert acc.run_verdicts(rows)["r.n1"] == verdict


def test_scaling_efficiency_of_multi_node_runs_against_the_1_node_run():
    recs = [record("r.n1", 1, 4000.0), record("r.n2", 2, 7600.0), record("r.n4", 4, 12000.0)]
    eff = ref(metric="scaling_efficiency", value=0.9, lower=0.1, upper=0.2, unit="1")
    rows = {r["run_id"]: r for r in acc.verdicts(recs, [eff])}
    assert rows["r.n2"]["value"] == pytest.approx(0.95) and rows["r.n2"]["verdict"] == "pass"
    assert rows["r.n4"]["value"] == pytest.approx(0.75) and rows["r.n4"]["verdict"] == "fail"
    assert rows["r.n1"]["verdict"] == "no-reference"  # the baseline is not judged on its own efficiency


def test_efficiency_without_an_ok_1_node_run_fails_naming_why():
    recs = [record("r.n1", 1, 0.0, status="failed"), record("r.n2", 2, 7600.0)]
    eff = ref(metric="scaling_efficiency", value=0.9, lower=0.1, upper=0.2, unit="1")
    row = [r for r in acc.verdicts(recs, [eff]) if r["run_id"] == "r.n2"][0]
    assert row["verdict"] == "fail" and "no ok 1-node run of the same series" in row["detail"]


def test_efficiency_baseline_is_the_same_series_only():
    recs = [record("a.n1", 1, 4000.0), record("b.n2", 2, 7600.0, params={"precision": "fp32", "batch_size": 32})]
    [b] = [r for r in acc.with_scaling_efficiency(recs) if r["run_id"] == "b.n2"]
    assert "scaling_efficiency" not in b["metrics"] and "no ok 1-node run" in b["efficiency_missing"]


def test_efficiency_references_from_records_carry_their_spread():
    recs = [record("r.n1.rep0", 1, 4000.0), record("r.n1.rep1", 1, 4000.0),
            record("r.n2.rep0", 2, 7200.0), record("r.n2.rep1", 2, 7600.0)]
    [e] = acc.efficiency_references(recs)
    assert e["metric"] == "scaling_efficiency" and e["params"]["nodes"] == 2
    assert e["value"] == pytest.approx(0.925) and "spread 0.9 .. 0.95" in e["note"]
    assert 0.05 <= e["lower"] < 0.1 and e["upper"] >= 0.05


def test_pending_runs_are_no_reference_saying_the_reference_is_to_be_derived():
    pending = [{"benchmark": "resnet50", "why": "no published figure"}]
    rows = acc.verdicts([record("r.n1", 1, 4000.0)], [], pending=pending)
    assert rows[0]["verdict"] == "no-reference" and "--from-history" in rows[0]["detail"]
    rows = acc.verdicts([record("k.n1", 1, 4000.0, bench="kmeans")], [], pending=pending)
    assert rows[0]["detail"] == "no reference applies"


def test_merge_keeps_published_entries_and_adds_what_from_history_asks(tmp_path):
    published = tmp_path / "references.yaml"
    published.write_text(yaml.safe_dump({"site": "x", "source": "published", "references": [
        {"benchmark": "resnet50", "metric": "throughput_per_device", "params": {"nodes": 1}, "value": 1000,
         "lower": 0.2, "upper": 0.5, "unit": "images/s", "note": "a README.md table"}],
        "from_history": [{"benchmark": "resnet50", "metric": "scaling_efficiency", "why": "none published"},
                         {"benchmark": "kmeans", "why": "none published"}]}))
    recs = [record("r.n1", 1, 4000.0), record("r.n2", 2, 7600.0), record("p.n1", 1, 9.0, bench="pca")]
    derived = acc.derive_references(recs) + acc.efficiency_references(recs)
    data, added = acc.merge_references(published, derived, "x")
    assert [(e["benchmark"], e["metric"]) for e in added] == [("resnet50", "scaling_efficiency")]  # not pca
    assert data["references"][0]["note"] == "a README.md table" and len(data["references"]) == 2
    out = tmp_path / "merged.yaml"
    out.write_text(acc.merged_yaml(data, published, "exabench references --from R --merge P"))
    assert len(acc.load_references(out)) == 2 and acc.load_pending(out)[1]["benchmark"] == "kmeans"
    again, added = acc.merge_references(out, derived, "x")  # re-deriving replaces, never duplicates
    assert len(again["references"]) == 2 and len(added) == 1


def test_cli_references_merge_writes_a_valid_file(tmp_path):
    published = REPO / "profiles" / "summit" / "references.yaml"
    real = json.loads((REPO / "tests/data/records/local/resnet50.tiny.fp32.n1r2t1.rep1.json").read_text())
    recs = tmp_path / "records"
    recs.mkdir()
    for nodes, scale in ((1, 1.0), (2, 1.8)):  # the same run on one and two nodes: efficiency 0.9
        rec = json.loads(json.dumps(real))
        rec["run_id"] = f"resnet50.tiny.fp32.n{nodes}r2t1"
        rec["layout"]["nodes"] = nodes
        rec["metrics"]["throughput"]["value"] *= scale
        (recs / f"{rec['run_id']}.json").write_text(json.dumps(rec))
    out = tmp_path / "references.yaml"
    res = subprocess.run([sys.executable, "-m", "exabench", "references", "--from", str(recs), "--site-name",
                          "summit", "--merge", str(published), "--out", str(out)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "5 published + 3 derived references" in res.stdout, res.stdout  # 2 throughputs, 1 efficiency
    refs = acc.load_references(out)
    [eff] = [r for r in refs if r.metric == "scaling_efficiency" and r.benchmark == "resnet50"]
    assert eff.value == pytest.approx(0.9) and eff.params["nodes"] == 2
    assert sum(r.benchmark == "resnet50" and r.lower == 0.2 for r in refs) == 2  # published kept
    assert acc.load_pending(out) == acc.load_pending(published)
    assert "--merge" in yaml.safe_load(out.read_text())["source"]
    assert acc.references_label(out) == "references.yaml (published, with entries derived from measured runs)"


def default_runs(name):
    config_file = default_config_file(REPO / "profiles" / name / "site.yaml")
    return expand(load_and_validate(REPO / config_file, "config"), site(name), config_file)


@pytest.mark.parametrize("name", GPU_SITES)
def test_every_benchmark_of_the_default_campaign_has_a_reference_or_is_pending(name):
    path = REPO / "profiles" / name / "references.yaml"
    refs, pending = acc.load_references(path), acc.load_pending(path)
    covered = {r.benchmark for r in refs} | {p["benchmark"] for p in pending}
    runs = default_runs(name)
    assert {r.benchmark for r in runs} <= covered
    multi = {r.benchmark for r in runs if r.layout.nodes > 1}
    eff = {r.benchmark for r in refs if r.metric == "scaling_efficiency"} | \
          {p["benchmark"] for p in pending if p.get("metric") == "scaling_efficiency"}
    assert multi - {"allreduce"} <= eff, multi - eff  # busbw is judged as measured, not as an efficiency
    for r in refs:  # published: cited, and no flat wide band
        assert re.search(r"(README\.md|datasheet|seed document \S+\.txt, line \d+)", r.note), r.note
        assert r.lower in (0.2, 1.0), (r.benchmark, r.lower)  # 0.8x a published figure, or an upper bound only
    for p in pending:
        assert p["why"]


def test_the_local_profile_ships_no_speed_only_one_machine_could_meet():
    """The laptop that runs `make run` is unknown: a shipped images/s or seconds would fail a
    healthy machine (or pass a broken one). Shipped references are speed-free (epochs, upper
    bounds); every benchmark of the default campaign is covered, its speed pending from history."""
    path = REPO / "profiles" / "local" / "references.yaml"
    refs, pending = acc.load_references(path), acc.load_pending(path)
    runs = default_runs("local")
    assert {r.benchmark for r in runs} <= {p["benchmark"] for p in pending}
    assert refs and all(r.unit == "epochs" and r.lower == 1.0 for r in refs), [(r.metric, r.unit) for r in refs]
    judged = {r.run_id for r in runs if any(acc.applicable(refs, {**r.to_dict(), "status": "ok"}).values())}
    assert judged == {r.run_id for r in runs if r.params.get("mode") == "time_to_accuracy"}


@pytest.mark.parametrize("name", ("summit", "perlmutter", "polaris"))
def test_published_per_gpu_figures_judge_the_runs_made_as_they_were_measured(name):
    path = REPO / "profiles" / name / "references.yaml"
    refs = [r for r in acc.load_references(path) if r.metric == "throughput_per_device"]
    runs = [r.to_dict() for r in default_runs(name)]
    judged = set()
    for ref_ in refs:
        hits = [p for p in runs if ref_ in acc.applicable(refs, {**p, "status": "ok"}).values()]
        assert len(hits) == 1, (ref_.params, [h["run_id"] for h in hits])
        assert hits[0]["layout"]["ranks_per_node"] == 1 and hits[0]["params"]["batch_size"] == ref_.params["batch_size"]
        judged.add(hits[0]["run_id"])
    assert len(judged) == 2


def test_from_history_derives_efficiency_per_campaign_with_its_spread(tmp_path):
    """Two stored campaigns, each with its 1-node and 2-node run (efficiency 0.9, then 0.8):
    the merged file gains an efficiency reference at their median, its band from their spread."""
    real = json.loads((REPO / "tests/data/records/local/resnet50.tiny.fp32.n1r2t1.rep1.json").read_text())
    store = tmp_path / "history.duckdb"
    for campaign, scale in (("c1", 1.8), ("c2", 1.6)):
        recs = tmp_path / campaign / "records"
        recs.mkdir(parents=True)
        for nodes, factor in ((1, 1.0), (2, scale)):
            rec = json.loads(json.dumps(real))
            rec.update({"run_id": f"resnet50.tiny.fp32.n{nodes}r2t1", "campaign": campaign, "site": "local"})
            rec["layout"]["nodes"] = nodes
            rec["metrics"]["throughput"]["value"] *= factor
            (recs / f"{rec['run_id']}.json").write_text(json.dumps(rec))
        subprocess.run([sys.executable, "-m", "exabench", "ingest", str(recs), "--store", str(store)], check=True,
                       capture_output=True)
    published = tmp_path / "published.yaml"
    published.write_text(yaml.safe_dump({"site": "local", "references": [], "from_history": [
        {"benchmark": "resnet50", "metric": "scaling_efficiency", "why": "none published"}]}))
    out = tmp_path / "references.yaml"
    res = subprocess.run([sys.executable, "-m", "exabench", "references", "--from-history", "--store", str(store),
                          "--site-name", "local", "--any-system", "--merge", str(published), "--out", str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    [eff] = acc.load_references(out)
    assert eff.metric == "scaling_efficiency" and eff.value == pytest.approx(0.85)
    assert "2 run(s) (spread 0.8 .. 0.9" in eff.note
    assert eff.value * (1 - eff.lower) <= 0.81 and eff.value * (1 + eff.upper) >= 0.89


def test_a_merge_into_another_sites_file_is_refused_naming_both(tmp_path, capsys):
    # --site-name local --merge profiles/polaris/references.yaml wrote a file saying `site: polaris`
    # whose derived entries were local's.
    from exabench.cli import main
    published = REPO / "profiles" / "polaris" / "references.yaml"
    out = tmp_path / "references.yaml"
    code = main(["references", "--from", str(REPO / "tests/data/records/local"), "--site-name", "local",
                 "--merge", str(published), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not out.exists(), err
    assert (f"{published}: key 'site' = 'polaris' is another site than --site-name local; valid: 'local' (the "
            "--site-name the entries are derived from), or merge into profiles/local/references.yaml") in err


def test_a_from_history_entry_naming_no_benchmark_is_refused(tmp_path):
    # A typo (resnet5O) matched no derived entry and stayed pending forever, silently.
    published = tmp_path / "references.yaml"
    published.write_text(yaml.safe_dump({"site": "x", "references": [], "from_history": [
        {"benchmark": "kmeans", "why": "none published"}, {"benchmark": "resnet5O", "why": "none published"}]}))
    for call in (lambda: acc.merge_references(published, [], "x"), lambda: acc.load_pending(published)):
        with pytest.raises(ConfigError) as err:
            call()
        text = str(err.value)
        assert text.startswith(f"{published}: key 'from_history[1].benchmark' = 'resnet5O' is not a known "
                               "benchmark; valid: one of ") and "resnet50," in text


# --- references keyed to the configuration they were measured at ----------------------------------

def _efficiency_rows(refs, nodes=(1, 2, 170, 256)):
    # weak scaling at 0.75 on every node count: each multi-node run's efficiency is 0.75
    recs = [record(f"r.n{n}", n, 4000.0 * n * (0.75 if n > 1 else 1.0), rpn=6) for n in nodes]
    return {r["run_id"]: r for r in acc.verdicts(recs, refs)}


def test_a_figure_measured_at_170_nodes_judges_only_the_runs_made_so():
    # Summit's CosmoFlow 72% at 170 nodes judged every multi-node run, 2 to 4,096 nodes.
    eff = ref(metric="scaling_efficiency", value=0.72, unit="1", at={"nodes": 170, "gpus": 1020})
    rows = _efficiency_rows([eff])
    assert rows["r.n170"]["verdict"] == "pass" and "scaled" not in rows["r.n170"]["detail"]
    for run in ("r.n2", "r.n256"):
        assert rows[run]["verdict"] == "no-reference", rows[run]
        assert rows[run]["detail"] == "not judged (reference measured at 170 nodes, 1020 GPUs)"
        assert rows[run]["metric"] == "scaling_efficiency" and rows[run]["value"] == pytest.approx(0.75)
    # 170 nodes with 4 GPUs each is not how it was measured
    assert _efficiency_rows([eff], (1, 170))["r.n170"]["verdict"] == "pass"
    four = {r["run_id"]: r for r in acc.verdicts([record("r.n1", 1, 4000.0), record("r.n170", 170, 4000.0 * 170)],
                                                   [eff])}
    assert four["r.n170"]["detail"].startswith("not judged (reference measured at 170 nodes")


def test_a_scaled_use_judges_its_range_and_says_how_it_was_scaled():
    how = "efficiency falls with nodes, so fewer nodes are held to at least it"
    eff = ref(metric="scaling_efficiency", value=0.72, unit="1", at={"nodes": 170},
              scaled={"nodes": {"min": 2, "max": 128}, "how": how})
    rows = _efficiency_rows([eff])
    assert rows["r.n2"]["verdict"] == "pass"
    assert rows["r.n2"]["detail"].endswith(f"; reference measured at 170 nodes, scaled to 2-128 nodes: {how}")
    assert rows["r.n170"]["verdict"] == "pass" and "scaled" not in rows["r.n170"]["detail"]
    assert rows["r.n256"]["detail"] == "not judged (reference measured at 170 nodes)"


def test_at_takes_a_node_range_and_a_global_batch():
    wide = ref(metric="scaling_efficiency", value=0.72, unit="1", at={"nodes": {"min": 2, "max": 170}})
    rows = _efficiency_rows([wide])
    assert [rows[r]["verdict"] for r in ("r.n2", "r.n170", "r.n256")] == ["pass", "pass", "no-reference"]
    per_gpu = ref(at={"batch": 32 * 4})  # record(): batch_size 32 per rank, 4 ranks a node
    rows = acc.verdicts([record("r.n1", 1, 4000.0), record("r.n2", 2, 8000.0)], [per_gpu])
    assert [r["verdict"] for r in rows] == ["pass", "no-reference"]
    assert rows[1]["detail"] == "not judged (reference measured at global batch 128)"


def test_summits_cosmoflow_efficiency_judges_its_campaigns_runs_up_to_170_nodes_only():
    refs = acc.load_references(REPO / "profiles" / "summit" / "references.yaml")
    runs = [r.to_dict() for r in default_runs("summit") if r.benchmark == "cosmoflow"]
    judged = {p["layout"]["nodes"] for p in runs
              if "scaling_efficiency" in acc.applicable(refs, {**p, "status": "ok"})}
    assert judged == {2, 4, 8, 16, 32, 64, 128, 170}
    [eff] = [r for r in refs if r.benchmark == "cosmoflow"]
    assert [p["layout"]["nodes"] for p in runs if acc.out_of_scope(refs, {**p, "status": "ok"}, {})] == \
        [256, 512, 1024, 2048, 4096] and eff.measured_at() == "170 nodes, 1020 GPUs"


@pytest.mark.parametrize("entry,message", [
    ({"scaled": {"nodes": {"min": 2, "max": 64}, "how": "fewer nodes"}},
     "key 'references[0].scaled' = {'how': 'fewer nodes', 'nodes': {'max': 64, 'min': 2}} scales a figure measured "
     "nowhere; valid: an entry that says where its figure was measured (at: {nodes: N})"),
    ({"at": {"nodes": 170}, "scaled": {"nodes": {"min": 2, "max": 64}}}, "references[0].scaled"),
    ({"at": {"nodes": {"min": 64, "max": 2}}},
     "key 'references[0].at.nodes' = {'max': 2, 'min': 64} is empty; valid: a range whose min is at most its max"),
    ({"at": {"node": 170}}, "references[0].at"),
])
def test_a_bad_at_or_scaled_is_refused_naming_the_key(tmp_path, entry, message):
    path = tmp_path / "references.yaml"
    base = {"benchmark": "cosmoflow", "metric": "scaling_efficiency", "value": 0.72, "lower": 0.2, "upper": 0.5,
            "unit": "1"}
    path.write_text(yaml.safe_dump({"references": [{**base, **entry}]}))
    with pytest.raises(ConfigError) as err:
        acc.load_references(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path)) and message in text, text
    print(text)
