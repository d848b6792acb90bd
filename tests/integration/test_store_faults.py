"""A damaged or busy results store and rejected records (issue 35): every store operation turns a
library error into a message naming the file and what to do; the workflow's ingestion leaves a
corrupt record out and goes on when the store is busy; `exabench ingest` fails when nothing could go in."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from exabench.records import store
from exabench.pipeline import history_report, ingest_campaign
from helpers_compare import RECORDS, env

GOLDEN = [str(RECORDS / "local"), str(RECORDS / "titan")]


def exabench(*args, cwd=None, **more_env):
    return subprocess.run([sys.executable, "-m", "exabench", *map(str, args)], cwd=cwd, env={**env(), **more_env},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "history.duckdb"
    store.ingest(GOLDEN, path)
    return path


@pytest.mark.parametrize("size", [300_000, 1_000_000, 20_000])
@pytest.mark.parametrize("command", [["history"], ["history", "list"], ["history", "compare", "latest~1", "latest"],
                                     ["history", "regress"], ["ingest", RECORDS / "local"]])
def test_a_truncated_store_is_named_by_every_command(good_store, tmp_path, size, command):
    cut = tmp_path / "cut.duckdb"
    shutil.copy(good_store, cut)
    with open(cut, "r+b") as f:
        f.truncate(size)
    res = exabench(command[0], "--store", cut, *command[1:])
    assert res.returncode == 2 and "Traceback" not in res.stderr and "_duckdb" not in res.stderr, res.stderr
    assert f"{cut}: the results store is damaged or not a complete DuckDB file" in res.stderr
    assert "move it aside" in res.stderr


def test_a_folder_as_the_store_is_named(tmp_path):
    for command in (["history"], ["ingest"]):
        res = exabench(*command, "--store", tmp_path, *([RECORDS / "local"] if command == ["ingest"] else []))
        assert res.returncode == 2 and f"{tmp_path}: a folder, not a results store" in res.stderr, res.stderr


def _records(tmp_path: Path) -> dict[str, Path]:
    """Three ways a record file is rejected."""
    text = (RECORDS / "local" / "allreduce.tiny.gloo.n1r2t1.json").read_text()
    rec = json.loads(text)
    out = {"truncated": tmp_path / "a" / "records" / "allreduce.tiny.gloo.n1r2t1.json",
           "foreign schema": tmp_path / "b" / "records" / "allreduce.tiny.gloo.n1r2t1.json",
           "NaN claimed ok": tmp_path / "c" / "records" / "allreduce.tiny.gloo.n1r2t1.json"}
    for p in out.values():
        p.parent.mkdir(parents=True)
    out["truncated"].write_text(text[: len(text) // 2])
    out["foreign schema"].write_text(json.dumps({**rec, "schema": "exabench.result/9"}))
    head = next(iter(rec["metrics"]))
    nan = {**rec, "status": "ok", "metrics": {**rec["metrics"], head: {**rec["metrics"][head], "value": float("nan")}}}
    out["NaN claimed ok"].write_text(json.dumps(nan))
    return out


def test_ingest_fails_when_every_record_is_rejected_and_names_each(tmp_path):
    bad = _records(tmp_path)
    db = tmp_path / "h.duckdb"
    for why, path in bad.items():
        for source in (path, path.parent.parent):  # the file itself, its results folder
            res = exabench("ingest", "--store", db, source)
            assert res.returncode == 2 and "nothing ingested: every record was rejected" in res.stderr, (why, res)
            assert str(path) in res.stderr and "Traceback" not in res.stderr
    res = exabench("ingest", "--store", db, *bad.values(), RECORDS / "local")  # some good: they go in
    assert res.returncode == 0 and "3 corrupt record file(s) left out" in res.stdout, res.stderr


def test_the_ingest_rule_leaves_a_corrupt_record_out_and_the_campaign_goes_on(tmp_path):
    bad = _records(tmp_path)
    good = [str(p) for p in sorted((RECORDS / "local").glob("*.json")) if p.name != "plan.json"]
    receipt = tmp_path / "results" / "local" / "history" / "ingested.json"
    ingest_campaign([*map(str, bad.values()), *good], str(tmp_path / "h.duckdb"), str(receipt), str(tmp_path / "log"))
    done = json.loads(receipt.read_text())
    assert done["added"] == len(good) and len(done["corrupt"]) == 3
    only_bad = tmp_path / "only-bad.json"
    ingest_campaign([str(bad["truncated"])], str(tmp_path / "h.duckdb"), str(only_bad), str(tmp_path / "log2"))
    assert json.loads(only_bad.read_text())["corrupt"]  # reported in the receipt, not a failed rule


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


def test_a_store_held_by_another_process_leaves_the_campaign_going(tmp_path, monkeypatch, good_store):
    db = tmp_path / "h.duckdb"
    shutil.copy(good_store, db)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(store, "LOCK_WAIT_S", 1.0)
        results = tmp_path / "results" / "local"
        receipt = results / "history" / "ingested.json"
        good = [str(p) for p in sorted((RECORDS / "local").glob("*.json")) if p.name != "plan.json"]
        ingest_campaign(good, str(db), str(receipt), str(tmp_path / "ingest.log"))
        done = json.loads(receipt.read_text())
        assert "in use by another process" in done["not_ingested"] and done["campaigns"] == []
        assert f"exabench ingest {results} --store {db}" in (tmp_path / "ingest.log").read_text()
        out = {k: tmp_path / f"r.{k}" for k in ("csv", "md", "json")}
        from exabench.campaign.site import load_site
        site = load_site(Path(__file__).resolve().parents[2] / "profiles" / "local" / "site.yaml")
        history_report(str(db), str(receipt), site, str(out["csv"]), str(out["md"]), str(out["json"]),
                       str(tmp_path / "h.log"))
        assert "The campaign was not ingested" in out["md"].read_text()
        # No placeholder picture: the picture's index says why there is none.
        [entry] = json.loads(out["json"].read_text())
        assert entry["file"] is None and entry["why"].startswith("The campaign was not ingested")
        assert not (tmp_path / "history.png").exists()
        # A user's query waits (here the 2 s the user asked for, not the default minute), then says why.
        res = exabench("history", "--store", db, **{store.WAIT_VARIABLE: "2"})
        assert res.returncode == 2 and "in use by another process" in res.stderr and "stayed so for 2 s" in res.stderr
        res = exabench("history", "--store", db, **{store.WAIT_VARIABLE: "soon"})
        assert res.returncode == 2 and f"{store.WAIT_VARIABLE}='soon'" in res.stderr and "Traceback" not in res.stderr
    finally:
        holder.kill()
        holder.wait()


FILL = """
import resource, signal, sys
from exabench.records import store
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
from exabench.cli import main
sys.exit(main(["ingest", "--store", sys.argv[1], sys.argv[2]]))
"""


def test_a_write_that_fails_half_way_names_the_store_not_a_rollback(tmp_path):
    db = tmp_path / "h.duckdb"
    store.ingest([RECORDS / "local"], db)
    # no file may grow past 2 kB: the write-ahead log of the other site's records cannot be written
    res = subprocess.run([sys.executable, "-c", FILL, str(db), str(RECORDS / "titan"), "2048"], env=env(),
                         capture_output=True, text=True, timeout=300)
    last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
    assert res.returncode == 2 and "cannot rollback" not in last and "Traceback" not in res.stderr, res.stderr
    assert last.startswith(f"exabench: error: {db}: the results store could not be written: a write failed")
    assert "run `exabench ingest` again" in last
    assert "titan" not in exabench("history", "--store", db).stdout  # all or nothing: the campaign is not there


def test_a_store_this_user_may_not_write_is_not_called_damaged(good_store, tmp_path):
    # An immutable copy (chattr +i): the tests run as root, who ignores mode bits, but not this.
    # DuckDB: 'Cannot open file ...: Operation not permitted', once answered with "damaged ...
    # ingest the campaigns again", which would have a user rebuild a store that is fine.
    fixed = tmp_path / "immutable.duckdb"
    shutil.copy(good_store, fixed)
    if subprocess.run(["chattr", "+i", str(fixed)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (it needs CAP_LINUX_IMMUTABLE on ext4, xfs or btrfs)")
    try:
        res = exabench("ingest", "--store", fixed, RECORDS / "local")
        read = exabench("history", "--store", fixed)
    finally:
        subprocess.run(["chattr", "-i", str(fixed)], check=True)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"{fixed}: the results store is not damaged, but this user may not open it so" in res.stderr
    assert "Operation not permitted" in res.stderr and "ingest the campaigns again" not in res.stderr
    assert read.returncode == 0 and "2 campaign(s)" in read.stdout, read.stderr  # reading it is allowed
