"""The reference a node's (or a pair's) figure is judged against: the median and spread, in
logarithms, of its peers less the nodes already found bad (node_verdict.judge finds them: slow
in two tests on a lower screening threshold, then again until the set stands still). Otherwise two
slow nodes of eight stay in the median and the spread, and the spread they widen hides them. When
more than `max_outlier_share` of the nodes disagree (outside the reference in a node test, in
every pair of theirs in a pair test) there is no healthy majority to judge by: the baseline itself
is in doubt."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Robust outliers: 0.6745 (x - median) / MAD beyond 3.5 (Iglewicz and Hoaglin).
OUTLIER_Z = 3.5
# The spread's floor: the MAD of the logarithms is taken as at least 1 %, so peers that agree to
# 0.1 % make no outlier of a 2 % gap.
LOG_MAD_FLOOR = 0.01
# More nodes than this outside the reference: no healthy majority, the baseline is in doubt.
# 2 slow nodes of 8 (25 %) are still judged; 3 of 8 are not.
MAX_OUTLIER_SHARE = 0.3


@dataclass(frozen=True)
class Reference:
    median: float  # of the peers' figures
    mad: float  # plain MAD of the peers' figures (reported)
    log_median: float
    log_mad: float  # MAD of the peers' logarithms (the spread z is measured in)
    peers: int


def reference(values: list[float]) -> Reference | None:
    """The reference of these peers' figures (all > 0); None without a figure."""
    if not values:
        return None
    logs = [math.log(v) for v in values]
    log_med = statistics.median(logs)
    med = statistics.median(values)
    return Reference(median=med, mad=statistics.median(abs(v - med) for v in values), log_median=log_med,
                     log_mad=statistics.median(abs(x - log_med) for x in logs), peers=len(values))


def log_z(value: float, log_median: float, log_mad: float, floor: float = LOG_MAD_FLOOR) -> float:
    """The robust z-score of log(value) among the peers' logs: performance varies by factors (a node
    half as fast is as far off as one twice as fast), and on shared cores the spread grows with the
    figure. The MAD is floored (`floor`): identical peers make no outlier of a tiny gap."""
    return 0.6745 * (math.log(value) - log_median) / max(log_mad, floor)


def outside(value: float, ref: Reference, z_max: float, min_effect: float, floor: float = LOG_MAD_FLOOR) -> bool:
    """Whether a figure disagrees with the reference either way: beyond z_max robust z and off by
    min_effect or more (a node much faster than its peers makes a baseline as doubtful as a slow one)."""
    off = abs(math.log(value) - ref.log_median)
    return abs(log_z(value, ref.log_median, ref.log_mad, floor)) > z_max and off >= math.log(1 + min_effect)


def in_doubt(subjects: list[tuple], outliers: list[bool], max_outlier_share: float = MAX_OUTLIER_SHARE,
             excluded: frozenset = frozenset(), firm: frozenset | None = None) -> bool:
    """Whether there is no healthy majority: more than max_outlier_share of the nodes `excluded` from
    the reference (bad in two tests already), or more than that share of the others disagreeing with
    it. A node disagrees when each of its subjects (itself, or its pairs) is an outlier. Counted in
    nodes, not in pairs: a bad link makes all its node's pairs outliers, three of twelve, yet it is one
    node of eight. The two counts are apart so that one noisy figure beside a few bad nodes does not
    put the test in doubt: on the 8-node cluster two nodes at 2.5x slower and one GEMM figure at 0.71x
    made 3 of 8 outside, and the test judged nobody, though the other 6 agreed. `firm`: the excluded
    nodes counted in the first share (all of them by default; a pair test leaves out its suspects
    too, but counts only the bad nodes)."""
    everyone = {n for s in subjects for n in s}
    if len(everyone & set(excluded if firm is None else firm)) > max_outlier_share * len(everyone):
        return True
    nodes = everyone - set(excluded)
    odd = [n for n in nodes if all(out for s, out in zip(subjects, outliers) if n in s and not set(s) & excluded)]
    return len(odd) > max_outlier_share * len(nodes)
