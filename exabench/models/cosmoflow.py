"""The CosmoFlow 3D CNN, as the MLCommons reference builds it (Keras Sequential).

n_conv_layers blocks of Conv3D(conv_size * 2^i, kernel, padding same) -> LeakyReLU
-> MaxPool3D(2); Flatten -> Dense(fc1) -> LeakyReLU -> Dropout -> Dense(fc2) ->
LeakyReLU -> Dropout -> Dense(4) -> tanh -> x 1.2. Keras' LeakyReLU slope (0.3)
and Glorot-uniform weights with zero biases keep the reference's initialisation.
At 128^3 x 4 with conv_size 32 and kernel 3: 8,907,556 parameters.
"""

from __future__ import annotations

import torch
from torch import nn

LEAKY_SLOPE = 0.3  # Keras' LeakyReLU default; torch's is 0.01


class CosmoFlow(nn.Module):
    def __init__(
        self,
        sample_size: int = 128,
        channels: int = 4,
        targets: int = 4,
        conv_size: int = 32,
        kernel_size: int = 3,
        n_conv_layers: int = 5,
        fc1_size: int = 128,
        fc2_size: int = 64,
        dropout: float = 0.5,
    ):
        super().__init__()
        if sample_size % (2**n_conv_layers):
            raise ValueError(
                f"sample_size {sample_size} must be divisible by 2^{n_conv_layers} (one 2x pooling per conv layer)"
            )
        layers: list[nn.Module] = []
        c_in = channels
        for i in range(n_conv_layers):
            c_out = conv_size * 2**i
            layers += [nn.Conv3d(c_in, c_out, kernel_size, padding="same"), nn.LeakyReLU(LEAKY_SLOPE), nn.MaxPool3d(2)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        flat = c_in * (sample_size // 2**n_conv_layers) ** 3
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(flat, fc1_size),
            nn.LeakyReLU(LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(fc1_size, fc2_size),
            nn.LeakyReLU(LEAKY_SLOPE),
            nn.Dropout(dropout),
            nn.Linear(fc2_size, targets),
            nn.Tanh(),
        )
        for m in self.modules():
            if isinstance(m, (nn.Conv3d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def l2_penalty(self) -> torch.Tensor:
        """sum of squares of the two hidden Dense kernels: the reference's kernel_regularizer=l2(l2)
        is on those only (not on the conv layers, the output layer or any bias)."""
        return self.head[1].weight.square().sum() + self.head[4].weight.square().sum()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Keras flattens channels-last: permute so the Dense weights see the same order.
        f = self.features(x).permute(0, 2, 3, 4, 1)
        return 1.2 * self.head(f)
