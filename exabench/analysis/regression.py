"""Regression verdicts with statistics: is the current campaign's metric different from its
history, and is that real or noise?

For each metric, the current per-iteration samples (repeats pooled) are compared with the
history's: a two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu) gives the p-value, the
rank-biserial correlation the effect size (+1: every current sample above every historical one),
and a percentile bootstrap (scipy.stats.bootstrap, both samples resampled) the confidence interval
of the relative change of the median, current / history - 1. The p-values of one campaign are
adjusted together (Benjamini-Hochberg by default, scipy.stats.false_discovery_control; or Holm),
then each metric gets a verdict:

- `regressed` / `improved`: adjusted p < alpha and the median moved by at least `min_change` in
  the worse / better direction (the metric's higher_is_better says which is which);
- `unchanged`: otherwise;
- `insufficient data`: too few samples for the test to ever reach alpha (the smallest two-sided
  p-value of the exact test with n and m samples is 2 / C(n + m, n): 5 against 5 is the least
  that can reach 0.01), or no history at all.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

VERDICTS = ("regressed", "improved", "unchanged", "insufficient data")
CORRECTIONS = ("bh", "holm", "none")
ALPHA = 0.01
MIN_CHANGE = 0.05
CONFIDENCE = 0.95
RESAMPLES = 2000


@dataclass
class Comparison:
    """One metric's test, before and after the campaign-wide correction."""

    n_current: int
    n_history: int
    median_current: float | None
    median_history: float | None
    change: float | None  # median current / median history - 1
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    effect: float | None  # rank-biserial correlation, current vs history
    higher_is_better: bool
    p_adjusted: float | None = None
    verdict: str = "insufficient data"

    def to_dict(self) -> dict:
        return asdict(self)


def min_p_value(n: int, m: int) -> float:
    """The smallest two-sided p-value the exact Mann-Whitney test can give with n and m samples."""
    return min(1.0, 2.0 / math.comb(n + m, n)) if n and m else 1.0


def _relative_median_change(current, history, axis=-1):
    return np.median(current, axis=axis) / np.median(history, axis=axis) - 1.0


def compare_samples(current, history, higher_is_better: bool = True, alpha: float = ALPHA,
                    confidence: float = CONFIDENCE, resamples: int = RESAMPLES, seed: int = 0) -> Comparison:
    """The test, effect size and bootstrap interval of one metric (no verdict before `decide`)."""
    from scipy import stats

    cur = np.asarray([x for x in current if x is not None and math.isfinite(x)], dtype=float)
    hist = np.asarray([x for x in history if x is not None and math.isfinite(x)], dtype=float)
    out = Comparison(len(cur), len(hist), float(np.median(cur)) if len(cur) else None,
                     float(np.median(hist)) if len(hist) else None, None, None, None, None, None,
                     bool(higher_is_better))
    if len(cur) and len(hist) and out.median_history:
        out.change = out.median_current / out.median_history - 1.0
    if min_p_value(len(cur), len(hist)) > alpha or not out.median_history:
        return out
    test = stats.mannwhitneyu(cur, hist, alternative="two-sided")
    out.p_value = float(test.pvalue)
    out.effect = float(2.0 * test.statistic / (len(cur) * len(hist)) - 1.0)
    if np.ptp(np.concatenate([cur, hist])) == 0:
        out.ci_low = out.ci_high = 0.0
    else:
        boot = stats.bootstrap((cur, hist), _relative_median_change, vectorized=True, paired=False,
                               confidence_level=confidence, n_resamples=resamples, method="percentile",
                               rng=np.random.default_rng(seed))
        out.ci_low, out.ci_high = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
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


def decide(c: Comparison, alpha: float = ALPHA, min_change: float = MIN_CHANGE) -> str:
    """The verdict of one comparison from its adjusted p-value (its raw one when not adjusted)."""
    p = c.p_adjusted if c.p_adjusted is not None else c.p_value
    if p is None or c.change is None:
        return "insufficient data"
    if p >= alpha or abs(c.change) < min_change:
        return "unchanged"
    better = (c.change > 0) == c.higher_is_better
    return "improved" if better else "regressed"


def judge_all(comparisons: list[Comparison], alpha: float = ALPHA, min_change: float = MIN_CHANGE,
              correction: str = "bh") -> list[Comparison]:
    """Adjust the p-values of one campaign together, then give each comparison its verdict."""
    for c, p in zip(comparisons, adjust([c.p_value for c in comparisons], correction)):
        c.p_adjusted = p
        c.verdict = decide(c, alpha, min_change)
    return comparisons


def describe(c: Comparison) -> str:
    """'regressed, p = 0.003, +7.1% [CI +5.2%, +9.0%]'."""
    if c.verdict == "insufficient data":
        return f"insufficient data ({c.n_current} current, {c.n_history} historical samples)"
    p = c.p_adjusted if c.p_adjusted is not None else c.p_value
    text = f"{c.verdict}, p = {p:.2g}, {c.change:+.1%}"
    if c.ci_low is not None:
        text += f" [CI {c.ci_low:+.1%}, {c.ci_high:+.1%}]"
    return text
