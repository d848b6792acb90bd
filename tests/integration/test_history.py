"""The results store and its queries (exabench/records/store.py, exabench/analysis/history.py):
ingestion keyed by record id + content hash, one transaction per campaign (checked by killing a
real ingestion mid-campaign), archives, a store read by plain DuckDB and pandas, selections, and
three real tiny campaigns through Snakemake (the second and third re-run with --forcerun
run_benchmark, as `make rerun` does; the third's changed param re-renders it), the third deliberately slowed by a parameter that adds
work (more Lloyd iterations), which `exabench history regress` must flag."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

from conftest import requires_mpi
from exabench.analysis import history
from exabench.records import store
from helpers_compare import RECORDS, copy_workflow, env
from helpers_history import history_of
from helpers_png import drawn_in, pixels, shows_data

GOLDEN = [str(RECORDS / "local"), str(RECORDS / "titan")]


def _exabench(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "exabench", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=300)


def _count(path, table):
    con = store.connect(path, read_only=True)
    try:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        con.close()


def test_ingesting_twice_adds_nothing(tmp_path):
    db = tmp_path / "history.duckdb"
    first = store.ingest(GOLDEN, db)
    assert first.added == 18 and [c["site"] for c in first.campaigns] == ["local", "titan"]
    again = store.ingest(GOLDEN + [str(RECORDS)], db)
    assert again.added == 0 and again.campaigns == [] and again.skipped == 36
    assert (_count(db, "campaigns"), _count(db, "records")) == (2, 18)
    # A changed record is a new version: a new campaign of one record.
    rec = json.loads((RECORDS / "local" / "kmeans.tiny.float64.n1r1t1.json").read_text())
    rec["metrics"]["time"]["samples"] = [0.2]
    (tmp_path / f"{rec['run_id']}.json").write_text(json.dumps(rec))  # a record's file is named by its run
    edited = store.ingest([tmp_path / f"{rec['run_id']}.json"], db)
    assert edited.added == 1 and edited.campaigns[0]["runs"] == 1
    assert _count(db, "records") == 19


KILLER = """
import os, signal, sys
from exabench.records import store
real = store._insert
def insert(con, table, rows):
    real(con, table, rows)
    if table == "records" and con.execute("SELECT count(*) FROM records").fetchone()[0] >= 5:
        os.kill(os.getpid(), signal.SIGKILL)   # killed mid-campaign, the transaction open
