"""Regression verdicts with statistics: is the current campaign's metric different from its
history, and is that real or noise? (docs/history.md, "Regression verdicts")

The unit of replication is the run, not the step: the steps of one run share its node, its
neighbours and its warm caches, so they are not independent samples of the system, and pooling
them calls a busy neighbour a change of the system. Each run gives one summary (its metric's
value: the median over its steps, as the benchmark reports it), taken on a log scale so that
changes are relative. The runs of one campaign share what the campaign had in common (node,
load, time of day), so the model has two levels (one-way random effects, as Kalibera and Jones,
"Rigorous benchmarking in reasonable time", recommend: replicate at every level that varies):

    log(run summary) = system level + campaign effect (variance s_c^2) + run effect (variance s_r^2)

- s_r^2, the run-to-run variance inside a campaign, is pooled from the repeats of every
  campaign, the current ones and the history's (degrees of freedom: runs - campaigns);
- s_c^2, the campaign-to-campaign variance, from the spread of the history's campaign means:
  v_m = var(means), H - 1 degrees of freedom with H history campaigns, estimates
  s_c^2 + s_r^2 mean(1/runs) (the one-way ANOVA). With one history campaign it cannot be
  estimated: the verdict says so, and the noise floor (below) guards against a campaign-wide shift;
- the change d is the difference of the mean log summaries, current - history (campaigns
  weighed alike; a ratio of geometric means: change = exp(d) - 1), its variance
  var(d) = s_c^2 (1/C + 1/H) + s_r^2 (1/N_c + 1/N_h) with C, H campaigns and N_c, N_h runs,
  written as a combination of v_m and s_r^2 and given Satterthwaite's degrees of freedom; a
  t-test gives the p-value and the (1 - alpha) interval of the change (99% at the default
  alpha: the interval leaves out no change exactly when the test rejects it). With the same number of runs in
  every campaign this is exactly a t-test of campaign means (H - 1 degrees of freedom): when
  campaigns vary, more repeats inside a campaign cannot replace more campaigns.

Where one run stands on each side, only its steps are there: the verdict says so and uses a
moving-block bootstrap of the two step series (blocks of n^(1/3) consecutive steps keep their
dependence), never a test that treats steps as independent.

The noise floor: the run-to-run spread on this system, s = sqrt(s_c^2 + s_r^2), is how far one
run lies from the system's level; about 95% of single runs fall within +-2 s. A change smaller
than that (and than `min_change`) is `unchanged` however small its p-value:
floor = max(min_change, exp(2 s) - 1). With one history campaign s_c cannot be measured, so it
is assumed: `campaign_spread` (default 5%: a CPU-burning neighbour moved whole campaigns of tiny
K-Means by -3% to +11% on a 2-core machine whose run-to-run spread was 1 to 3%,
bench/regression_noise.py) enters the test's variance and interval, s_c^2 (1/C + 1/H) with no
degrees of freedom of its own (one history campaign cannot tell a campaign-wide shift from a
change, so the verdict assumes campaigns differ by that much), and the floor takes the larger of
it and s_r (a campaign varies at least as much as its runs, since what shifts a campaign, a
neighbour or another node, shifts every run in it).

Repeats needed to detect a change D (power analysis, two-sided level alpha, power 1 - beta,
normal approximation; D is at least the floor, since nothing smaller is ever a verdict): with H history campaigns and N_h history runs, the next campaign needs

    n = ceil( s_r^2 / ( (ln(1 + D) / (z_{1-alpha/2} + z_{1-beta}))^2 - s_c^2 (1 + 1/H) - s_r^2 / N_h ) )

runs; where the history is too short for any n, n is for two campaigns of n runs each (the next
one and one more of history); none suffices when the campaign-to-campaign spread alone hides D
(more history campaigns are needed, not more repeats). For two new campaigns of n runs each
(no history yet), n = ceil(2 s_r^2 (z_{1-alpha/2} + z_{1-beta})^2 / ln(1 + D)^2). At a few runs
the z quantiles are replaced by Student's t at the test's degrees of freedom (n + N_h - 2, or
H - 1 where campaigns vary), and n is the smallest that satisfies the inequality behind the
formula: (t_{1-alpha/2} + t_{1-beta}) sqrt(var(d)) <= ln(1 + D).

The p-values of one campaign are adjusted together (Benjamini-Hochberg by default,
scipy.stats.false_discovery_control; or Holm), then each metric gets a verdict:

- `regressed` / `improved`: adjusted p < alpha and the change beyond the noise floor, in the
  worse / better direction (the metric's higher_is_better says which is which);
- `unchanged`: otherwise;
- `insufficient data`: no history, values <= 0 (no relative change), or no spread estimate
  (one run on one side and no steps to resample).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

VERDICTS = ("regressed", "improved", "unchanged", "insufficient data")
CORRECTIONS = ("bh", "holm", "none")
ALPHA = 0.01
MIN_CHANGE = 0.05
CAMPAIGN_SPREAD = 0.05  # campaign-to-campaign spread assumed where one history campaign cannot measure it
RESAMPLES = 2000
FLOOR_SPREADS = 2.0  # the floor: changes within +-2 run-to-run spreads (where ~95% of single runs fall)
POWER = 0.8
DETECT = 0.10  # the change `history regress` sizes its repeats for, unless told
MAX_REPEATS = 1000


@dataclass
class Run:
    """One run's contribution: its campaign, its summary (the metric's value) and its steps."""

    campaign: str
    value: float
    steps: list = field(default_factory=list)


@dataclass
class Comparison:
    """One metric's test, before and after the campaign-wide correction."""

    level: str  # "runs" (campaign spread estimated too: "runs+campaigns") or "steps" (one run a side)
    n_current: int  # runs
    n_history: int  # runs
    campaigns_current: int
    campaigns_history: int
    median_current: float | None  # median of the per-run summaries
    median_history: float | None
    change: float | None  # ratio of geometric means of the run summaries - 1
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    effect: float | None  # the change in run-to-run spreads (log scale), + when current is higher
    higher_is_better: bool
    spread_run: float | None = None  # s_r: run-to-run, inside a campaign (log scale ~ relative)
    spread_campaign: float | None = None  # s_c: campaign-to-campaign (None: not estimable)
    floor: float = MIN_CHANGE  # the relative change below which nothing is a change
    detect: float = DETECT
    repeats_needed: int | None = None  # runs the next campaign needs to detect `detect` (None: none suffice)
    note: str = ""
    p_adjusted: float | None = None
    verdict: str = "insufficient data"

    def to_dict(self) -> dict:
        return asdict(self)


