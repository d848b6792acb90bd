"""Input embeddings (supplement 1.5, 1.7, 1.10): target and MSA features, relative positions,
recycled representations, templates (pair features and torsion angles), extra MSA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from exabench.models.alphafold.geometry import frames_from_atoms, invert_apply
from exabench.models.alphafold.primitives import Attention, Linear


class InputEmbedder(nn.Module):
    """Algorithms 3-5: MSA and pair representations from target_feat, msa_feat and the
    clipped relative residue positions."""

    def __init__(self, tf_dim: int, msa_dim: int, c_z: int, c_m: int, relpos_k: int):
        super().__init__()
        self.relpos_k = relpos_k
        self.linear_tf_z_i = Linear(tf_dim, c_z)
        self.linear_tf_z_j = Linear(tf_dim, c_z)
        self.linear_tf_m = Linear(tf_dim, c_m)
        self.linear_msa_m = Linear(msa_dim, c_m)
        self.linear_relpos = Linear(2 * relpos_k + 1, c_z)

    def forward(self, target_feat, residue_index, msa_feat):
        d = residue_index[..., :, None] - residue_index[..., None, :]
        relpos = F.one_hot(d.clamp(-self.relpos_k, self.relpos_k) + self.relpos_k, 2 * self.relpos_k + 1)
        z = self.linear_relpos(relpos.to(target_feat.dtype))
        z = z + self.linear_tf_z_i(target_feat)[..., :, None, :] + self.linear_tf_z_j(target_feat)[..., None, :, :]
        m = self.linear_msa_m(msa_feat) + self.linear_tf_m(target_feat)[..., None, :, :]
        return m, z


def distance_bins(x: torch.Tensor, min_bin: float, max_bin: float, num_bins: int, inf: float) -> torch.Tensor:
    """One-hot of the pairwise distance of points x [*, N, 3] in num_bins bins whose lower
    edges are evenly spaced from min_bin to max_bin (the last bin open-ended)."""
    lower = torch.linspace(min_bin, max_bin, num_bins, dtype=x.dtype, device=x.device) ** 2
    upper = torch.cat([lower[1:], lower.new_tensor([inf])])
    d2 = ((x[..., :, None, :] - x[..., None, :, :]) ** 2).sum(-1, keepdim=True)
    return ((d2 > lower) & (d2 < upper)).to(x.dtype)


class RecyclingEmbedder(nn.Module):
    """Algorithm 32: the previous iteration's first MSA row and pair (layer-normed) and its
    pseudo-beta distogram."""

    def __init__(self, c_m: int, c_z: int, min_bin: float, max_bin: float, num_bins: int, inf: float):
        super().__init__()
        self.bins = (min_bin, max_bin, num_bins, inf)
        self.linear = Linear(num_bins, c_z)
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.layer_norm_z = nn.LayerNorm(c_z)

    def forward(self, m0_prev, z_prev, x_prev):
        return self.layer_norm_m(m0_prev), self.linear(distance_bins(x_prev, *self.bins)) + self.layer_norm_z(z_prev)


class TemplateAngleEmbedder(nn.Module):
    """Algorithm 2 lines 7-8: template torsion-angle features as extra MSA rows."""

    def __init__(self, ta_dim: int, c_m: int):
        super().__init__()
        self.linear_1 = Linear(ta_dim, c_m, init="relu")
        self.linear_2 = Linear(c_m, c_m, init="relu")

    def forward(self, x):
        return self.linear_2(torch.relu(self.linear_1(x)))


class TemplatePairEmbedder(nn.Module):
    def __init__(self, tp_dim: int, c_t: int):
        super().__init__()
        self.linear = Linear(tp_dim, c_t, init="relu")

    def forward(self, x):
        return self.linear(x)


class TemplatePointwiseAttention(nn.Module):
    """Algorithm 17: each pair element attends over the templates' embeddings (no gate)."""

    def __init__(self, c_t: int, c_z: int, c_hidden: int, num_heads: int, inf: float):
        super().__init__()
        self.inf = inf
        self.mha = Attention(c_z, c_t, c_hidden, num_heads, gating=False)

    def forward(self, t, z, template_mask):
        # t: [B, T, N, N, c_t] -> [B, N, N, T, c_t]; one query per pair element
        t = t.permute(0, 2, 3, 1, 4)
        bias = ((template_mask - 1.0) * self.inf)[:, None, None, None, None, :]
        return self.mha(z[..., None, :], t, [bias]).squeeze(-2)


class ExtraMSAEmbedder(nn.Module):
    def __init__(self, emsa_dim: int, c_e: int):
        super().__init__()
        self.linear = Linear(emsa_dim, c_e)

    def forward(self, x):
        return self.linear(x)


def extra_msa_feat(feats: dict) -> torch.Tensor:
    """25 channels: one-hot of 23 MSA classes, has-deletion, deletion value."""
    return torch.cat(
        [
            F.one_hot(feats["extra_msa"], 23).float(),
            feats["extra_has_deletion"][..., None],
            feats["extra_deletion_value"][..., None],
        ],
        dim=-1,
    )


def template_angle_feat(feats: dict) -> torch.Tensor:
    """57 channels per template residue: aatype one-hot (22), torsion sin/cos (14), the
    alternative (pi-shifted) torsions (14), torsion mask (7)."""
    sc, alt = feats["template_torsion_angles_sin_cos"], feats["template_alt_torsion_angles_sin_cos"]
    return torch.cat(
        [
            F.one_hot(feats["template_aatype"], 22).to(sc.dtype),
            sc.flatten(-2),
            alt.flatten(-2),
            feats["template_torsion_angles_mask"],
        ],
        dim=-1,
    )


def template_pair_feat(
    feats: dict, i: int, min_bin: float, max_bin: float, num_bins: int, inf: float, eps: float, use_unit_vector: bool
) -> torch.Tensor:
    """88 channels for template i: pseudo-beta distogram (39), its pair mask, both residues'
    aatype one-hots (2 x 22), unit vectors between C-alphas in local frames (3; zeroed unless
    use_unit_vector, as the reference trains), backbone pair mask."""
    pb, pb_mask = feats["template_pseudo_beta"][:, i], feats["template_pseudo_beta_mask"][:, i]
    pb_mask2 = pb_mask[..., :, None] * pb_mask[..., None, :]
    aa = F.one_hot(feats["template_aatype"][:, i], 22).to(pb.dtype)
    n_res = aa.shape[-2]
    pos, amask = feats["template_all_atom_positions"][:, i], feats["template_all_atom_mask"][:, i]
    rot, trans = frames_from_atoms(pos[..., 0, :], pos[..., 1, :], pos[..., 2, :], eps)
    vec = invert_apply(rot[..., :, None, :, :], trans[..., :, None, :], trans[..., None, :, :])
    bb = amask[..., 0] * amask[..., 1] * amask[..., 2]
    bb2 = bb[..., :, None] * bb[..., None, :]
    unit = vec * torch.rsqrt(eps + (vec**2).sum(-1))[..., None] * bb2[..., None]
    if not use_unit_vector:
        unit = unit * 0.0
    t = torch.cat(
        [
            distance_bins(pb, min_bin, max_bin, num_bins, inf),
            pb_mask2[..., None],
            aa[..., None, :, :].expand(*aa.shape[:-2], n_res, n_res, 22),
            aa[..., :, None, :].expand(*aa.shape[:-2], n_res, n_res, 22),
            unit,
            bb2[..., None],
        ],
        dim=-1,
    )
    return t * bb2[..., None]
