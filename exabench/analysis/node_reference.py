"""The reference a node's (or a pair's) figure is judged against: the median and spread of its
healthy peers. Outliers are left out of the reference they are judged against, and that again
until the set stands still: two slow nodes of eight otherwise stay in the median and the spread,
and the spread they widen hides them. When more than `max_outlier_share` of the nodes disagree
(outside the reference in a node test, in every pair of theirs in a pair test) there is no healthy
majority to judge by, and the baseline itself is in doubt."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# The spread's floor: the MAD of the logarithms is taken as at least 1 %, so peers that agree to
# 0.1 % make no outlier of a 2 % gap.
LOG_MAD_FLOOR = 0.01
# More subjects than this outside the reference: no healthy majority, the baseline is in doubt.
# 2 slow nodes of 8 (25 %) are still judged; 3 of 8 are not.
MAX_OUTLIER_SHARE = 0.3
MAX_ROUNDS = 20


@dataclass(frozen=True)
class Reference:
    median: float  # of the healthy peers' figures
    mad: float  # plain MAD of the healthy peers (reported)
    log_median: float
    log_mad: float  # MAD of the healthy peers' logarithms (the spread z is measured in)
    healthy: int  # peers in the reference
    peers: int  # peers with a figure
    outliers: tuple  # per peer (in the order given): outside the reference, either way


def log_z(value: float, log_median: float, log_mad: float, floor: float = LOG_MAD_FLOOR) -> float:
    """The robust z-score of log(value) among the peers' logs: performance varies by factors (a node
    half as fast is as far off as one twice as fast), and on shared cores the spread grows with the
    figure. The MAD is floored (`floor`): identical peers make no outlier of a tiny gap."""
    return 0.6745 * (math.log(value) - log_median) / max(log_mad, floor)


def outside(value: float, log_median: float, log_mad: float, z_max: float, min_effect: float,
            floor: float = LOG_MAD_FLOOR) -> bool:
    """Whether a figure is an outlier either way: beyond z_max robust z and off by min_effect or more.
    Either way, for the reference: a node much faster than its peers is not a healthy baseline either."""
    off = abs(math.log(value) - log_median)
    return abs(log_z(value, log_median, log_mad, floor)) > z_max and off >= math.log(1 + min_effect)


def _tightest_majority(logs: list[float]) -> list[int]:
    """The start: the majority (n // 2 + 1) of the figures that lie closest together. Starting from all
    of them, two slow nodes of eight widen the spread enough to hide themselves, and nothing is ever
    left out; any majority's tightest cluster is healthy as long as most nodes are."""
    order = sorted(range(len(logs)), key=lambda i: logs[i])
    h = len(logs) // 2 + 1
    start = min(range(len(logs) - h + 1), key=lambda k: logs[order[k + h - 1]] - logs[order[k]])
    return sorted(order[start:start + h])


def healthy_reference(values: list[float], z_max: float, min_effect: float,
                      floor: float = LOG_MAD_FLOOR) -> Reference | None:
    """The reference of these peers' figures (all > 0) from the ones that are not outliers: from the
    tightest majority, the peers within the thresholds of its median and MAD, again until the set
    stands still; None without a figure."""
    if not values:
        return None
    logs = [math.log(v) for v in values]
    kept = _tightest_majority(logs)
    for _ in range(MAX_ROUNDS):
        med = statistics.median(logs[i] for i in kept)
        mad = statistics.median(abs(logs[i] - med) for i in kept)
        now = [i for i, v in enumerate(values) if not outside(v, med, mad, z_max, min_effect, floor)]
        if now == kept or len(now) * 2 < len(values):  # stable, or no majority left to take a reference from
            break
        kept = now
    med = statistics.median(logs[i] for i in kept)
    mad = statistics.median(abs(logs[i] - med) for i in kept)
    outliers = tuple(outside(v, med, mad, z_max, min_effect, floor) for v in values)
    plain = [values[i] for i in kept]
    plain_med = statistics.median(plain)
    return Reference(median=plain_med, mad=statistics.median(abs(v - plain_med) for v in plain), log_median=med,
                     log_mad=mad, healthy=len(kept), peers=len(values), outliers=outliers)


def in_doubt(subjects: list[tuple], outliers: tuple, max_outlier_share: float = MAX_OUTLIER_SHARE) -> bool:
    """Whether more than max_outlier_share of the nodes disagree: a node disagrees when each of its
    subjects (itself, or its pairs) is an outlier. Counted in nodes, not in pairs: a bad link makes
    all its node's pairs outliers, three of twelve, yet it is one node of eight."""
    nodes = {n for s in subjects for n in s}
    odd = [n for n in nodes if all(out for s, out in zip(subjects, outliers) if n in s)]
    return len(odd) > max_outlier_share * len(nodes)
