"""`exabench history regress` under real machine noise (tests/helpers_noise.py): campaigns of one
tiny K-Means config on this machine, their repeats sized from the observed run-to-run spread. The
same config beside a CPU-burning neighbour process is no change; the same config on a CPU
throttled to 1/1.3 of its speed is `regressed`, slower, with an interval that covers the ~30%
injected.
`python bench/regression_noise.py --trials 3` runs the experiment again and prints the figures."""

from __future__ import annotations

import pytest

from conftest import requires_mpi
from helpers_noise import experiment


@requires_mpi
@pytest.mark.timeout(900)
def test_a_busy_neighbour_is_no_change_and_a_thirty_percent_slowdown_is_found(tmp_path):
    out = experiment(tmp_path)
    noisy, slowed = out["noisy"], out["slowed"]
    print({k: out[k] for k in ("runs", "pilot_spread", "repeats_needed", "injected")})
    for name, row in (("noisy", noisy), ("slowed", slowed)):
        print(name, {k: row[k] for k in ("verdict", "change", "ci_low", "ci_high", "p_adjusted", "floor",
                                         "spread_run", "n_current", "n_history", "level")})
    assert noisy["verdict"] == "unchanged", noisy["printed"]
    assert noisy["n_current"] == noisy["n_history"] == out["runs"] and noisy["level"] == "runs"
    assert slowed["verdict"] == "regressed" and slowed["change"] > 0, slowed["printed"]  # time: up is slower
    assert 0.25 < out["injected"] < 0.4  # the throttle's stopped fraction, measured
    assert slowed["ci_low"] <= out["injected"] <= slowed["ci_high"], (out["injected"], slowed["printed"])
    assert "floor" in slowed["printed"] and f"{slowed['floor']:.1%}" in slowed["printed"]
