"""Regression statistics (exabench/analysis/regression.py) on seeded synthetic campaigns: runs,
not steps, are the unit (a campaign whose steps all shifted together is not a change beyond its
floor), the false-positive rate of unchanged systems, the power on a real slowdown, the noise
floor, the repeats formula against a simulation, the block bootstrap of one run a side, and the
corrections against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from exabench.analysis import regression as reg


def _campaign(rng, name, runs, level=1.0, run_spread=0.03, campaign_spread=0.0, steps=20, step_spread=0.05, rho=0.8):
    """A campaign of `runs` runs: a campaign-wide shift, a per-run shift, and AR(1) steps (the
    dependence of one run's steps); each run's value is the median of its steps, as benchmarks report."""
    shift = rng.normal(0, campaign_spread) if campaign_spread else 0.0
    out = []
    for _ in range(runs):
        e = np.zeros(steps)
        for i in range(steps):
            e[i] = (rho * e[i - 1] if i else 0.0) + rng.normal(0, step_spread * math.sqrt(1 - rho ** 2))
        t = level * np.exp(shift + rng.normal(0, run_spread) + e)
        out.append(reg.Run(name, float(np.median(t)), list(t)))
    return out


def _judge(cur, hist, higher_is_better=False, campaign_spread=reg.CAMPAIGN_SPREAD, **kw):
    return reg.judge_all([reg.compare_runs(cur, hist, higher_is_better, resamples=500,
                                           campaign_spread=campaign_spread)], **kw)[0]


def test_steps_of_one_shifted_campaign_are_not_a_change_beyond_the_floor():
    # The reported failure: a neighbour slowed every step of one campaign by 8%. Pooled steps call
    # it significant; run by run the shift is within the run-to-run spread of the history.
    rng = np.random.default_rng(5)
    hist = [r for i in range(4) for r in _campaign(rng, f"h{i}", 3, campaign_spread=0.05)]
    cur = _campaign(rng, "c", 3, level=1.08)
    from scipy import stats
    pooled = stats.mannwhitneyu([s for r in cur for s in r.steps], [s for r in hist for s in r.steps]).pvalue
    assert pooled < 1e-4  # what pooling steps did: a "change" at p < 1e-4
    c = _judge(cur, hist)
    assert c.level == "runs+campaigns" and c.spread_campaign > 0
    assert c.verdict == "unchanged", reg.describe(c)


def test_unchanged_systems_are_unchanged_in_at_least_49_of_50_trials():
    verdicts = []
    for seed in range(50):
        rng = np.random.default_rng(seed)
        hist = [r for i in range(3) for r in _campaign(rng, f"h{i}", 4, campaign_spread=0.03)]
        verdicts.append(_judge(_campaign(rng, "c", 4, campaign_spread=0.03), hist).verdict)
    assert verdicts.count("unchanged") >= 49, verdicts


def test_false_positive_rate_of_the_test_is_at_most_alpha():
    # The test alone (no floor), 1000 seeded trials of one system with campaign-to-campaign
    # spread: the share of p < alpha stays near alpha (binomial 99.9% bound), so p is calibrated.
    rng = np.random.default_rng(42)
    trials, hits = 1000, 0
    for _ in range(trials):
        hist = [r for i in range(4) for r in _campaign(rng, f"h{i}", 3, campaign_spread=0.04, steps=4)]
        hits += reg.compare_runs(_campaign(rng, "c", 3, campaign_spread=0.04, steps=4), hist).p_value < reg.ALPHA
    assert hits / trials <= reg.ALPHA + 3.1 * math.sqrt(reg.ALPHA * (1 - reg.ALPHA) / trials)


@pytest.mark.parametrize("seed", range(5))
def test_a_thirty_percent_slowdown_is_regressed_with_an_interval_covering_it(seed):
    rng = np.random.default_rng(100 + seed)
    hist = _campaign(rng, "h", 5)
    c = _judge(_campaign(rng, "c", 5, level=1.3), hist)
    assert c.verdict == "regressed" and c.p_adjusted < 0.01 and c.level == "runs"
    assert c.ci_low < 0.3 < c.ci_high and c.change > c.floor
    assert "not estimable from one history campaign" in c.note
    assert c.effect > 3  # the change, in run-to-run spreads


def test_direction_follows_higher_is_better():
    rng = np.random.default_rng(7)
    base, faster = _campaign(rng, "h", 5, level=100), _campaign(rng, "c", 5, level=130)
    assert _judge(faster, base, higher_is_better=True).verdict == "improved"  # more images/s
    assert _judge(faster, base, higher_is_better=False).verdict == "regressed"  # more seconds


def test_a_significant_change_below_the_noise_floor_is_unchanged():
    # 12% slower with a 6% run-to-run spread: significant with many runs (campaigns known not to
    # differ), but inside +-2 spreads.
    rng = np.random.default_rng(3)
    c = _judge(_campaign(rng, "c", 40, level=1.12, run_spread=0.06), _campaign(rng, "h", 40, run_spread=0.06),
               campaign_spread=0.0)
    assert c.p_value < 1e-6 and c.floor > 0.12 and c.verdict == "unchanged"
    assert "within the noise floor" in reg.describe(c)
    quiet = _judge(_campaign(rng, "c", 10, level=1.12, run_spread=0.01, step_spread=0.005),
                   _campaign(rng, "h", 10, run_spread=0.01, step_spread=0.005), campaign_spread=0.0)
    assert quiet.floor == reg.MIN_CHANGE and quiet.verdict == "regressed"


def test_one_history_campaign_assumes_campaigns_differ_by_the_campaign_spread():
    # What a neighbour does (bench/regression_noise.py): every run of one campaign 8% slower, the
    # runs 1% apart. With one history campaign nothing measures how much campaigns differ: the
    # assumed 5% keeps the shift `unchanged`; assuming none would call it a regression.
    rng = np.random.default_rng(4)
    quiet = {"run_spread": 0.01, "step_spread": 0.005}
    cur, hist = _campaign(rng, "c", 3, level=1.08, **quiet), _campaign(rng, "h", 3, **quiet)
    assert _judge(cur, hist, campaign_spread=0.0).verdict == "regressed"
    shifted = _judge(cur, hist)
    assert shifted.verdict == "unchanged" and "assumes 5.0%" in shifted.note
    # ... while 30% slower is still found, its interval (99% at alpha 0.01) covering 30%.
    slow = _judge(_campaign(rng, "c", 3, level=1.3, **quiet), hist)
    assert slow.verdict == "regressed" and slow.ci_low < 0.3 < slow.ci_high
    assert slow.ci_low > 0.05  # the interval is the test's: it leaves out no change


def test_the_floor_is_two_spreads_of_one_run():
    hist = [reg.Run("h", v) for v in (1.0, 1.1, 0.9, 1.05)]
    cur = [reg.Run("c", v) for v in (1.0, 1.02)]
    c = reg.compare_runs(cur, hist)
    logs = [np.log([1.0, 1.1, 0.9, 1.05]), np.log([1.0, 1.02])]
    s = math.sqrt(sum(((g - g.mean()) ** 2).sum() for g in logs) / (4 - 1 + 2 - 1))
    # One history campaign: the campaign level, unmeasured, is taken as large as the run level
    # (here larger than the assumed campaign_spread).
    assert s > math.log1p(reg.CAMPAIGN_SPREAD)
    assert c.spread_run == pytest.approx(s) and c.floor == pytest.approx(math.expm1(2 * math.sqrt(2) * s))
    assert c.spread_campaign is None and "the larger of that and the run-to-run spread" in c.note


def test_repeats_needed_follows_the_formula_and_keeps_its_power_in_a_simulation():
    from scipy import stats
    s, d = 0.05, 0.10
    normal = math.ceil(2 * s ** 2 * (stats.norm.ppf(0.995) + stats.norm.ppf(0.8)) ** 2 / math.log1p(d) ** 2)
    n = reg.repeats_needed(d, s)
    assert normal == 7 and n >= normal  # Student's t at few runs asks for more than the normal formula

    def enough(k, df):
        q = stats.t.ppf(0.995, df) + stats.t.ppf(0.8, df)
        return q * s * math.sqrt(2 / k) <= math.log1p(d)
    assert enough(n, 2 * n - 2) and not enough(n - 1, 2 * n - 4)
    assert reg.repeats_needed(d, s, history_runs=100) < n  # a long history leaves fewer for the campaign
    assert reg.repeats_needed(d, s, spread_campaign=0.05, history_campaigns=3) is None  # the campaigns hide it
    # The power it promises, by simulation: n runs a side detect a 10% slowdown about 80% of the
    # time (campaigns that do not differ, as the formula was sized).
    rng = np.random.default_rng(9)
    found = sum(reg.compare_runs(_campaign(rng, "c", n, level=1.1, run_spread=s, steps=1, step_spread=0),
                                 _campaign(rng, "h", n, run_spread=s, steps=1, step_spread=0),
                                 campaign_spread=0.0).p_value
                < reg.ALPHA for _ in range(300))
    assert found / 300 >= 0.74


def test_one_run_a_side_uses_a_block_bootstrap_of_the_steps_and_says_so():
    rng = np.random.default_rng(11)
    same = _judge(_campaign(rng, "c", 1, steps=60), _campaign(rng, "h", 1, steps=60))
    assert same.level == "steps" and "steps only" in same.note and same.verdict == "unchanged"
    slow = _judge(_campaign(rng, "c", 1, level=1.3, steps=60), _campaign(rng, "h", 1, steps=60))
    assert slow.verdict == "regressed" and slow.ci_low < 0.3 < slow.ci_high
    # The dependence is kept: strongly autocorrelated steps give a wider interval than shuffled ones.
    rng = np.random.default_rng(12)
    series = np.exp(np.cumsum(rng.normal(0, 0.02, 200)))
    blocked = reg.block_bootstrap(series, 2000, np.random.default_rng(0))
    shuffled = np.median(rng.choice(series, size=(2000, 200)), axis=1)
    assert np.std(blocked) > 1.5 * np.std(shuffled)


def test_insufficient_data_is_named():
    assert _judge([reg.Run("c", 1.5)], []).verdict == "insufficient data"
    text = reg.describe(_judge([reg.Run("c", 1.5)], []))
    assert text == "insufficient data (1 current, 0 historical runs: no history)"
    one_each = _judge([reg.Run("c", 1.5)], [reg.Run("h", 1.0)])  # no steps to resample
    assert one_each.verdict == "insufficient data" and "repeat the runs" in one_each.note
    assert "values <= 0" in _judge([reg.Run("c", 0.0), reg.Run("c", 1.0)], [reg.Run("h", 1.0)] * 2).note


def test_corrections_against_hand_computed_values():
    ps = [0.01, 0.04, 0.03, None, 0.5]
    # Holm: sorted 0.01*4, 0.03*3, 0.04*2 (kept monotone: 0.09), 0.5*1
    assert reg.adjust(ps, "holm") == pytest.approx([0.04, 0.09, 0.09, None, 0.5])
    # BH: 0.01*4/1, min(0.03*4/2, 0.04*4/3), 0.04*4/3, 0.5
    assert reg.adjust(ps, "bh") == pytest.approx([0.04, 0.16 / 3, 0.16 / 3, None, 0.5])
    assert reg.adjust(ps, "none") == ps
    with pytest.raises(ValueError, match="valid: bh, holm, none"):
        reg.adjust(ps, "bonferroni")


def test_describe_names_p_change_interval_floor_and_runs():
    rng = np.random.default_rng(11)
    c = _judge(_campaign(rng, "c", 5, level=70), _campaign(rng, "h", 5, level=100), higher_is_better=True)
    text = reg.describe(c)
    assert text.startswith("regressed, p = ") and "-3" in text and "[CI -" in text
    assert ", floor " in text and "5 vs 5 runs (runs)" in text
