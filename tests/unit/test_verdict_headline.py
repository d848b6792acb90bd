"""The acceptance headline says how many runs were judged, and why the others were not."""

from exabench.analysis.acceptance import verdict_headline

WAITING = "no reference yet: to be derived from this site's history (exabench references --from-history)"


def row(run_id: str, verdict: str, detail: str = "") -> dict:
    return {"run_id": run_id, "verdict": verdict, "detail": detail}


def test_an_accepted_campaign_says_how_many_runs_were_judged_and_what_the_others_await():
    rows = [row("a", "pass"), row("b", "pass"), *(row(f"w{i}", "no-reference", WAITING) for i in range(7))]
    assert verdict_headline(rows) == (
        "ACCEPTED: 2 of 9 runs judged, none fails; 7 await references from this machine's history "
        "(`make rerun` twice, then `exabench references --from-history`).")


def test_runs_no_reference_applies_to_are_counted_apart():
    rows = [row("a", "pass"), row("a", "pass"), row("b", "no-reference", "no reference applies")]
    assert verdict_headline(rows) == "ACCEPTED: 1 of 2 runs judged, none fails; 1 has no reference that applies."


def test_nothing_judged_is_not_called_accepted():
    rows = [row("a", "no-reference", WAITING), row("b", "no-reference", "no reference applies")]
    assert verdict_headline(rows).startswith("NOT JUDGED: none of 2 runs has a reference; 1 awaits a reference")


def test_a_failed_campaign_names_its_failing_runs_first():
    rows = [row("a", "fail"), row("b", "pass"), row("c", "no-reference", WAITING)]
    assert verdict_headline(rows).startswith("FAILED: a (1 of 2 judged runs fails; 1 awaits a reference")


def test_accept_check_passes_with_the_same_coverage(tmp_path):
    import pandas as pd

    from exabench.analysis.acceptance import check_verdicts
    rows = [row("a", "pass"), row("b", "no-reference", WAITING)]
    pd.DataFrame(rows).to_csv(tmp_path / "verdicts.csv", index=False)
    assert check_verdicts(str(tmp_path / "verdicts.csv")) == (
        True, "exabench: acceptance: ACCEPTED: 1 of 2 runs judged, none fails; 1 awaits a reference from this "
              "machine's history (`make rerun` twice, then `exabench references --from-history`).")
