"""Scaling formulas: speedup and efficiency against a measured baseline run.

`n` is the number of workers (ranks, or GPUs where ranks drive several), `n0` that
of the smallest measured run of the series. Times are lower-is-better figures
(seconds); throughputs are higher-is-better figures (items/s, TB/s).

Strong scaling (fixed total problem):
    speedup     S = T0 / T            (ideal n / n0)
    efficiency  E = T0 n0 / (T n)     (ideal 1)
Weak scaling (fixed problem per worker, total grows with n):
    efficiency  E = T0 / T            (ideal 1)
    scaled speedup S = E n / n0       (ideal n / n0)
A throughput X counts work done per second whatever the mode, so for both modes
    speedup S = X / X0 and efficiency E = (X / n) / (X0 / n0).
"""

from __future__ import annotations

MODES = ("strong", "weak")

def _check(mode: str, n: float, n0: float) -> None:
    if mode not in MODES:
        raise ValueError(f"scaling mode {mode!r} is not valid; valid: {', '.join(MODES)}")
    if n <= 0 or n0 <= 0:
        raise ValueError(f"worker counts must be positive (n={n}, n0={n0})")


def speedup(value: float, base: float, n: float, n0: float, mode: str, higher_is_better: bool) -> float:
    """Speedup of a run of `n` workers with figure `value` over the baseline (`base`, `n0`)."""
    _check(mode, n, n0)
    if higher_is_better:
        return value / base
    if mode == "strong":
        return base / value
    return (base / value) * n / n0


def efficiency(value: float, base: float, n: float, n0: float, mode: str, higher_is_better: bool) -> float:
    """Parallel efficiency (1 is ideal) of a run against the baseline."""
    _check(mode, n, n0)
    if higher_is_better:
        return (value / n) / (base / n0)
    if mode == "strong":
        return (base * n0) / (value * n)
    return base / value


def ideal_value(base: float, n: float, n0: float, mode: str, higher_is_better: bool) -> float:
    """The figure a perfectly scaling run of `n` workers would reach (the ideal line)."""
    _check(mode, n, n0)
    if higher_is_better:
        return base * n / n0
    return base * n0 / n if mode == "strong" else base


def ideal_speedup(n: float, n0: float) -> float:
    return n / n0
