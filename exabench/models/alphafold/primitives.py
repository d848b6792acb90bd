"""Building blocks every AlphaFold2 stack shares: linear layers with the supplement's
initialisers, gated multi-head attention, global attention, row/column-shared dropout."""

from __future__ import annotations

import math

import torch
from torch import nn


class Linear(nn.Linear):
    """nn.Linear initialised as AlphaFold2 (supplement 1.11.4): 'default' LeCun normal,
    'relu' He normal, 'glorot' uniform, 'gating' zeros with bias 1, 'final' and 'zeros' zeros,
    'normal' fan-in normal."""

    def __init__(self, n_in: int, n_out: int, bias: bool = True, init: str = "default"):
        super().__init__(n_in, n_out, bias=bias)
        if self.weight.is_meta:  # parameter counting on the meta device: nothing to fill
            return
        with torch.no_grad():
            if bias:
                self.bias.zero_()
            if init in ("default", "relu"):
                # truncated at 2 std, widened so the variance is scale / fan_in
                std = math.sqrt((2.0 if init == "relu" else 1.0) / n_in) / 0.87962566103423978
                nn.init.trunc_normal_(self.weight, std=std, a=-2 * std, b=2 * std)
            elif init == "normal":
                nn.init.normal_(self.weight, std=math.sqrt(1.0 / n_in))
            elif init == "glorot":
                nn.init.xavier_uniform_(self.weight)
            elif init in ("gating", "final"):
                self.weight.zero_()
                if init == "gating" and bias:
                    self.bias.fill_(1.0)
            else:
                raise ValueError(f"unknown init {init!r}")


def mask_bias(mask: torch.Tensor, inf: float) -> torch.Tensor:
    """0 where mask is 1, -inf where it is 0: added to attention logits."""
    return (mask - 1.0) * inf


class Attention(nn.Module):
    """Multi-head attention of queries over keys/values with optional logit biases and a
    sigmoid gate on the output (supplement Algorithm 7's pattern). q, k, v have no bias."""

    def __init__(self, c_q: int, c_kv: int, c_hidden: int, heads: int, gating: bool = True):
        super().__init__()
        self.c_hidden, self.heads = c_hidden, heads
        self.linear_q = Linear(c_q, c_hidden * heads, bias=False, init="glorot")
        self.linear_k = Linear(c_kv, c_hidden * heads, bias=False, init="glorot")
        self.linear_v = Linear(c_kv, c_hidden * heads, bias=False, init="glorot")
        self.linear_o = Linear(c_hidden * heads, c_q, init="final")
        self.linear_g = Linear(c_q, c_hidden * heads, init="gating") if gating else None

    def forward(self, q_x: torch.Tensor, kv_x: torch.Tensor, biases: list[torch.Tensor]) -> torch.Tensor:
        # q_x: [*, Q, c_q], kv_x: [*, K, c_kv]; each bias broadcasts to [*, heads, Q, K]
        h, c = self.heads, self.c_hidden
        q = self.linear_q(q_x).unflatten(-1, (h, c)).transpose(-2, -3) / math.sqrt(c)
        k = self.linear_k(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)
        v = self.linear_v(kv_x).unflatten(-1, (h, c)).transpose(-2, -3)
        logits = q @ k.transpose(-1, -2)
        for b in biases:
            logits = logits + b
        o = (torch.softmax(logits, dim=-1) @ v).transpose(-2, -3)  # [*, Q, h, c]
        if self.linear_g is not None:
            o = o * torch.sigmoid(self.linear_g(q_x)).unflatten(-1, (h, c))
        return self.linear_o(o.flatten(-2))


class GlobalAttention(nn.Module):
    """Global column attention of the extra-MSA stack (supplement Algorithm 19): one query per
    column (the masked mean over sequences), one shared key and value head."""

    def __init__(self, c_in: int, c_hidden: int, heads: int, inf: float, eps: float):
        super().__init__()
        self.c_hidden, self.heads, self.inf, self.eps = c_hidden, heads, inf, eps
        self.linear_q = Linear(c_in, c_hidden * heads, bias=False, init="glorot")
        self.linear_k = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_v = Linear(c_in, c_hidden, bias=False, init="glorot")
        self.linear_g = Linear(c_in, c_hidden * heads, init="gating")
        self.linear_o = Linear(c_hidden * heads, c_in, init="final")

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # m: [*, N_res, N_seq, c] (columns first), mask: [*, N_res, N_seq]
        q_avg = (m * mask[..., None]).sum(-2) / (mask.sum(-1)[..., None] + self.eps)
        q = self.linear_q(q_avg).unflatten(-1, (self.heads, self.c_hidden)) / math.sqrt(self.c_hidden)
        k, v = self.linear_k(m), self.linear_v(m)
        logits = q @ k.transpose(-1, -2) + mask_bias(mask, self.inf)[..., None, :]  # [*, N_res, h, N_seq]
        o = torch.softmax(logits, dim=-1) @ v  # [*, N_res, h, c]
        g = torch.sigmoid(self.linear_g(m)).unflatten(-1, (self.heads, self.c_hidden))  # [*, N_res, N_seq, h, c]
        return self.linear_o((g * o[..., None, :, :]).flatten(-2))


class SharedDropout(nn.Module):
    """Dropout whose mask is shared along one axis of [*, R, C, c]: dim -3 (row-wise, one
    mask per row shared by every row index) or -2 (column-wise)."""

    def __init__(self, p: float, shared_dim: int):
        super().__init__()
        self.p, self.shared_dim = p, shared_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = list(x.shape)
        shape[self.shared_dim] = 1
        keep = torch.bernoulli(x.new_full(shape, 1.0 - self.p))
        return x * keep / (1.0 - self.p)


def transition(c: int, n: int) -> nn.Sequential:
    """LayerNorm, c -> n*c ReLU, n*c -> c (supplement Algorithms 9 and 15)."""
    return nn.Sequential(nn.LayerNorm(c), Linear(c, n * c, init="relu"), nn.ReLU(), Linear(n * c, c, init="final"))


def three_layer_relu(c_in: int, c_hidden: int, c_out: int) -> nn.Sequential:
    """c_in -> c_hidden ReLU, c_hidden -> c_hidden ReLU, c_hidden -> c_out (the structure module's
    transition, supplement Algorithm 20 line 8, and the pLDDT head, Algorithm 29)."""
    return nn.Sequential(
        Linear(c_in, c_hidden, init="relu"),
        nn.ReLU(),
        Linear(c_hidden, c_hidden, init="relu"),
        nn.ReLU(),
        Linear(c_hidden, c_out, init="final"),
    )
