"""A campaign re-archived after a study in the same results folder packs neither the study's table
nor the study's log (the log goes with the output it is the log of)."""

from pathlib import Path

from exabench.analysis.archive import logs_of_kept_outputs


def test_a_studys_log_leaves_with_its_table_and_the_campaigns_own_logs_stay():
    before = {name: Path("/r") / name for name in (
        "tables/summary.md", "tables/study-bnl.md", "tables/study-bnl.csv", "logs/study-bnl.log",
        "logs/aggregate.log", "logs/runs/kmeans.tiny.log", "records/kmeans.tiny.json")}
    kept = {n: p for n, p in before.items() if not n.startswith("tables/study-")}  # the rebuild cut the table
    packed = logs_of_kept_outputs(before, kept)
    assert "logs/study-bnl.log" not in packed
    assert {"logs/aggregate.log", "logs/runs/kmeans.tiny.log", "tables/summary.md"} <= set(packed)


def test_a_study_campaign_keeps_its_studys_log():
    before = {n: Path("/r") / n for n in ("tables/study-bnl.md", "logs/study-bnl.log")}
    assert logs_of_kept_outputs(before, dict(before)) == before
