"""The results store: every campaign's records in one DuckDB file per results root
(results/history.duckdb by default), for history, comparisons between selections, regression
verdicts and history-derived references (docs/history.md).

Tables, plain SQL types only, so `duckdb.connect(path).sql("select * from records").df()` or
pandas through DuckDB read it without exabench (JSON columns are JSON text):

- `campaigns`: one row per ingested campaign: `campaign_id` (start time and a hash of its records'
  content hashes), the config's `campaign` name, `site`, `started`/`ended` (UTC, from the
  records), `ingested_at`, `source`, `git_commit`/`git_dirty`, `image_digest`, the system
  description (`system` JSON, `system_fingerprint`, `system_summary`), runs, ok, failed.
- `records`: one row per record version: `record_id` (site/run_id) and `content_hash` (sha256 of
  the canonical JSON) are the key, so ingesting the same record again adds nothing; the
  campaign's columns; `series` (the run id without its repeat suffix: what history compares);
  benchmark, layout, status, params (JSON, and `params_hash`), times, commit, image, system;
  `record` holds the whole record.
- `metrics`: one row per record and metric: value, unit, higher_is_better, precision,
  `is_headline`, and `samples` (DOUBLE[], the per-iteration samples).
- view `samples`: the metrics unnested, one row per sample.

A campaign is the records one ingestion adds for one (campaign name, site): what a Snakemake
campaign (re)ran since the last ingestion. Each is written in one transaction, so a killed
ingestion leaves no partial campaign: the next one adds it whole.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io
import json
import math
import os
import re
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from exabench.errors import ExabenchError
from exabench.records.record import RecordError, check_record, headline_metric, read_record
from exabench.records.system import summary as system_summary

STORE_NAME = "history.duckdb"
DEFAULT_STORE = f"results/{STORE_NAME}"
STORE_VERSION = 1
REPEAT_SUFFIX = re.compile(r"\.rep\d+$")
LOCK_WAIT_S = 60.0  # how long a command waits for another process's hold on the store
WAIT_VARIABLE = "EXABENCH_STORE_WAIT_S"  # a user's own wait (a long ingestion at a centre; a test's short one)

DDL = """
CREATE TABLE IF NOT EXISTS store_meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS campaigns (
    campaign_id VARCHAR PRIMARY KEY, campaign VARCHAR, site VARCHAR, started TIMESTAMP, ended TIMESTAMP,
    ingested_at TIMESTAMP, source VARCHAR, git_commit VARCHAR, git_dirty BOOLEAN, image_digest VARCHAR,
    system_fingerprint VARCHAR, system_summary VARCHAR, system VARCHAR, runs INTEGER, ok INTEGER,
    failed INTEGER);
CREATE TABLE IF NOT EXISTS records (
    record_id VARCHAR, content_hash VARCHAR, campaign_id VARCHAR, campaign VARCHAR, site VARCHAR,
    run_id VARCHAR, series VARCHAR, benchmark VARCHAR, suite VARCHAR, framework VARCHAR, preset VARCHAR,
    repeat INTEGER, status VARCHAR, error VARCHAR, nodes INTEGER, ranks_per_node INTEGER, ranks INTEGER,
    threads_per_rank INTEGER, gpus_per_rank INTEGER, params VARCHAR, params_hash VARCHAR, headline VARCHAR,
    start_time TIMESTAMP, end_time TIMESTAMP, git_commit VARCHAR, git_dirty BOOLEAN, image VARCHAR,
    image_digest VARCHAR, exabench_version VARCHAR, system_fingerprint VARCHAR, system_summary VARCHAR,
    system VARCHAR, source VARCHAR, record VARCHAR,
    PRIMARY KEY (record_id, content_hash));
CREATE TABLE IF NOT EXISTS metrics (
    record_id VARCHAR, content_hash VARCHAR, campaign_id VARCHAR, metric VARCHAR, unit VARCHAR, value DOUBLE,
    higher_is_better BOOLEAN, precision VARCHAR, is_headline BOOLEAN, samples DOUBLE[],
    PRIMARY KEY (record_id, content_hash, metric));