def repeats_needed(change: float, spread_run: float, spread_campaign: float = 0.0, history_campaigns: int = 1,
                   history_runs: float | None = None, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """Runs a campaign needs for a two-sided test at `alpha` to detect a relative `change` with
    probability `power` (the formula in the module docstring). `history_runs` None: the history
    is a campaign of as many runs as the current one (two new campaigns). None: no number of
    repeats suffices (the campaign-to-campaign spread alone hides the change)."""
    if change <= 0 or spread_run is None or not math.isfinite(spread_run):
        return None
    from scipy import stats
    hist_camps = max(1, history_campaigns)
    fixed_df = hist_camps - 1 if hist_camps > 1 and spread_campaign else None

    def enough(n: float) -> bool:
        # Student's quantiles at the test's degrees of freedom, not the normal ones: at a few runs
        # the normal formula promises power the t-test does not have.
        h_runs = history_runs if history_runs is not None else n
        df = fixed_df or (n + h_runs - 2 if math.isfinite(n) else math.inf)
        q = float(stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df))
        var = (spread_campaign or 0.0) ** 2 * (1 + 1 / hist_camps) + spread_run ** 2 * (1 / n + 1 / h_runs)
        return q * math.sqrt(var) <= math.log1p(change)

    if history_runs is not None and not enough(math.inf):  # too short a history for any n: size both sides
        return repeats_needed(change, spread_run, spread_campaign, history_campaigns, None, alpha, power)
    n = 2
    while not enough(n):  # doubling, then bisection: a few quantile calls, not one per n
        n *= 2
        if n > MAX_REPEATS:
            return None
    lo = n // 2 if n > 2 else 1
    while n - lo > 1:
        mid = (lo + n) // 2
        lo, n = (lo, mid) if enough(mid) else (mid, n)
    return max(2, n)


