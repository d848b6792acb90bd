"""The two Caffe-era networks of the Stampede2 scaling studies, as Caffe defined them.

CaffeNet is BVLC's reference model (models/bvlc_reference_caffenet): AlexNet with
pooling before normalisation and the two-group convolutions of the original two-GPU
split, 60,965,224 parameters. ConvNet-CIFAR10 is Caffe's `cifar10_quick` network
(examples/cifar10), 145,578 parameters. Caffe pools with ceil rounding; so do these.
"""

from __future__ import annotations

import torch
from torch import nn


class CaffeNet(nn.Module):
    """BVLC reference CaffeNet; an adaptive pool before fc6 lets it take 224 or 227 px."""

    def __init__(self, num_classes: int = 1000, dropout: float = 0.5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=11, stride=4), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, ceil_mode=True), nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75),
            nn.Conv2d(96, 256, kernel_size=5, padding=2, groups=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, ceil_mode=True), nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75),
            nn.Conv2d(256, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, kernel_size=3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1, groups=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, ceil_mode=True),
        )
        self.pool = nn.AdaptiveMaxPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class ConvNetCIFAR10(nn.Module):
    """Caffe's cifar10_quick: three 5x5 convolutions (32, 32, 64), two dense layers (64, classes)."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=5, padding=2), nn.MaxPool2d(3, stride=2, ceil_mode=True),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.AvgPool2d(3, stride=2, ceil_mode=True),
            nn.Conv2d(32, 64, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.AvgPool2d(3, stride=2, ceil_mode=True),
        )
        # 32 px -> 4x4 after three ceil-mode pools; other sizes are pooled to 4x4 so ip1 keeps its shape.
        self.pool = nn.AdaptiveAvgPool2d((4, 4))
        self.classifier = nn.Sequential(nn.Linear(64 * 4 * 4, 64), nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))