store._insert = insert
store.ingest(sys.argv[2:], sys.argv[1])
"""


def test_a_killed_ingestion_leaves_no_partial_campaign(tmp_path):
    db = tmp_path / "history.duckdb"
    store.ingest([RECORDS / "titan"], db)  # an earlier campaign, committed
    res = subprocess.run([sys.executable, "-c", KILLER, str(db), str(RECORDS / "local")], env=env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == -9, res.stderr
    assert (_count(db, "campaigns"), _count(db, "records"), _count(db, "metrics")) == (1, 2, 4)
    done = store.ingest([RECORDS / "local"], db)  # the next ingestion adds the campaign whole
    assert done.added == 16 and (_count(db, "campaigns"), _count(db, "records")) == (2, 18)


PLAIN_READER = """
import sys
import duckdb, pandas
con = duckdb.connect(sys.argv[1], read_only=True)
campaigns = con.sql("SELECT campaign_id, site, runs FROM campaigns ORDER BY site").df()
samples = con.sql("SELECT series, metric, sample FROM samples WHERE series = 'resnet50.tiny.fp32.n1r2t1'").df()
assert "exabench" not in sys.modules
print(campaigns.to_json(orient="records"))
print(len(samples), round(samples["sample"].median(), 3))
"""


def test_the_store_reads_with_plain_duckdb_and_pandas(tmp_path):
    db = tmp_path / "history.duckdb"
    store.ingest(GOLDEN, db)
    res = subprocess.run([sys.executable, "-c", PLAIN_READER, str(db)], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [(c["site"], c["runs"]) for c in json.loads(lines[0])] == [("local", 16), ("titan", 2)]
    rep = [json.loads((RECORDS / "local" / f"resnet50.tiny.fp32.n1r2t1.rep{i}.json").read_text()) for i in (1, 2)]
    n = sum(len(r["metrics"][m].get("samples") or []) for r in rep for m in r["metrics"])
    assert lines[1].split()[0] == str(n)


def test_an_archive_is_ingested_and_bad_sources_are_named(tmp_path):
    tar_path = tmp_path / "local.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for p in sorted((RECORDS / "local").glob("*.json")):
            tar.add(p, f"records/{p.name}" if p.name != "plan.json" else "plan.json")
    db = tmp_path / "h.duckdb"
    res = _exabench("ingest", "--store", str(db), str(tar_path))
    assert res.returncode == 0 and "16 records in 1 campaign(s)" in res.stdout, res.stderr
    assert "nothing new" in _exabench("ingest", "--store", str(db), str(RECORDS / "local")).stdout
    bad = _exabench("ingest", "--store", str(db), str(tmp_path / "missing"))
    assert bad.returncode == 2 and "missing: no such file or folder" in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "broken.json").write_text(json.dumps({"schema": "exabench.result/1", "run_id": "x"}))
    bad = _exabench("ingest", "--store", str(db), str(tmp_path / "broken.json"))
    assert bad.returncode == 2 and "broken.json: key" in bad.stderr
    nostore = _exabench("history", "--store", str(tmp_path / "none.duckdb"))
    assert nostore.returncode == 2 and "no results store there" in nostore.stderr


def test_selections(tmp_path):
    db = tmp_path / "history.duckdb"
    store.ingest(GOLDEN, db)
    table = history.campaigns(db)
    ids = list(table["campaign_id"])
    assert history.select(table, "all") == ids
    assert history.select(table, "site:titan") == [table[table.site == "titan"].campaign_id.item()]
    assert history.select(table, ids[0][:12]) == [ids[0]]
    assert history.select(table, "latest~5") == []
    for bad, named in (("colour:red", "valid: latest"), ("since:yesterday", "not a date"), ("last:0", "last:N"),
                       ("nosuchid", "names no campaign")):
        with pytest.raises(history.SelectionError, match=named):
            history.select(table, bad)
    with pytest.raises(history.SelectionError, match="valid: count, median"):
        history.parse_aggregates("median,p150")


# -- three real tiny campaigns through Snakemake --------------------------------------------------

def _config(maxiter: int) -> str:
    return yaml.safe_dump({"campaign": "history-test", "preset": "tiny", "repeats": 1, "timeout_s": 300,
                           "benchmarks": [{"name": "kmeans", "sweep": {"ranks_per_node": [1]},
                                           "params": {"size_per_node": "20000rows", "repeats": 10,
                                                      "maxiter": maxiter}}]})


def _campaign(d, maxiter: int, *extra, triggers=("mtime",)):
    (d / "hist.yaml").write_text(_config(maxiter))
    cmd = [sys.executable, "-m", "snakemake", "--rerun-triggers", *triggers, "--profile", "profiles/local",
           "--configfile", "hist.yaml", "--cores", "2", *extra]
    res = subprocess.run(cmd, cwd=d, env=env(), capture_output=True, text=True, timeout=280)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


@pytest.fixture(scope="module")
def campaigns3(tmp_path_factory):
    d = copy_workflow(tmp_path_factory.mktemp("history"))
    out = {"dir": d, "runs": [_campaign(d, 2)]}
    out["runs"].append(_campaign(d, 2, "--forcerun", "run_benchmark"))
    out["after_two"] = history.campaigns(d / "results" / "history.duckdb")
    out["ingest_again"] = _exabench("ingest", "results/local", cwd=d)
    out["compare"] = _exabench("history", "compare", "latest~1", "latest", "--csv", "cmp.csv", cwd=d)
    # 12x the Lloyd iterations: the changed param re-renders the campaign and re-runs the run, as
    # after a user's edit of the config (forcing `render`, a rule without wildcards, would make it
    # Snakemake's only target: the campaign re-rendered, nothing run).
    out["runs"].append(_campaign(d, 24, "--forcerun", "run_benchmark", triggers=("mtime", "params")))
    return out


@requires_mpi
@pytest.mark.timeout(900)
def test_each_campaign_is_ingested_by_the_workflow(campaigns3):
    d = campaigns3["dir"]
    table = campaigns3["after_two"]
    assert list(table["campaign"]) == ["history-test"] * 2 and list(table["runs"]) == [1, 1]
    assert table["system_fingerprint"].nunique() == 1 and table["system_summary"].str.contains("cores").all()
    assert "history:" in campaigns3["runs"][0].stdout  # the end-of-campaign summary names the store
    receipt = json.loads((d / "results/local/history/ingested.json").read_text())
    assert receipt["added"] == 1 and receipt["store"] == "results/history.duckdb"
    assert "nothing new" in campaigns3["ingest_again"].stdout
    listed = _exabench("history", cwd=d)
    assert listed.returncode == 0 and "3 campaign(s)" in listed.stdout and "history-test" in listed.stdout


@requires_mpi
@pytest.mark.timeout(900)
def test_history_compare_prints_the_table(campaigns3):
    res = campaigns3["compare"]
    assert res.returncode == 0, res.stderr
    assert re.search(r"\| kmeans \| kmeans\.tiny\.float64\.n1r1t\d \| time \| s \| 10 \|", res.stdout), res.stdout
    import pandas as pd
    table = pd.read_csv(campaigns3["dir"] / "cmp.csv")
    assert list(table.columns[:6]) == ["benchmark", "series", "metric", "unit", "A count", "A median"]
    assert table["A count"].tolist() == [10] and table["B count"].tolist() == [10]


@requires_mpi
@pytest.mark.timeout(900)
def test_the_slowed_campaign_is_regressed(campaigns3):
    d = campaigns3["dir"]
    # One run against the last campaign's one run: only steps to go by, resampled in blocks.
    res = _exabench("history", "regress", "--last", "1", "--csv", "regress.csv", "--strict", cwd=d)
    assert res.returncode == 1, res.stdout + res.stderr  # --strict: a regression fails the command
    import pandas as pd
    row = pd.read_csv(d / "regress.csv").iloc[0]
    assert row["verdict"] == "regressed" and row["p_adjusted"] < 0.01, row.to_dict()
    assert row["n_current"] == 1 and row["n_history"] == 1 and row["campaigns_history"] == 1
    assert row["level"] == "steps" and "steps only" in row["note"]
    assert row["change"] > 1.0 and row["ci_low"] > 0.5  # init is fixed work: about 5x the time, not 12x
    assert row["params_differ"] == "maxiter"  # the run id does not name it: the verdict says so
    assert "regressed" in res.stdout and "1 regressed" in res.stdout
    print(row.to_dict())
    # The workflow's own history view of the same campaign, in the HTML report's outputs: against
    # both earlier campaigns, the campaign is the unit (one degree of freedom: a verdict at alpha
    # 0.01 only if the two agree closely, so the verdict itself is not asserted).
    view = pd.read_csv(d / "results/local/history/regressions.csv").iloc[0]
    assert view["campaigns_history"] == 2 and view["level"] == "runs+campaigns" and view["change"] > 1.0
    assert view["verdict"] in ("regressed", "unchanged") and view["floor"] >= 0.05
    assert f"| {view['verdict']} |" in (d / "results/local/history/regressions.md").read_text()
    # The history trend picture of the benchmark: one 500 x 320 px panel per series, the series' line
    # (C0) and on the current campaign the ring and interval in its verdict's colour.
    [entry] = json.loads((d / "results/local/history/pictures.json").read_text())
    assert entry["name"] == "history-kmeans" and entry["file"] == "history-kmeans.png"
    img = pixels(d / "results/local/history/history-kmeans.png")
    assert img.shape[1] == 500 and img.shape[0] == 320 and shows_data(img), img.shape
    colour = {"regressed": "C3", "unchanged": "C1"}[view["verdict"]]
    assert len(drawn_in(img, "C0")) > 100 and len(drawn_in(img, colour, 0.1)) > 20


@requires_mpi
@pytest.mark.timeout(900)
def test_references_from_history_pass_the_history_and_fail_the_slowed_run(campaigns3):
    from exabench.analysis.acceptance import load_references
    d = campaigns3["dir"]
    table = history.campaigns(d / "results" / "history.duckdb")
    slowed = table.iloc[-1]
    until = slowed["started"].isoformat()
    res = _exabench("references", "--from-history", "--site-name", "local", "--select", f"until:{until}",
                    "--out", "refs.yaml", cwd=d)
    assert res.returncode == 0 and "1 references from 2 stored campaign(s)" in res.stdout, res.stdout + res.stderr
    (ref,) = load_references(d / "refs.yaml")
    assert ref.benchmark == "kmeans" and ref.metric == "time" and ref.lower >= 0.05 and ref.upper >= 0.05
    assert "20 samples from 2 campaign(s)" in ref.note and all(c in ref.note for c in table["campaign_id"][:2])
    assert "--from-history" in (d / "refs.yaml").read_text()  # the file says how it was derived
    res = _exabench("accept", "--references", "refs.yaml", "--site-name", "local", "--markdown", "v.md", "--csv",
                    "v.csv", "--junit", "j.xml", "results/local/records", cwd=d)
    assert res.returncode == 0, res.stderr
    import pandas as pd
    verdicts = pd.read_csv(d / "v.csv")
    assert verdicts["verdict"].tolist() == ["fail"]  # the slowed run is outside the history's band
    assert "References: refs.yaml (derived from the results history)" in (d / "v.md").read_text()
    bad = _exabench("references", "--from-history", "--site-name", "nosite", "--out", "x.yaml", cwd=d)
    assert bad.returncode == 2 and "no stored campaign of site 'nosite'" in bad.stderr


def test_a_corrupt_record_is_left_out_and_named_not_a_failed_ingestion(tmp_path):
    # The tables show a corrupt record as a `corrupt` row; the store leaves it out and says so, and
    # the rest of the campaign is ingested (the workflow's ingest rule must not fail on it).
    folder = tmp_path / "local" / "records"
    shutil.copytree(RECORDS / "local", folder)
    good = len([p for p in folder.glob("*.json") if p.name != "plan.json"])
    (folder / "kmeans.tiny.float64.n1r8t1.json").write_text('{"schema": "exabench.result/1", "run_id": ')
    done = store.ingest([tmp_path / "local"], tmp_path / "history.duckdb")
    assert done.added == good and len(done.corrupt) == 1 and "kmeans.tiny.float64.n1r8t1.json" in done.corrupt[0]
    assert "1 corrupt record file(s) left out" in done.line()
    res = _exabench("ingest", "--store", str(tmp_path / "h2.duckdb"), str(tmp_path / "local"), cwd=tmp_path)
    assert res.returncode == 0 and "corrupt record file(s) left out" in res.stdout, res.stdout + res.stderr


def test_a_metric_no_stored_record_has_is_refused_naming_the_valid_ones(tmp_path):
    # `history regress --metric bogus --strict` printed an empty table and exited 0: a CI gate on a
    # misspelt metric passed forever.
    db = tmp_path / "history.duckdb"
    store.ingest(GOLDEN, db)
    for command in (["regress", "--strict"], ["compare", "latest~1", "latest"]):
        res = _exabench("history", command[0], "--store", str(db), "--metric", "bogus", *command[1:])
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stdout + res.stderr
        assert f"--metric bogus: no stored record in {db} has this metric; valid: headline, all, " in res.stderr
        assert "throughput" in res.stderr and "time" in res.stderr
    ok = _exabench("history", "regress", "--store", str(db), "--metric", "time", "--strict")
    assert ok.returncode == 0, ok.stderr


# -- the history trend pictures from a real store ----------------------------------------------------

def test_three_stored_campaigns_draw_each_benchmarks_trend_with_its_verdict(tmp_path):
    # The workflow's history_report on a real store after each of three campaigns of the default
    # config, the third's K-Means three times slower: no trend after one; after three, a picture per
    # benchmark, K-Means' verdict (regressed) and its interval on its current campaign.
    from exabench.analysis.history_pictures import history_panels
    from exabench.analysis.report_page import pictures_html

    out = tmp_path / "results" / "history"
    index = out / "pictures.json"
    history_of(tmp_path, [lambda b: 1.0], out)  # one campaign is no trend: the index says why, no picture
    [entry] = json.loads(index.read_text())
    assert entry["file"] is None and "no series was run by two or more stored campaigns" in entry["why"]
    assert not list(out.glob("*.png"))
    # a second campaign close to the first, then the third with K-Means three times slower
    db = history_of(tmp_path, [lambda b: 1.001, lambda b: 3.0 if b == "kmeans" else 1.0005], out, first_day=1)
    entries = json.loads(index.read_text())
    benchmarks = ["convnet_cifar10", "convnet_cifar10-keras", "kmeans", "resnet50", "resnet50-keras"]
    assert [e["name"] for e in entries] == [f"history-{b}" for b in benchmarks]
    assert sorted(p.name for p in out.glob("*.png")) == sorted(f"history-{b}.png" for b in benchmarks)
    for e in entries:
        assert shows_data(pixels(out / e["file"])), e["file"]
    # The picture's data: each K-Means series over the three campaigns, the last current and regressed,
    # the interval of its change above the history's median; the other benchmarks not regressed.
    import pandas as pd
    verdicts = pd.read_csv(out / "regressions.csv")
    table = history.campaigns(db)
    panels = history_panels(history.samples(db, list(table["campaign_id"])), verdicts, [table["campaign_id"].iloc[-1]])
    kmeans = [p for p in panels if p["benchmark"] == "kmeans"]
    assert len(kmeans) == 3 and all(len(p["values"]) == 3 and p["current"] == [2] for p in kmeans)
    for p in kmeans:
        assert p["verdict"] == "regressed" and p["values"][2] > 2.5 * p["values"][0], p
        assert p["history_median"] < p["interval"][0] < p["values"][2] < p["interval"][1] * 1.5, p
    assert {p["verdict"] for p in panels if p["benchmark"] != "kmeans"} <= {"unchanged", "insufficient data"}
    # The regressed ring and interval (red) are drawn on K-Means' picture, not on the others'.
    red = {e["name"]: len(drawn_in(pixels(out / e["file"]), "C3", 0.1)) for e in entries}
    assert red["history-kmeans"] > 50 and red["history-resnet50"] == 0, red
    # The campaign page shows each of them.
    html = pictures_html([index])
    assert all(f'<figure id="history-{b}">' in html for b in benchmarks)