def _floor(spread: float | None, min_change: float) -> float:
    return max(min_change, math.expm1(FLOOR_SPREADS * spread)) if spread is not None else min_change


def _summary(run: Run) -> float:
    steps = [x for x in run.steps if x is not None and math.isfinite(x)]
    if run.value is not None and math.isfinite(run.value):
        return float(run.value)
    return float(np.median(steps)) if steps else math.nan


def _groups(runs: list[Run]) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {}
    for r in runs:
        v = _summary(r)
        if math.isfinite(v):
            out.setdefault(r.campaign, []).append(v)
    return {k: np.asarray(v, float) for k, v in out.items()}


def variance_components(current: dict[str, np.ndarray], history: dict[str, np.ndarray]):
    """(s_r^2, its degrees of freedom, v_m, H - 1) of log summaries: v_m is the variance of the H
    history campaigns' means (None with fewer than two), which estimates s_c^2 + s_r^2 / runs."""
    groups = list(current.values()) + list(history.values())
    df_r = sum(len(g) - 1 for g in groups)
    var_r = sum(float(((g - g.mean()) ** 2).sum()) for g in groups) / df_r if df_r else 0.0
    if len(history) < 2:
        return var_r, df_r, None, 0
    means = np.asarray([g.mean() for g in history.values()])
    return var_r, df_r, float(means.var(ddof=1)), len(history) - 1


def _campaign_mean(groups: dict[str, np.ndarray]) -> float:
    """The mean over campaigns of their mean log summary (each campaign weighs the same)."""
    return float(np.mean([g.mean() for g in groups.values()]))


