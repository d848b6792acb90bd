"""Regression statistics (exabench/analysis/regression.py) on seeded synthetic samples: the
false-positive rate of unchanged workloads, the power on a real slowdown, the corrections against
hand-computed values, and the `insufficient data` floor."""

from __future__ import annotations

import numpy as np
import pytest

from exabench.analysis import regression as reg


def _judge(cur, hist, higher_is_better=False, **kw):
    return reg.judge_all([reg.compare_samples(cur, hist, higher_is_better, resamples=500)], **kw)[0]


def _timings(rng, n, median=1.0, spread=0.05):
    """Run times: log-normal around `median` with a few slow outliers, as a shared node gives."""
    t = rng.lognormal(np.log(median), spread, n)
    t[rng.random(n) < 0.1] *= 1.3
    return t


def test_unchanged_workload_is_unchanged_in_at_least_19_of_20_seeded_trials():
    verdicts = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        verdicts.append(_judge(_timings(rng, 10), _timings(rng, 30)).verdict)
    assert verdicts.count("unchanged") >= 19, verdicts


def test_false_positive_rate_of_the_test_is_at_most_alpha():
    # The test alone (no min-change guard), 2000 seeded trials of identical distributions: the
    # share of p < alpha stays near alpha (binomial 99.9% bound), so the verdicts are calibrated.
    from scipy import stats
    rng = np.random.default_rng(42)
    trials = 2000
    hits = sum(stats.mannwhitneyu(_timings(rng, 10), _timings(rng, 30)).pvalue < reg.ALPHA for _ in range(trials))
    assert hits / trials <= reg.ALPHA + 3.1 * np.sqrt(reg.ALPHA * (1 - reg.ALPHA) / trials)


@pytest.mark.parametrize("seed", range(5))
def test_a_ten_percent_slowdown_is_regressed_with_its_interval(seed):
    rng = np.random.default_rng(100 + seed)
    c = _judge(_timings(rng, 10, median=1.1, spread=0.02), _timings(rng, 30, spread=0.02))
    assert c.verdict == "regressed" and c.p_adjusted < 0.01
    assert c.ci_low < c.change < c.ci_high and c.ci_low > 0.03
    assert c.effect > 0.5  # current times mostly above the historical ones


def test_direction_follows_higher_is_better():
    rng = np.random.default_rng(7)
    faster = rng.normal(110, 1, 10)
    base = rng.normal(100, 1, 20)
    assert _judge(faster, base, higher_is_better=True).verdict == "improved"  # more images/s
    assert _judge(faster, base, higher_is_better=False).verdict == "regressed"  # more seconds


def test_small_significant_change_below_min_change_is_unchanged():
    rng = np.random.default_rng(3)
    c = _judge(rng.normal(1.02, 0.001, 30), rng.normal(1.0, 0.001, 30))
    assert c.p_value < 1e-6 and c.verdict == "unchanged"
    assert _judge(rng.normal(1.02, 0.001, 30), rng.normal(1.0, 0.001, 30), min_change=0.01).verdict == "regressed"


def test_insufficient_data_below_the_smallest_reachable_p():
    assert reg.min_p_value(5, 5) == pytest.approx(2 / 252)
    assert reg.min_p_value(4, 5) > reg.ALPHA
    c = _judge([1.5, 1.6, 1.55, 1.52], [1.0, 1.01, 1.0, 0.99, 1.02])  # 50% slower, but 4 vs 5 samples
    assert c.verdict == "insufficient data" and c.p_value is None
    assert _judge([1.5], []).verdict == "insufficient data"
    assert "insufficient data (1 current, 0 historical samples)" == reg.describe(_judge([1.5], []))


def test_corrections_against_hand_computed_values():
    ps = [0.01, 0.04, 0.03, None, 0.5]
    # Holm: sorted 0.01*4, 0.03*3, 0.04*2 (kept monotone: 0.09), 0.5*1
    assert reg.adjust(ps, "holm") == pytest.approx([0.04, 0.09, 0.09, None, 0.5])
    # BH: 0.01*4/1, min(0.03*4/2, 0.04*4/3), 0.04*4/3, 0.5
    assert reg.adjust(ps, "bh") == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, None, 0.5])
    assert reg.adjust(ps, "none") == ps
    with pytest.raises(ValueError, match="valid: bh, holm, none"):
        reg.adjust(ps, "bonferroni")


def test_correction_across_a_campaign_keeps_family_false_alarms_down():
    # 20 unchanged metrics in one campaign, 20 seeded campaigns: with BH at alpha 0.01 a campaign
    # with any false alarm stays rare.
    alarms = 0
    for seed in range(20):
        rng = np.random.default_rng(1000 + seed)
        comps = [reg.compare_samples(_timings(rng, 10), _timings(rng, 30), False, resamples=200) for _ in range(20)]
        alarms += any(c.verdict != "unchanged" for c in reg.judge_all(comps))
    assert alarms <= 1


def test_describe_names_p_change_and_interval():
    rng = np.random.default_rng(11)
    c = _judge(rng.normal(93, 1, 12), rng.normal(100, 1, 24), higher_is_better=True)
    text = reg.describe(c)
    assert text.startswith("regressed, p = ") and "-7." in text and "[CI -" in text