CREATE OR REPLACE VIEW samples AS
    SELECT m.record_id, m.content_hash, m.campaign_id, r.site, r.series, r.benchmark, m.metric, m.unit,
           m.higher_is_better, m.is_headline, unnest(m.samples) AS sample
    FROM metrics m JOIN records r USING (record_id, content_hash);
"""


class StoreError(ExabenchError):
    """A store or ingestion source that cannot be used: names the file and what would do."""


class StoreBusyError(StoreError):
    """Another process (an ingestion, a query) held the store for longer than LOCK_WAIT_S."""


# The system refusing this process the file (its mode, a read-only mount, an immutable file): the
# store is fine and must not be rebuilt; DuckDB words it "Cannot open file ...: <strerror>".
NOT_PERMITTED = ("Permission denied", "Operation not permitted", "Read-only file system")
LOCKED = re.compile(r"\block\b", re.I)  # "Could not set lock on file": a whole word ("blocks" is not)


def _damage_hint(path, exc: Exception) -> str:
    """What an error on the store means and what to do: not permitted, in use, a full disk, or
    damaged (only then is ingesting again the advice)."""
    text = str(exc)
    if any(s in text for s in NOT_PERMITTED):
        return (f"{path}: the results store is not damaged, but this user may not open it so ({text.strip()}): "
                "a query needs read permission, `exabench ingest` write permission on the file and its folder "
                "(check ls -l, lsattr for an immutable file, and a read-only mount); give a store you may use "
                "with --store, or ask its owner")
    if LOCKED.search(text):
        return (f"{path}: the results store is in use by another process, an ingestion or a query ({text.strip()}); "
                "it is not damaged: run again once that has finished")
    if any(s in text for s in ("No space left", "Could not write", "Failed to commit", "File too large")):
        full = "the disk holding it is full" if "No space left" in text else "a write failed"
        return (f"{path}: the results store could not be written: {full} ({text.strip()}); the campaign being "
                "written was not stored (each is all or nothing): free space, then run `exabench ingest` again")
    return (f"{path}: the results store is damaged or not a complete DuckDB file ({text.strip()}); move it "
            f"aside (or restore a copy) and ingest the campaigns again: exabench ingest results/ --store {path}")


@contextlib.contextmanager
def store_errors(path: str | Path):
    """Any DuckDB error of an operation on the store at `path` (a query of a truncated file, a write
    to a full disk) becomes a StoreError naming the file and what to do, not a library traceback."""
    try:
        yield
    except Exception as exc:
        duckdb = sys.modules.get("duckdb")  # not imported: the error is not DuckDB's
        if duckdb is None or not isinstance(exc, duckdb.Error):
            raise
        raise StoreError(_damage_hint(path, exc)) from None


def _check_complete(con, path: Path) -> None:
    """A store cut short (a copy that stopped, a full disk) opens and lists its tables, and fails
    only on the first read of a missing block: its size must hold every block it declares."""
    if Path(f"{path}.wal").exists():  # a write-ahead log replayed at open: its blocks are in memory, not yet in the file
        return
    # Used blocks, not total: DuckDB truncates free blocks off the end of the file but still counts them.
    _, _, block_size, _, used_blocks, *_ = con.execute("CALL pragma_database_size()").fetchone()
    total_blocks = int(used_blocks)
    declared = int(block_size) * total_blocks
    size = path.stat().st_size
    if size < declared:
        con.close()
        raise StoreError(_damage_hint(path, f"the file has {size:,} bytes; its {total_blocks} blocks need "
                                            f"at least {declared:,}: truncated"))


@dataclass
class Ingested:
    """What one ingestion did."""

    store: str
    campaigns: list[dict] = field(default_factory=list)  # campaign_id, campaign, site, runs
    added: int = 0
    skipped: int = 0
    corrupt: list[str] = field(default_factory=list)  # files that are not valid records: left out, named

    def line(self) -> str:
        left = (f"; {len(self.corrupt)} corrupt record file(s) left out: {', '.join(self.corrupt)}"
                if self.corrupt else "")
        if not self.campaigns:
            return f"ingest: nothing new ({self.skipped} records already in {self.store})" + left
        names = ", ".join(f"{c['campaign_id']} ({c['campaign']} on {c['site']}, {c['runs']} runs)"
                          for c in self.campaigns)
        return (f"ingest: {self.added} records in {len(self.campaigns)} campaign(s) -> {self.store}: {names}"
                + (f"; {self.skipped} already there" if self.skipped else "") + left)

    @property
    def all_rejected(self) -> bool:
        """Every record given was corrupt: nothing could go in."""
        return bool(self.corrupt) and not self.added and not self.skipped

    def to_dict(self) -> dict:
        return {"store": self.store, "campaigns": self.campaigns, "added": self.added, "skipped": self.skipped,
                "corrupt": self.corrupt}


def content_hash(rec: dict) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def series_of(run_id: str) -> str:
    """The run id without its repeat suffix: repeats of one configuration form one series."""
    return REPEAT_SUFFIX.sub("", run_id)


def _utc(stamp: str | None) -> _dt.datetime | None:
    if not stamp:
        return None
    try:
        t = _dt.datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if t.tzinfo is not None:
        t = t.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return t


def lock_wait_s() -> float:
    """The seconds to wait for a store another process holds: EXABENCH_STORE_WAIT_S, else LOCK_WAIT_S."""
    raw = os.environ.get(WAIT_VARIABLE, "").strip()
    if not raw:
        return LOCK_WAIT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not math.isfinite(seconds) or seconds < 0:
        raise StoreError(f"environment variable {WAIT_VARIABLE}={raw!r}: not a number of seconds; valid: a "
                         f"number >= 0 (unset: {LOCK_WAIT_S:g})")
    return seconds


def connect(path: str | Path, read_only: bool = False):
    """A DuckDB connection to the store, waiting up to LOCK_WAIT_S for another writer to finish."""
    import duckdb
    path = Path(path)
    if path.is_dir():
        raise StoreError(f"{path}: a folder, not a results store; give the store's file (--store, "
                         f"default {DEFAULT_STORE}) or `results_store:` in the config")
    if read_only and not path.is_file():
        raise StoreError(f"{path}: no results store there; ingest a campaign first "
                         f"(exabench ingest results/<site> --store {path})")
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    wait_s = lock_wait_s()
    deadline = time.monotonic() + wait_s
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as exc:
            if not LOCKED.search(str(exc)):
                raise StoreError(_damage_hint(path, exc)) from None
            if time.monotonic() > deadline:
                raise StoreBusyError(f"{path}: the results store is in use by another process (an ingestion or a "
                                     f"query) and stayed so for {wait_s:g} s ({exc}); run again once it "
                                     "has finished") from None
            time.sleep(0.5)
        except duckdb.Error as exc:
            raise StoreError(f"{path}: not a DuckDB results store ({exc})") from None
    with store_errors(path):
        if path.exists():
            _check_complete(con, path)
        if not read_only:
            con.execute(DDL)
            con.execute("INSERT OR IGNORE INTO store_meta VALUES ('version', ?)", [str(STORE_VERSION)])
    return con


# --- sources: results folders, record files, archives --------------------------------------------

def _records_in_dir(d: Path) -> list[Path]:
    """A campaign's current records under a results root, a results/<site> folder or a records/ folder
    (per-node records and the append-only archive of older versions are left out)."""
    candidates = (sorted((d / "records").glob("*.json")), sorted(d.glob("*.json")),  # a results/<site>, records/
                  sorted(d.glob("*/records/*.json")))  # a results root
    for found in ([p for p in paths if p.name != "plan.json"] for paths in candidates):
        if found:
            return found
    return sorted(p for p in d.glob("*/*.json") if p.name != "plan.json")  # a folder of per-site folders


def _read_or_corrupt(path: Path) -> tuple[str, dict | None]:
    """(where, record), or (problem, None) for a file that is not a valid record: a corrupt record never
    stops an ingestion (the tables show it as a `corrupt` row), it is left out and named."""
    try:
        return str(path), read_record(path)
    except RecordError as exc:
        return str(exc), None


def read_source(item: str | Path) -> list[tuple[str, dict | None]]:
    """(where, record) of every record in a results folder, record file or campaign archive (.tar.gz);
    a corrupt record file gives (its problem, None)."""
    p = Path(item)
    if not p.exists():
        raise StoreError(f"{p}: no such file or folder; give a results folder (results/<site>), record files "
                         "or an archive from `exabench archive` (.tar.gz)")
    if p.is_dir():
        paths = _records_in_dir(p)
        if not paths:
            raise StoreError(f"{p}: no records found (looked for records/*.json, *.json, */records/*.json "
                             "and */*.json)")
        return [_read_or_corrupt(f) for f in paths]
    if p.name.endswith((".tar.gz", ".tgz", ".tar")):
        out = []
        try:
            with tarfile.open(p) as tar:
                for m in sorted(tar.getmembers(), key=lambda m: m.name):
                    if m.isfile() and re.fullmatch(r"records/[^/]+\.json", m.name):
                        where = f"{p}:{m.name}"
                        try:
                            rec = json.load(io.TextIOWrapper(tar.extractfile(m), encoding="utf-8"))
                            check_record(rec, where)
                            out.append((where, rec))
                        except (json.JSONDecodeError, UnicodeDecodeError, RecordError) as exc:
                            out.append((f"{where}: {exc}" if not str(exc).startswith(where) else str(exc), None))
        except tarfile.TarError as exc:
            raise StoreError(f"{p}: not a readable archive ({exc})") from None
        if not out:
            raise StoreError(f"{p}: no records/*.json in the archive")
        return out
    return [_read_or_corrupt(p)]  # left out and named, as in a folder (the ingest rule names each record)


# --- ingestion ---------------------------------------------------------------------------------

def _record_row(rec: dict, chash: str, where: str, campaign_id: str) -> dict:
    prov = rec.get("provenance") or {}
    git = prov.get("git") or {}
    container = prov.get("container") or {}
    system = prov.get("system")
    layout = rec.get("layout") or {}
    params = json.dumps(rec.get("params") or {}, sort_keys=True)
    return {"record_id": f"{rec.get('site')}/{rec['run_id']}", "content_hash": chash, "campaign_id": campaign_id,
            "campaign": rec.get("campaign"), "site": rec.get("site"), "run_id": rec["run_id"],
            "series": series_of(rec["run_id"]), "benchmark": rec["benchmark"], "suite": rec.get("suite"),
            "framework": rec.get("framework"), "preset": rec.get("preset"), "repeat": rec.get("repeat"),
            "status": rec["status"], "error": rec.get("error"), "nodes": layout.get("nodes"),
            "ranks_per_node": layout.get("ranks_per_node"), "ranks": layout.get("ranks"),
            "threads_per_rank": layout.get("threads_per_rank"), "gpus_per_rank": layout.get("gpus_per_rank"),
            "params": params, "params_hash": hashlib.sha256(params.encode()).hexdigest()[:16],
            "headline": headline_metric(rec), "start_time": _utc(prov.get("start_time")),
            "end_time": _utc(prov.get("end_time")), "git_commit": git.get("commit"), "git_dirty": git.get("dirty"),
            "image": container.get("image"), "image_digest": container.get("digest"),
            "exabench_version": prov.get("exabench_version"),
            "system_fingerprint": (system or {}).get("fingerprint"), "system_summary": system_summary(system) or None,
            "system": json.dumps(system, sort_keys=True) if system is not None else None, "source": where,
            "record": json.dumps(rec, sort_keys=True)}


def _metric_rows(rec: dict, chash: str, campaign_id: str) -> list[dict]:
    head = headline_metric(rec)
    rows = []
    for name, m in sorted((rec.get("metrics") or {}).items()):
        samples = [float(s) for s in (m.get("samples") or []) if s is not None]
        rows.append({"record_id": f"{rec.get('site')}/{rec['run_id']}", "content_hash": chash,
                     "campaign_id": campaign_id, "metric": name, "unit": m.get("unit"), "value": m.get("value"),
                     "higher_is_better": m.get("higher_is_better"), "precision": m.get("precision"),
                     "is_headline": name == head, "samples": samples})
    return rows


def _most_common(values):
    values = [v for v in values if v is not None]
    return max(set(values), key=values.count) if values else None


def _campaign_row(campaign_id: str, rows: list[dict], source: str) -> dict:
    starts = [r["start_time"] for r in rows if r["start_time"]]
    ends = [r["end_time"] for r in rows if r["end_time"]]
    fp = _most_common([r["system_fingerprint"] for r in rows])
    system_row = next((r for r in rows if r["system_fingerprint"] == fp), rows[0])
    return {"campaign_id": campaign_id, "campaign": rows[0]["campaign"], "site": rows[0]["site"],
            "started": min(starts) if starts else None, "ended": max(ends) if ends else None,
            "ingested_at": _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None), "source": source,
            "git_commit": _most_common([r["git_commit"] for r in rows]),
            "git_dirty": any(bool(r["git_dirty"]) for r in rows),
            "image_digest": _most_common([r["image_digest"] for r in rows]),
            "system_fingerprint": fp, "system_summary": system_row["system_summary"],
            "system": system_row["system"], "runs": len(rows),
            "ok": sum(r["status"] == "ok" for r in rows), "failed": sum(r["status"] != "ok" for r in rows)}


def _insert(con, table: str, rows: list[dict]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [[r[c] for c in cols] for r in rows])


def _write_campaign(con, campaign: dict, records: list[dict], metrics: list[dict]) -> None:
    """One campaign, all or nothing."""
    import duckdb
    con.begin()
    try:
        _insert(con, "campaigns", [campaign])
        for row in records:
            _insert(con, "records", [row])
        _insert(con, "metrics", metrics)
        con.commit()
    except BaseException:
        try:
            con.rollback()
        except duckdb.Error:  # the failure (a full disk) already ended the transaction: nothing to undo
            pass
        raise


def ingest(sources: list[str | Path], store: str | Path = DEFAULT_STORE) -> Ingested:
    """Add the records of `sources` that the store does not hold yet (same record id and content
    hash), one campaign per (campaign name, site), each in one transaction."""
    found: list[tuple[str, dict]] = []
    for item in sources:
        found += read_source(item)
    con = connect(store)
    with contextlib.closing(con), store_errors(store):
        have = {(a, b) for a, b in con.execute("SELECT record_id, content_hash FROM records").fetchall()}
        result = Ingested(str(store))
        groups: dict[tuple, list[tuple[str, dict, str]]] = {}
        seen = set()
        for where, rec in found:
            if rec is None:
                result.corrupt.append(where)
                continue
            chash = content_hash(rec)
            key = (f"{rec.get('site')}/{rec['run_id']}", chash)
            if key in have or key in seen:
                result.skipped += 1
                continue
            seen.add(key)
            groups.setdefault((rec.get("campaign"), rec.get("site")), []).append((where, rec, chash))
        for (_, _), items in sorted(groups.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            digest = hashlib.sha256("".join(sorted(c for _, _, c in items)).encode()).hexdigest()[:8]
            rows = [_record_row(rec, chash, where, "") for where, rec, chash in items]
            starts = [r["start_time"] for r in rows if r["start_time"]]
            stamp = min(starts).strftime("%Y%m%dT%H%M%S") if starts else "undated"
            campaign_id = f"{stamp}-{digest}"
            for r in rows:
                r["campaign_id"] = campaign_id
            metrics = [m for (_, rec, chash) in items for m in _metric_rows(rec, chash, campaign_id)]
            source = sorted({str(Path(w.split(":")[0]).parent) for w, _, _ in items})[0]
            camp = _campaign_row(campaign_id, rows, source)
            _write_campaign(con, camp, rows, metrics)
            result.campaigns.append({"campaign_id": campaign_id, "campaign": camp["campaign"], "site": camp["site"],
                                     "runs": camp["runs"], "ok": camp["ok"], "failed": camp["failed"]})
            result.added += len(rows)
        return result