def compare_runs(current: list[Run], history: list[Run], higher_is_better: bool = True, alpha: float = ALPHA,
                 min_change: float = MIN_CHANGE, detect: float = DETECT, confidence: float | None = None,
                 resamples: int = RESAMPLES, seed: int = 0, campaign_spread: float = CAMPAIGN_SPREAD) -> Comparison:
    """The test, effect size, interval, noise floor and repeats needed of one metric (no verdict
    before `decide`). `current` and `history` hold one Run per record. The interval's
    `confidence` is 1 - alpha unless given, so that interval and verdict agree."""
    confidence = 1 - alpha if confidence is None else confidence
    cur_raw, hist_raw = _groups(current), _groups(history)
    n_c, n_h = sum(map(len, cur_raw.values())), sum(map(len, hist_raw.values()))
    med = lambda g: float(np.median(np.concatenate(list(g.values())))) if g else None  # noqa: E731
    out = Comparison("runs", n_c, n_h, len(cur_raw), len(hist_raw), med(cur_raw), med(hist_raw), None, None, None,
                     None, None, bool(higher_is_better), floor=min_change, detect=detect)
    values = [x for g in list(cur_raw.values()) + list(hist_raw.values()) for x in g]
    if any(v <= 0 for v in values):
        out.note = "values <= 0: no relative change"
        return out
    cur = {k: np.log(v) for k, v in cur_raw.items()}
    hist = {k: np.log(v) for k, v in hist_raw.items()}
    var_r, df_r, var_m, df_c = variance_components(cur, hist)
    inv_n = float(np.mean([1.0 / len(g) for g in hist.values()])) if hist else 0.0
    var_c = max(0.0, var_m - var_r * inv_n) if var_m is not None else None
    # An unmeasured campaign level (one history campaign) is assumed: `campaign_spread` in the test,
    # and for the floor at least the run level too (a neighbour shifts every run of a campaign).
    prior_c = math.log1p(campaign_spread) ** 2
    assumed_c = max(var_r, prior_c)
    if df_r or var_c is not None:
        out.spread_run = math.sqrt(var_r) if df_r else None  # one run per campaign: not measured apart
        out.spread_campaign = math.sqrt(var_c) if var_c is not None else None
        out.floor = _floor(math.sqrt(var_r + (var_c if var_c is not None else assumed_c)), min_change)
        out.repeats_needed = repeats_needed(max(detect, out.floor), math.sqrt(var_r),
                                            math.sqrt(var_c if var_c is not None else prior_c),
                                            max(1, len(hist)), n_h or None, alpha)
    if not n_c or not n_h:
        out.note = "no history" if n_c else "no current run"
        return out
    diff = _campaign_mean(cur) - _campaign_mean(hist)
    out.change = math.expm1(diff)
    if n_c == 1 and n_h == 1:
        return _compare_steps(out, current, history, confidence, resamples, seed)
    if df_r == 0 and var_m is None:
        out.note = "one run a side and no spread estimate"
        return out
    runs_only = var_r * (1 / n_c + 1 / n_h)
    if var_m is None:
        # the assumed campaign level is known, not estimated: only the run level brings degrees of freedom
        var_d = runs_only + prior_c * (1 / len(cur) + 1 / len(hist))
        df = var_d ** 2 / (runs_only ** 2 / df_r) if df_r and runs_only else math.inf
        out.note = (f"campaign-to-campaign spread not estimable from one history campaign: the test "
                    f"assumes {campaign_spread:.1%} (campaign_spread), the noise floor "
                    f"{math.expm1(math.sqrt(assumed_c)):.1%} (the larger of that and the run-to-run spread)")
    else:
        # var(d) = s_c^2 (1/C + 1/H) + s_r^2 (1/N_c + 1/N_h) with s_c^2 = v_m - s_r^2 mean(1/n):
        # a combination of the two mean squares, its degrees of freedom Satterthwaite's. With as
        # many runs in every campaign it is v_m (1/C + 1/H), H - 1 degrees of freedom: the campaign
        # is then the unit, as it must be when campaigns differ.
        out.level = "runs+campaigns"
        a = 1 / len(cur) + 1 / len(hist)
        b = (1 / n_c + 1 / n_h) - inv_n * a
        var_d = a * var_m + b * var_r
        terms = [(a * var_m) ** 2 / df_c] + ([(b * var_r) ** 2 / df_r] if df_r else [])
        df = var_d ** 2 / sum(terms) if var_d > 0 and sum(terms) > 0 else df_c
        var_d = max(var_d, runs_only)
    if var_d == 0:  # identical summaries everywhere: any difference is exact
        out.p_value, out.ci_low, out.ci_high = (1.0 if diff == 0 else 0.0), out.change, out.change
        out.effect = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        return out
    from scipy import stats
    t = diff / math.sqrt(var_d)
    out.p_value = float(2 * stats.t.sf(abs(t), df))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(var_d)
    out.ci_low, out.ci_high = math.expm1(diff - half), math.expm1(diff + half)
    spread = math.sqrt(var_r + (var_c or 0.0))
    out.effect = diff / spread if spread else math.copysign(math.inf, diff)
    return out


