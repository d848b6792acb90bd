"""Faults in time: whether a node's (or a link's) samples are unstable beyond what its healthy peers'
are. A node or link that comes and goes (a link throttled 3 s on, 3 s off) is fast in its best
sample and slow in others: judged on its figure alone it passes.

Judged only in tests whose samples repeat one measurement (`best_of`) over a window of seconds
(the run's `window_s` > 0: exabench.benchmarks.timing.sample_window); a handful of samples taken
in under a second says nothing of a fault with a period of seconds.

- The spread of a run's samples is its best sample over its slow quarter: the figure worse than
  which a quarter of the window was spent, each sample weighted by how long it lasted (every
  sample does the same work: 1/rate for a rate, the value for a time). Weighted by time, a link
  throttled for half the window shows the throttled rate there, though its few long throttled
  samples are outnumbered by many short fast ones; one sample a busy core held up is not a quarter
  of the window.
- Unstable: its spread beyond its peers' (the median and MAD of the logarithms of the spreads of
  the same test's subjects, less the nodes found bad, and less the subjects beyond z_screen and
  the factor, again until those stand still: healthy_reference) by more than z_max robust z (MAD
  floored as the figures' is) AND at least `unstable_factor` (2) times the peers' median spread.
  The factor is the floor: on a quiet cluster (spreads of 1.01 to 1.05) nobody is unstable.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from exabench.analysis.node_reference import Reference, log_z, reference

SLOW_SHARE = 0.25  # the share of the window whose figure is compared with the best sample
UNSTABLE_FACTOR = 2.0
MIN_SAMPLES = 4
MAX_ROUNDS = 20


@dataclass(frozen=True)
class Spread:
    best: float
    worst: float
    slow: float  # the slow quarter's figure
    ratio: float  # how many times worse than the best the slow quarter is (>= 1)


def sample_spread(samples: list[float], higher_is_better: bool = True) -> Spread | None:
    """The spread of one run's samples (None with fewer than MIN_SAMPLES)."""
    xs = [float(x) for x in samples if x and x > 0]
    if len(xs) < MIN_SAMPLES:
        return None
    worst_first = sorted(xs, reverse=not higher_is_better)
    weights = [1 / x if higher_is_better else x for x in worst_first]  # each sample's duration, up to a constant
    total, spent, slow = sum(weights), 0.0, worst_first[-1]
    for x, w in zip(worst_first, weights):
        spent += w
        if spent >= SLOW_SHARE * total:
            slow = x
            break
    best = worst_first[-1]
    return Spread(best=best, worst=worst_first[0], slow=slow, ratio=best / slow if higher_is_better else slow / best)


def windowed(rec: dict, best_of: tuple) -> bool:
    """Whether a record's samples are judged for their spread: a best_of benchmark sampled over a window."""
    return rec.get("benchmark") in best_of and float((rec.get("params") or {}).get("window_s") or 0) > 0


def run_spread(rec: dict, metric: str, best_of: tuple) -> Spread | None:
    if not windowed(rec, best_of) or metric not in (rec.get("metrics") or {}):
        return None
    m = rec["metrics"][metric]
    return sample_spread(m.get("samples") or [], bool(m.get("higher_is_better", True)))


# The peers' spreads are judged as their figures are: median and MAD of the logarithms.
SpreadReference = Reference


def spread_reference(ratios: list[float]) -> SpreadReference | None:
    return reference(ratios)


def healthy_reference(ratios: list[float], floor: float, z_screen: float, factor: float) -> SpreadReference | None:
    """The reference of the peers' spreads less those beyond it (z_screen and `factor`), made again until
    they stand still or would be half the peers: a flapping link's pairs, a quarter of a small set's,
    would otherwise widen the MAD that judges them (as node_reference leaves bad nodes out)."""
    kept = list(ratios)
    for _ in range(MAX_ROUNDS):
        ref = spread_reference(kept)
        if ref is None:
            return None
        steady = [r for r in ratios if not unstable(r, ref.median, spread_z(r, ref, ref.log_mad, floor), z_screen,
                                                    factor)]
        if sorted(steady) == sorted(kept) or 2 * len(steady) <= len(ratios):
            break
        kept = steady
    return spread_reference(kept)


def spread_z(ratio: float, ref: SpreadReference, log_mad: float, floor: float) -> float:
    """The robust z of a spread among its peers' (positive: less stable than they are)."""
    return log_z(ratio, ref.log_median, log_mad, floor)


def unstable(ratio: float, ref_median: float, z: float, z_max: float, factor: float) -> bool:
    return z > z_max and ratio >= factor * ref_median


def describe(s: Spread, ref_median: float, z: float, unit: str) -> str:
    return (f"best {s.best:.4g} {unit}, slow quarter {s.slow:.4g}, worst {s.worst:.4g}: spread {s.ratio:.3g}x "
            f"against {ref_median:.3g}x (z = {z:.1f})")
