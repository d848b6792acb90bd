"""Shared fixtures of the comparison, acceptance, archive and report tests: the golden records."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).parent / "data"
RECORDS = DATA / "records"
GOLDEN = DATA / "golden"
PLAN = RECORDS / "local" / "plan.json"


def record_paths(*sites: str) -> list[str]:
    sites = sites or ("local", "titan")
    return sorted(str(p) for s in sites for p in (RECORDS / s).glob("*.json") if p.name != "plan.json")