def block_bootstrap(series: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Moving-block bootstrap: `resamples` series of the same length, each made of blocks of
    ceil(n^(1/3)) consecutive steps starting at random places (Kuensch 1989); returns their medians."""
    n = len(series)
    block = max(1, math.ceil(n ** (1 / 3)))
    starts = rng.integers(0, n - block + 1, size=(resamples, math.ceil(n / block)))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(resamples, -1)[:, :n]
    return np.median(series[idx], axis=1)


def _compare_steps(out: Comparison, current: list[Run], history: list[Run], confidence: float, resamples: int,
                   seed: int) -> Comparison:
    """One run a side: the medians of the two step series, resampled in blocks."""
    out.level = "steps"
    cur = np.asarray([x for x in current[0].steps if x is not None and math.isfinite(x) and x > 0], float)
    hist = np.asarray([x for x in history[0].steps if x is not None and math.isfinite(x) and x > 0], float)
    if len(cur) < 2 or len(hist) < 2:
        out.note = "one run a side and too few steps to resample: repeat the runs (config key `repeats`)"
        return out
    out.note = ("steps only (one run a side): moving-block bootstrap of the step series; the run-to-run "
                "spread is unknown, repeat the runs (config key `repeats`)")
    rng = np.random.default_rng(seed)
    diffs = np.log(block_bootstrap(cur, resamples, rng)) - np.log(block_bootstrap(hist, resamples, rng))
    lo, hi = np.percentile(diffs, [50 * (1 - confidence), 50 * (1 + confidence)])
    out.ci_low, out.ci_high = math.expm1(lo), math.expm1(hi)
    tail = min((diffs <= 0).mean(), (diffs >= 0).mean())
    out.p_value = float(min(1.0, 2 * max(tail, 1 / (resamples + 1))))
    spread = float(np.std(diffs))
    out.effect = math.log1p(out.change) / spread if spread else 0.0
    return out


def adjust(p_values: list[float | None], method: str = "bh") -> list[float | None]:
    """Adjusted p-values across one campaign (None stays None): Benjamini-Hochberg, Holm or none."""
    if method not in CORRECTIONS:
        raise ValueError(f"correction {method!r} is not valid; valid: {', '.join(CORRECTIONS)}")
    idx = [i for i, p in enumerate(p_values) if p is not None]
    out: list[float | None] = [None] * len(p_values)
    if not idx:
        return out
    ps = np.asarray([p_values[i] for i in idx], dtype=float)
    if method == "none":
        adj = ps
    elif method == "bh":
        from scipy import stats
        adj = stats.false_discovery_control(ps, method="bh")
    else:  # Holm's step-down: the k-th smallest times (m - k + 1), kept monotone, capped at 1
        order = np.argsort(ps, kind="stable")
        m = len(ps)
        stepped = np.maximum.accumulate((m - np.arange(m)) * ps[order])
        adj = np.empty(m)
        adj[order] = np.minimum(stepped, 1.0)
    for i, a in zip(idx, adj):
        out[i] = float(a)
    return out


def decide(c: Comparison, alpha: float = ALPHA) -> str:
    """The verdict of one comparison from its adjusted p-value (its raw one when not adjusted)
    and its noise floor."""
    p = c.p_adjusted if c.p_adjusted is not None else c.p_value
    if p is None or c.change is None:
        return "insufficient data"
    if p >= alpha or abs(math.log1p(c.change)) < math.log1p(c.floor):
        return "unchanged"
    better = (c.change > 0) == c.higher_is_better
    return "improved" if better else "regressed"


def judge_all(comparisons: list[Comparison], alpha: float = ALPHA, correction: str = "bh") -> list[Comparison]:
    """Adjust the p-values of one campaign together, then give each comparison its verdict."""
    for c, p in zip(comparisons, adjust([c.p_value for c in comparisons], correction)):
        c.p_adjusted = p
        c.verdict = decide(c, alpha)
    return comparisons


def describe(c: Comparison) -> str:
    """'regressed, p = 0.003, +7.1% [CI +5.2%, +9.0%], floor 4.0%, 5 runs vs 10 (runs)'."""
    if c.verdict == "insufficient data":
        text = f"insufficient data ({c.n_current} current, {c.n_history} historical runs"
        return text + (f": {c.note})" if c.note else ")")
    p = c.p_adjusted if c.p_adjusted is not None else c.p_value
    text = f"{c.verdict}, p = {p:.2g}, {c.change:+.1%}"
    if c.ci_low is not None:
        text += f" [CI {c.ci_low:+.1%}, {c.ci_high:+.1%}]"
    text += f", floor {c.floor:.1%}"
    if c.verdict == "unchanged" and abs(math.log1p(c.change)) < math.log1p(c.floor):
        text += " (within the noise floor)"
    return text + f", {c.n_current} vs {c.n_history} runs ({c.level})"
