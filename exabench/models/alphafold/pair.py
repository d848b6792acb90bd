"""Pair-representation updates (supplement 1.6.5-1.6.7): triangle multiplicative updates,
triangle self-attention around the starting and ending node, the pair transition, and the
template pair stack built from them."""

from __future__ import annotations

import torch
from torch import nn

from exabench.models.alphafold.primitives import Attention, Linear, SharedDropout, mask_bias, transition


class TriangleMultiplication(nn.Module):
    """Algorithms 11 (outgoing edges) and 12 (incoming edges)."""

    def __init__(self, c_z: int, c_hidden: int, outgoing: bool):
        super().__init__()
        self.outgoing = outgoing
        self.layer_norm_in = nn.LayerNorm(c_z)
        self.linear_a_p = Linear(c_z, c_hidden)
        self.linear_a_g = Linear(c_z, c_hidden, init="gating")
        self.linear_b_p = Linear(c_z, c_hidden)
        self.linear_b_g = Linear(c_z, c_hidden, init="gating")
        self.layer_norm_out = nn.LayerNorm(c_hidden)
        self.linear_z = Linear(c_hidden, c_z, init="final")
        self.linear_g = Linear(c_z, c_z, init="gating")

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = self.layer_norm_in(z)
        m = mask[..., None]
        a = m * torch.sigmoid(self.linear_a_g(z)) * self.linear_a_p(z)
        b = m * torch.sigmoid(self.linear_b_g(z)) * self.linear_b_p(z)
        if self.outgoing:  # x_ij = sum_k a_ik b_jk
            x = torch.einsum("...ikc,...jkc->...ijc", a, b)
        else:  # x_ij = sum_k a_ki b_kj
            x = torch.einsum("...kic,...kjc->...ijc", a, b)
        return torch.sigmoid(self.linear_g(z)) * self.linear_z(self.layer_norm_out(x))


class TriangleAttention(nn.Module):
    """Algorithms 13 (around the starting node: row i attends over its edges ij, biased by
    edge jk) and 14 (ending node: the same on the transposed pair)."""

    def __init__(self, c_z: int, c_hidden: int, heads: int, starting: bool, inf: float):
        super().__init__()
        self.starting, self.inf = starting, inf
        self.layer_norm = nn.LayerNorm(c_z)
        self.linear = Linear(c_z, heads, bias=False, init="normal")
        self.mha = Attention(c_z, c_z, c_hidden, heads)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.starting:
            z, mask = z.transpose(-2, -3), mask.transpose(-1, -2)
        z = self.layer_norm(z)
        triangle = self.linear(z).movedim(-1, -3).unsqueeze(-4)  # [*, 1, h, J, K]
        row_mask = mask_bias(mask, self.inf)[..., :, None, None, :]  # [*, I, 1, 1, K]
        out = self.mha(z, z, [row_mask, triangle])
        return out.transpose(-2, -3) if not self.starting else out


class PairStackBlock(nn.Module):
    """The four triangle updates and the pair transition, each residual with shared dropout,
    in the order `order` names them ("mul" first in the Evoformer, "att" first in templates)."""

    def __init__(
        self,
        c_z: int,
        c_hidden_mul: int,
        c_hidden_att: int,
        heads: int,
        transition_n: int,
        dropout: float,
        inf: float,
        attention_first: bool,
    ):
        super().__init__()
        self.attention_first = attention_first
        self.tri_mul_out = TriangleMultiplication(c_z, c_hidden_mul, outgoing=True)
        self.tri_mul_in = TriangleMultiplication(c_z, c_hidden_mul, outgoing=False)
        self.tri_att_start = TriangleAttention(c_z, c_hidden_att, heads, starting=True, inf=inf)
        self.tri_att_end = TriangleAttention(c_z, c_hidden_att, heads, starting=False, inf=inf)
        self.pair_transition = transition(c_z, transition_n)
        self.drop_row = SharedDropout(dropout, -3)
        self.drop_col = SharedDropout(dropout, -2)

    def forward(self, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mul = [(self.tri_mul_out, self.drop_row), (self.tri_mul_in, self.drop_row)]
        att = [(self.tri_att_start, self.drop_row), (self.tri_att_end, self.drop_col)]
        for layer, drop in (att + mul) if self.attention_first else (mul + att):
            z = z + drop(layer(z, mask))
        return z + self.pair_transition(z) * mask[..., None]


class TemplatePairStack(nn.Module):
    """Algorithm 16: pair stack blocks over each template's pair features, then LayerNorm."""

    def __init__(
        self,
        c_t: int,
        c_hidden_tri_att: int,
        c_hidden_tri_mul: int,
        num_blocks: int,
        num_heads_tri: int,
        pair_transition_n: int,
        dropout_rate: float,
        inf: float,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(
            PairStackBlock(
                c_t,
                c_hidden_tri_mul,
                c_hidden_tri_att,
                num_heads_tri,
                pair_transition_n,
                dropout_rate,
                inf,
                attention_first=True,
            )
            for _ in range(num_blocks)
        )
        self.layer_norm = nn.LayerNorm(c_t)

    def forward(self, t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # t: [B, N_templ, N_res, N_res, c_t], mask: [B, N_res, N_res]
        mask = mask[:, None]
        for block in self.blocks:
            t = block(t, mask)
        return self.layer_norm(t)
