"""Campaigns for the results store's tests: the measured default campaign's records as if run again
later, their headline figures scaled (a slowed campaign), ingested as the workflow ingests them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from exabench.records.record import headline_metric

MEASURED = Path(__file__).parent / "data" / "measured" / "local"  # a real `make run` of the default campaign


def stored_campaign(tmp_path: Path, day: int, scale) -> list[str]:
    """The measured default campaign's records as if run `day` days later, each headline figure (and
    its samples) times scale(benchmark); returns their paths."""
    folder = tmp_path / f"campaign{day}"
    folder.mkdir()
    for path in sorted(MEASURED.glob("*.json")):
        rec = json.loads(path.read_text())
        for key in ("start_time", "end_time"):
            rec["provenance"][key] = (datetime.fromisoformat(rec["provenance"][key]) + timedelta(days=day)).isoformat()
        m = rec["metrics"][headline_metric(rec)]
        m["value"] *= scale(rec["benchmark"])
        m["samples"] = [s * scale(rec["benchmark"]) for s in m.get("samples") or []]
        (folder / path.name).write_text(json.dumps(rec))
    return sorted(str(p) for p in folder.glob("*.json"))


def history_of(tmp_path: Path, scales: list, out: Path, first_day: int = 0) -> Path:
    """One campaign per scale, a day apart from `first_day` on, ingested into tmp_path/history.duckdb,
    each followed by the workflow's history_report into `out`; returns the store."""
    from exabench.campaign.site import load_site
    from exabench.pipeline import history_report, ingest_campaign

    site = load_site(Path(__file__).resolve().parents[1] / "profiles" / "local" / "site.yaml")
    db = tmp_path / "history.duckdb"
    for day, scale in enumerate(scales, first_day):
        ingest_campaign(stored_campaign(tmp_path, day, scale), str(db), str(out / "ingested.json"),
                        str(tmp_path / "ingest.log"))
        history_report(str(db), str(out / "ingested.json"), site, str(out / "regressions.csv"),
                       str(out / "regressions.md"), str(out / "pictures.json"), str(tmp_path / "history.log"))
    return db
