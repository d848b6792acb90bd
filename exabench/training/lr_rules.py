"""The large-batch learning-rate rules (Goyal et al. 2017) as pure functions, shared by
the PyTorch (exabench.training) and TensorFlow (exabench.training.keras_loop) workloads; no
framework import, so either can use them."""

from __future__ import annotations


def scaled_lr(base_lr: float, global_batch: int, reference_batch: int) -> float:
    """Linear scaling rule: the LR grows with the global batch (Goyal et al.: 0.1 per 256 images)."""
    return base_lr * global_batch / reference_batch


def warmup_factor(step: int, warmup_steps: int, start: float) -> float:
    """Gradual warmup: the LR factor ramps linearly from `start` to 1 over `warmup_steps`, then stays 1."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return start + (1.0 - start) * step / warmup_steps
