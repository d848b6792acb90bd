"""DeepCAM's loss weights and quality metric, as the reference defines them."""

from __future__ import annotations

import torch

# Class frequencies of the DeepCAM training set (background, tropical cyclone, atmospheric river),
# to the digits the reference uses, and its exponent: w_c = f_c ** -0.125.
CLASS_FREQUENCIES = (0.986267818390377, 0.0004578708870701058, 0.01327431072255291)
WEIGHT_POWER = -0.125


def class_weights(frequencies=CLASS_FREQUENCIES, power: float = WEIGHT_POWER) -> list[float]:
    return [f**power for f in frequencies]


def weighted_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-pixel cross-entropy scaled by the label's class weight, averaged over all pixels
    (the reference's CELoss: reduction 'none' then a plain mean, not a weight-normalised mean)."""
    return torch.nn.functional.cross_entropy(logits, labels, weight=weights, reduction="none").mean()


def iou_per_sample(prediction: torch.Tensor, label: torch.Tensor, classes: int = 3) -> torch.Tensor:
    """Mean IoU over `classes` of each sample (batch, H, W) -> (batch,).

    A class absent from both prediction and label has 0/0 and counts as IoU 1."""
    p = prediction.reshape(prediction.shape[0], -1)
    g = label.reshape(label.shape[0], -1)
    ious = []
    for c in range(classes):
        pc, gc = p == c, g == c
        inter = (pc & gc).sum(dim=1).double()
        union = (pc | gc).sum(dim=1).double()
        ious.append(torch.where(union > 0, inter / union.clamp(min=1), torch.ones_like(union)))
    return torch.stack(ious, dim=1).mean(dim=1)
