"""Sanity checks of training runs: a healthy short run at a high learning rate passes, a
diverging one fails, and "the loss falls" is judged only where the run trains to a target."""

from __future__ import annotations

import math

import pytest

from exabench.benchmarks.base import DIVERGENCE_FACTOR, training_loss_checks
from exabench.benchmarks.image_classification.pytorch import ImageClassificationParams, outcome
from exabench.training.distributed import World

# The healthy H100 run that failed the old "loss falls": ResNet-50 fp32, 30 steps at lr 0.1 without
# warmup, mean loss 6.33 over the first half and 7.05 over the second.
H100_LOSSES = [6.30 + 0.005 * i for i in range(15)] + [7.01 + 0.005 * i for i in range(15)]


def judge(losses, mode="throughput", sums=((1.0, 2.0), (1.0, 2.0))):
    p = ImageClassificationParams(mode=mode, num_classes=1000)
    result = {"step_times": [0.3] * len(losses), "losses": list(losses)}
    if mode == "time_to_accuracy":
        result.update({"accuracy": (0.95, [0.95]), "epochs_run": 3})
    world = World(0, len(sums), 0, len(sums), "single", False)
    out = outcome(p, world, 1, result, 256, 1.2e10, list(sums), {})
    return {c.name: c for c in out.checks}, out


def test_healthy_short_high_lr_throughput_run_passes():
    checks, out = judge(H100_LOSSES)
    assert not out.failed_checks, [c.detail for c in out.failed_checks]
    assert "loss_falls" not in checks  # reported, not judged
    trend = out.info["loss_trend"]
    assert trend["falls"] is False and trend["first_half_mean"] < trend["second_half_mean"]
    assert out.metrics["throughput"].value == pytest.approx(256 / 0.3)


@pytest.mark.parametrize("losses,failing", [
    ([6.9, 7.2, float("nan"), float("nan")], "loss_finite"),
    ([6.9, 7.2, float("inf"), 8.0], "loss_finite"),
    ([6.9, 40.0, 900.0, 2.0e4], "loss_bounded"),  # orders of magnitude: diverged although finite
])
def test_diverging_run_fails(losses, failing):
    checks, out = judge(losses)
    assert not checks[failing].passed
    assert failing in {c.name for c in out.failed_checks}


def test_divergence_bound_is_relative_to_the_chance_loss():
    """A loss that starts below chance (a warm model) may still rise to near chance."""
    checks, _ = training_loss_checks([0.1, 0.5, 3.0, 6.0], classes=1000, convergence=False)
    assert all(c.passed for c in checks)
    checks, _ = training_loss_checks([6.9, 6.9 * DIVERGENCE_FACTOR * 1.01], classes=1000, convergence=False)
    assert not {c.name: c for c in checks}["loss_bounded"].passed


def test_ranks_out_of_sync_fail():
    checks, out = judge(H100_LOSSES, sums=((1.0, 2.0), (1.5, 2.0)))
    assert not checks["weights_in_sync"].passed and checks["gradients_in_sync"].passed


def test_convergence_run_keeps_loss_falls():
    checks, out = judge(H100_LOSSES, mode="time_to_accuracy")
    assert not checks["loss_falls"].passed
    falling = [2.3 - 0.05 * i for i in range(30)]
    checks, out = judge(falling, mode="time_to_accuracy")
    assert checks["loss_falls"].passed and not out.failed_checks


def test_loss_trend_never_judged_in_throughput_mode_even_when_long():
    rising = [6.9 + 0.01 * i for i in range(400)]
    _, out = judge(rising)
    assert not out.failed_checks
    assert math.isclose(out.info["loss_trend"]["steps"], 400)
