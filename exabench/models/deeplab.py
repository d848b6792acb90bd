"""DeepLabv3+ with the modified aligned-Xception encoder, as the MLPerf-HPC DeepCAM
reference builds it (output stride 16, ASPP rates 1/6/12/18, a global-pool branch,
48-channel low-level projection, transposed-convolution decoder to full size).

Differences from the reference, both deliberate:
- the global-pool branch is broadcast to the feature map's own size, where the
  reference tiles it to a hard-coded 48 x 72 (only right for 768 x 1152 inputs);
- `width` divides every channel count and `middle_blocks` sets the middle flow's
  depth (16 in the reference), so a laptop-sized preset runs the same code path.
  width=1, middle_blocks=16 is the reference network (56,454,720 parameters).
Everything else is the reference's, checked against its own code in tests/integration/test_deepcam.py
(tests/golden/deepcam_reference.json): the same logits for the same weights and input,
and the same initial weights for the same seed.
Batch norm is synchronised over `process_group` when one is given (the reference's
batchnorm groups): nn.SyncBatchNorm on GPUs, GroupBatchNorm2d on CPUs; plain
BatchNorm2d otherwise.
"""

from __future__ import annotations

import torch
from torch import nn


class GroupBatchNorm2d(nn.BatchNorm2d):
    """Batch norm whose batch statistics are summed over a process group, for backends where
    nn.SyncBatchNorm does not run (it needs a GPU): differentiable all-reduces of the
    per-channel count, sum and sum of squares, so gradients flow across the group too."""

    def __init__(self, channels: int, process_group):
        super().__init__(channels)
        self.process_group = process_group

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        n = torch.full((1,), x.numel() / x.shape[1], dtype=x.dtype, device=x.device)
        stats = torch.cat([n, x.sum(dim=(0, 2, 3)), (x * x).sum(dim=(0, 2, 3))])
        stats = all_reduce(stats, group=self.process_group)
        count, total, squares = stats[0], stats[1 : 1 + x.shape[1]], stats[1 + x.shape[1] :]
        mean = total / count
        var = squares / count - mean * mean
        with torch.no_grad():
            self.num_batches_tracked += 1
            self.running_mean.mul_(1 - self.momentum).add_(mean.detach(), alpha=self.momentum)
            unbiased = var.detach() * count / max(float(count) - 1, 1.0)
            self.running_var.mul_(1 - self.momentum).add_(unbiased, alpha=self.momentum)
        y = (x - mean[None, :, None, None]) * torch.rsqrt(var[None, :, None, None] + self.eps)
        return y * self.weight[None, :, None, None] + self.bias[None, :, None, None]


def _bn(channels: int, process_group=None) -> nn.Module:
    if process_group is None:
        return nn.BatchNorm2d(channels)
    if torch.cuda.is_available():
        return nn.SyncBatchNorm(channels, process_group=process_group)
    return GroupBatchNorm2d(channels, process_group)


