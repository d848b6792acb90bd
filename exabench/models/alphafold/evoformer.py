"""The MSA and pair trunk (supplement 1.6-1.7): MSA row attention with pair bias, MSA column
attention (global in the extra-MSA stack), the outer product mean, and the Evoformer and
extra-MSA stacks built from them and the pair updates."""

from __future__ import annotations

import torch
from torch import nn

from exabench.models.alphafold.pair import PairStackBlock
from exabench.models.alphafold.primitives import (
    Attention,
    GlobalAttention,
    Linear,
    SharedDropout,
    mask_bias,
    transition,
)


class MSARowAttentionWithPairBias(nn.Module):
    """Algorithm 7."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, heads: int, inf: float):
        super().__init__()
        self.inf = inf
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.layer_norm_z = nn.LayerNorm(c_z)
        self.linear_z = Linear(c_z, heads, bias=False, init="normal")
        self.mha = Attention(c_m, c_m, c_hidden, heads)

    def forward(self, m: torch.Tensor, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.layer_norm_m(m)
        pair = self.linear_z(self.layer_norm_z(z)).movedim(-1, -3).unsqueeze(-4)  # [B, 1, h, N_res, N_res]
        return self.mha(m, m, [mask_bias(mask, self.inf)[..., :, None, None, :], pair])


class MSAColumnAttention(nn.Module):
    """Algorithm 8: each column attends over the sequences."""

    def __init__(self, c_m: int, c_hidden: int, heads: int, inf: float):
        super().__init__()
        self.inf = inf
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.mha = Attention(c_m, c_m, c_hidden, heads)

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m, mask = m.transpose(-2, -3), mask.transpose(-1, -2)
        m = self.layer_norm_m(m)
        return self.mha(m, m, [mask_bias(mask, self.inf)[..., :, None, None, :]]).transpose(-2, -3)


class MSAColumnGlobalAttention(nn.Module):
    """Algorithm 19."""

    def __init__(self, c_e: int, c_hidden: int, heads: int, inf: float, eps: float):
        super().__init__()
        self.layer_norm_m = nn.LayerNorm(c_e)
        self.global_attention = GlobalAttention(c_e, c_hidden, heads, inf, eps)

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m, mask = m.transpose(-2, -3), mask.transpose(-1, -2)
        return self.global_attention(self.layer_norm_m(m), mask).transpose(-2, -3)


class OuterProductMean(nn.Module):
    """Algorithm 10: the MSA's outer product averaged over sequences, projected to the pair."""

    def __init__(self, c_m: int, c_z: int, c_hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.layer_norm = nn.LayerNorm(c_m)
        self.linear_1 = Linear(c_m, c_hidden)
        self.linear_2 = Linear(c_m, c_hidden)
        self.linear_out = Linear(c_hidden * c_hidden, c_z, init="final")

    def forward(self, m: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = self.layer_norm(m)
        a = self.linear_1(m) * mask[..., None]
        b = self.linear_2(m) * mask[..., None]
        outer = torch.einsum("...sic,...sjd->...ijcd", a, b).flatten(-2)
        norm = torch.einsum("...si,...sj->...ij", mask, mask)[..., None]
        return self.linear_out(outer) / (self.eps + norm)


class MSABlock(nn.Module):
    """One Evoformer (Algorithm 6) or extra-MSA (Algorithm 18) block: MSA row and column
    attention, MSA transition, outer product mean, then the pair updates."""

    def __init__(
        self,
        c_m: int,
        c_z: int,
        c_hidden_msa_att: int,
        c_hidden_opm: int,
        c_hidden_tri_mul: int,
        c_hidden_tri_att: int,
        num_heads_msa: int,
        num_heads_tri: int,
        transition_n: int,
        msa_dropout: float,
        pair_dropout: float,
        inf: float,
        eps_opm: float,
        global_column: bool,
        eps: float = 1e-8,
    ):
        super().__init__()
        self.msa_att_row = MSARowAttentionWithPairBias(c_m, c_z, c_hidden_msa_att, num_heads_msa, inf)
        self.msa_att_col = (
            MSAColumnGlobalAttention(c_m, c_hidden_msa_att, num_heads_msa, inf, eps)
            if global_column
            else MSAColumnAttention(c_m, c_hidden_msa_att, num_heads_msa, inf)
        )
        self.msa_dropout = SharedDropout(msa_dropout, -3)
        self.msa_transition = transition(c_m, transition_n)
        self.outer_product_mean = OuterProductMean(c_m, c_z, c_hidden_opm, eps_opm)
        self.pair = PairStackBlock(
            c_z,
            c_hidden_tri_mul,
            c_hidden_tri_att,
            num_heads_tri,
            transition_n,
            pair_dropout,
            inf,
            attention_first=False,
        )

    def forward(self, m: torch.Tensor, z: torch.Tensor, msa_mask: torch.Tensor, pair_mask: torch.Tensor):
        m = m + self.msa_dropout(self.msa_att_row(m, z, msa_mask))
        m = m + self.msa_att_col(m, msa_mask)
        m = m + self.msa_transition(m) * msa_mask[..., None]
        z = z + self.outer_product_mean(m, msa_mask)
        return m, self.pair(z, pair_mask)


class EvoformerStack(nn.Module):
    """Algorithm 6 repeated, then the single representation from the first MSA row."""

    def __init__(self, c_m: int, c_z: int, c_s: int, num_blocks: int, **block):
        super().__init__()
        self.blocks = nn.ModuleList(MSABlock(c_m, c_z, global_column=False, **block) for _ in range(num_blocks))
        self.linear = Linear(c_m, c_s)

    def forward(self, m, z, msa_mask, pair_mask):
        for b in self.blocks:
            m, z = b(m, z, msa_mask, pair_mask)
        return m, z, self.linear(m[:, 0])


class ExtraMSAStack(nn.Module):
    """Algorithm 18 repeated: only the pair representation leaves the stack."""

    def __init__(self, c_e: int, c_z: int, num_blocks: int, **block):
        super().__init__()
        self.blocks = nn.ModuleList(MSABlock(c_e, c_z, global_column=True, **block) for _ in range(num_blocks))

    def forward(self, a, z, msa_mask, pair_mask):
        for b in self.blocks:
            a, z = b(a, z, msa_mask, pair_mask)
        return z