class SeparableConv(nn.Module):
    """Depthwise k x k (dilated, 'same' padding for odd strides) then pointwise 1 x 1, no bias."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, dilation: int = 1):
        super().__init__()
        pad = dilation  # (3 + 2 (dilation - 1) - 1) // 2 for a 3x3 kernel
        self.depthwise = nn.Conv2d(c_in, c_in, 3, stride, pad, dilation, groups=c_in, bias=False)
        self.pointwise = nn.Conv2d(c_in, c_out, 1, bias=False)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


class XceptionBlock(nn.Module):
    def __init__(
        self,
        c_in: int,
        c_out: int,
        reps: int,
        stride: int = 1,
        dilation: int = 1,
        end_with_relu: bool = True,
        grow_first: bool = True,
        is_last: bool = False,
        pg=None,
    ):
        super().__init__()
        self.end_with_relu = end_with_relu
        self.skip = None
        if c_out != c_in or stride != 1:
            self.skip = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), _bn(c_out, pg))
        rep: list[nn.Module] = []
        filters = c_in
        if grow_first:
            rep += [SeparableConv(c_in, c_out, 1, dilation), _bn(c_out, pg), nn.ReLU()]
            filters = c_out
        for _ in range(reps - 1):
            rep += [SeparableConv(filters, filters, 1, dilation), _bn(filters, pg), nn.ReLU()]
        if not grow_first:
            rep += [SeparableConv(c_in, c_out, 1, dilation), _bn(c_out, pg), nn.ReLU()]
        rep = rep[:-1]  # the reference drops the block's last ReLU
        if stride != 1:
            rep.append(SeparableConv(c_out, c_out, stride=2))
        elif is_last:
            rep.append(SeparableConv(c_out, c_out, stride=1))
        self.rep = nn.Sequential(*rep)

    def forward(self, x):
        y = self.rep(x) + (self.skip(x) if self.skip is not None else x)
        return torch.relu(y) if self.end_with_relu else y


class Xception(nn.Module):
    """Modified aligned Xception, output stride 16; returns (features, low-level features)."""

    def __init__(self, c_in: int, width: int = 1, middle_blocks: int = 16, pg=None):
        super().__init__()
        c = [max(1, n // width) for n in (32, 64, 128, 256, 728, 1024, 1536, 2048)]
        self.low_level_channels = c[2]
        self.entry = nn.Sequential(
            nn.Conv2d(c_in, c[0], 3, stride=2, padding=1, bias=False),
            _bn(c[0], pg),
            nn.ReLU(),
            nn.Conv2d(c[0], c[1], 3, padding=1, bias=False),
            _bn(c[1], pg),
            nn.ReLU(),
        )
        self.block1 = XceptionBlock(c[1], c[2], 2, stride=2, end_with_relu=False, pg=pg)
        self.block2 = XceptionBlock(c[2], c[3], 2, stride=2, pg=pg)
        self.block3 = XceptionBlock(c[3], c[4], 2, stride=2, is_last=True, pg=pg)
        self.middle = nn.Sequential(*[XceptionBlock(c[4], c[4], 3, pg=pg) for _ in range(middle_blocks)])
        self.block20 = XceptionBlock(
            c[4], c[5], 2, dilation=1, end_with_relu=False, grow_first=False, is_last=True, pg=pg
        )
        self.exit = nn.Sequential(
            SeparableConv(c[5], c[6], dilation=2),
            _bn(c[6], pg),
            nn.ReLU(),
            SeparableConv(c[6], c[6], dilation=2),
            _bn(c[6], pg),
            nn.ReLU(),
            SeparableConv(c[6], c[7], dilation=2),
            _bn(c[7], pg),
            nn.ReLU(),
        )
        self.out_channels = c[7]
        for m in self.modules():  # the reference re-initialises every encoder conv once built
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    def forward(self, x):
        # The decoder's low-level features are block1's output after the ReLU: the reference
        # keeps a reference to block1's output and then applies an in-place ReLU to it.
        low = torch.relu(self.block1(self.entry(x)))
        x = self.block3(self.block2(low))
        return self.exit(self.block20(self.middle(x))), low


def _aspp_branch(c_in: int, c_out: int, rate: int, pg=None) -> nn.Sequential:
    conv = nn.Conv2d(c_in, c_out, 1 if rate == 1 else 3, padding=0 if rate == 1 else rate, dilation=rate, bias=False)
    nn.init.kaiming_normal_(conv.weight)  # as the reference, right after building the branch
    return nn.Sequential(conv, _bn(c_out, pg), nn.ReLU())


class ASPP(nn.Module):
    """Atrous spatial pyramid pooling: rates 1, 6, 12, 18 and a global-pool branch."""

    def __init__(self, c_in: int, c_out: int, rates=(1, 6, 12, 18), pg=None):
        super().__init__()
        self.branches = nn.ModuleList(_aspp_branch(c_in, c_out, r, pg) for r in rates)
        # The reference's global branch has no batch norm: a per-channel affine instead.
        self.pool_conv = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.pool_weight = nn.Parameter(torch.ones(c_out, 1, 1))
        self.pool_bias = nn.Parameter(torch.zeros(c_out, 1, 1))
        self.project = nn.Sequential(
            nn.Conv2d(c_out * (len(rates) + 1), c_out, 1, bias=False), _bn(c_out, pg), nn.ReLU()
        )

    def forward(self, x):
        pooled = torch.relu(self.pool_weight * self.pool_conv(x.mean(dim=(2, 3), keepdim=True)) + self.pool_bias)
        # Sized from the input: the reference's fixed 48 x 72 tile holds only for 768 x 1152.
        pooled = pooled.expand(-1, -1, x.shape[2], x.shape[3])
        return self.project(torch.cat([b(x) for b in self.branches] + [pooled], dim=1))


def _deconv(c_in: int, c_out: int, pg=None, bn: bool = True) -> list[nn.Module]:
    layers: list[nn.Module] = [nn.ConvTranspose2d(c_in, c_out, 3, stride=2, padding=1, output_padding=1, bias=False)]
    return layers + ([_bn(c_out, pg), nn.ReLU()] if bn else [])


class DeepLabV3Plus(nn.Module):
    def __init__(
        self, in_channels: int = 16, classes: int = 3, width: int = 1, middle_blocks: int = 16, process_group=None
    ):
        super().__init__()
        pg = process_group
        d = max(1, 256 // width)
        low = max(1, 48 // width)
        self.encoder = Xception(in_channels, width, middle_blocks, pg)
        self.aspp = ASPP(self.encoder.out_channels, d, pg=pg)
        self.low_project = nn.Sequential(
            nn.Conv2d(self.encoder.low_level_channels, low, 1, bias=False), _bn(low, pg), nn.ReLU()
        )
        self.up1 = nn.Sequential(*_deconv(d, d, pg), *_deconv(d, d, pg))  # stride 16 -> 4
        self.fuse = nn.Sequential(
            nn.Conv2d(d + low, d, 3, padding=1, bias=False),
            _bn(d, pg),
            nn.ReLU(),
            nn.Conv2d(d, d, 3, padding=1, bias=False),
            _bn(d, pg),
            nn.ReLU(),
            nn.Conv2d(d, d, 1),
        )
        self.up2 = nn.Sequential(*_deconv(d, d, pg), *_deconv(d, classes, bn=False))  # 4 -> 1, logits
        # Initialisation: the reference's. Encoder and ASPP-branch convs are He-normal (above);
        # the pooling-branch, projection, low-level and decoder convs and the transposed
        # convs keep PyTorch's default (the reference's decoder init method is never called).
        # Modules are built in the reference's order, so one seed gives its weights.

    def forward(self, x):
        features, low = self.encoder(x)
        y = self.up1(self.aspp(features))
        y = self.fuse(torch.cat([y, self.low_project(low)], dim=1))
        return self.up2(y)
