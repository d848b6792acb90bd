"""The structure module (supplement 1.8): invariant point attention, the backbone update and
the torsion-angle ResNet, iterated over shared weights; each iteration's frames and torsions
place every heavy atom (rigid-group frames and atom14 positions, exabench.models.alphafold.atoms)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from exabench.models.alphafold.atoms import atom14_from_frames, torsion_frames
from exabench.models.alphafold.geometry import apply, compose_update, invert_apply
from exabench.models.alphafold.primitives import Linear, three_layer_relu


class InvariantPointAttention(nn.Module):
    """Algorithm 22: attention from scalar queries/keys, the pair bias, and 3D query/key points
    compared in the global frame; outputs scalar values, value points (back in the local frame)
    with their norms, and the attention-weighted pair."""

    def __init__(
        self, c_s: int, c_z: int, c_hidden: int, heads: int, qk_points: int, v_points: int, inf: float, eps: float
    ):
        super().__init__()
        self.c_hidden, self.heads, self.qk_points, self.v_points = c_hidden, heads, qk_points, v_points
        self.inf, self.eps = inf, eps
        self.linear_q = Linear(c_s, heads * c_hidden)
        self.linear_kv = Linear(c_s, 2 * heads * c_hidden)
        self.linear_q_points = Linear(c_s, heads * qk_points * 3)
        self.linear_kv_points = Linear(c_s, heads * (qk_points + v_points) * 3)
        self.linear_b = Linear(c_z, heads)
        self.head_weights = nn.Parameter(torch.full((heads,), math.log(math.e - 1)))  # softplus^-1(1)
        self.linear_out = Linear(heads * (c_z + c_hidden + v_points * 4), c_s, init="final")

    def _points(self, linear: Linear, s, rot, trans, n: int) -> torch.Tensor:
        pts = torch.stack(linear(s).chunk(3, dim=-1), dim=-1)  # [B, N, h*n, 3] local
        pts = apply(rot[..., None, :, :], trans[..., None, :], pts)
        return pts.unflatten(-2, (self.heads, n))  # [B, N, h, n, 3] global

    def forward(self, s, z, rot, trans, mask):
        h, c = self.heads, self.c_hidden
        q = self.linear_q(s).unflatten(-1, (h, c))
        k, v = self.linear_kv(s).unflatten(-1, (h, 2 * c)).split(c, dim=-1)
        q_pts = self._points(self.linear_q_points, s, rot, trans, self.qk_points)
        k_pts, v_pts = self._points(self.linear_kv_points, s, rot, trans, self.qk_points + self.v_points).split(
            [self.qk_points, self.v_points], dim=-2
        )
        logits = torch.einsum("bihc,bjhc->bhij", q, k) * math.sqrt(1.0 / (3 * c))
        logits = logits + math.sqrt(1.0 / 3) * self.linear_b(z).permute(0, 3, 1, 2)
        d2 = ((q_pts[:, :, None] - k_pts[:, None]) ** 2).sum(-1).sum(-1)  # [B, i, j, h]
        w = F.softplus(self.head_weights) * math.sqrt(1.0 / (3 * self.qk_points * 9.0 / 2))
        logits = logits - 0.5 * (d2 * w).permute(0, 3, 1, 2)
        logits = logits + ((mask[:, :, None] * mask[:, None, :] - 1.0) * self.inf)[:, None]
        a = torch.softmax(logits, dim=-1)  # [B, h, i, j]
        o = torch.einsum("bhij,bjhc->bihc", a, v).flatten(-2)
        o_pt = torch.einsum("bhij,bjhpx->bihpx", a, v_pts)
        o_pt = invert_apply(rot[:, :, None, None], trans[:, :, None, None], o_pt).flatten(-3, -2)
        o_pt_norm = torch.sqrt((o_pt**2).sum(-1) + self.eps)
        o_pair = torch.einsum("bhij,bijc->bihc", a, z).flatten(-2)
        return self.linear_out(torch.cat([o, *o_pt.unbind(-1), o_pt_norm, o_pair], dim=-1))


class AngleResnet(nn.Module):
    """Algorithm 20 lines 11-14: torsion angles (sin, cos) from the current and initial single."""

    def __init__(self, c_s: int, c_hidden: int, num_blocks: int, num_angles: int, eps: float):
        super().__init__()
        self.num_angles, self.eps = num_angles, eps
        self.linear_in = Linear(c_s, c_hidden)
        self.linear_initial = Linear(c_s, c_hidden)
        self.layers = nn.ModuleList(
            nn.Sequential(
                nn.ReLU(), Linear(c_hidden, c_hidden, init="relu"), nn.ReLU(), Linear(c_hidden, c_hidden, init="final")
            )
            for _ in range(num_blocks)
        )
        self.linear_out = Linear(c_hidden, num_angles * 2)

    def forward(self, s, s_initial):
        a = self.linear_in(torch.relu(s)) + self.linear_initial(torch.relu(s_initial))
        for layer in self.layers:
            a = a + layer(a)
        raw = self.linear_out(torch.relu(a)).unflatten(-1, (self.num_angles, 2))
        norm = torch.sqrt(torch.clamp((raw**2).sum(-1, keepdim=True), min=self.eps))
        return raw, raw / norm


class StructureModule(nn.Module):
    """Algorithm 20: num_blocks applications of IPA, transition, backbone update and angle
    ResNet with shared weights, starting from identity frames ("black hole" initialisation).
    Frames are kept in nanometres and scaled by `scale_factor` to Angstrom on output. Every
    iteration also builds the 8 rigid-group frames and the atom14 positions of the residues
    `aatype` from its Angstrom backbone frames and normalised torsions, as the reference does."""

    def __init__(
        self,
        c_s: int,
        c_z: int,
        c_hidden_ipa: int,
        c_hidden_ang_res: int,
        num_heads_ipa: int,
        num_qk_points: int,
        num_v_points: int,
        dropout_rate: float,
        num_blocks: int,
        num_ang_res_blocks: int,
        num_angles: int,
        scale_factor: float,
        inf: float,
        eps: float,
    ):
        super().__init__()
        self.num_blocks, self.scale_factor = num_blocks, scale_factor
        self.layer_norm_s = nn.LayerNorm(c_s)
        self.layer_norm_z = nn.LayerNorm(c_z)
        self.linear_in = Linear(c_s, c_s)
        self.ipa = InvariantPointAttention(c_s, c_z, c_hidden_ipa, num_heads_ipa, num_qk_points, num_v_points, inf, eps)
        self.ipa_dropout = nn.Dropout(dropout_rate)
        self.layer_norm_ipa = nn.LayerNorm(c_s)
        self.transition = three_layer_relu(c_s, c_s, c_s)
        self.transition_dropout = nn.Dropout(dropout_rate)
        self.layer_norm_transition = nn.LayerNorm(c_s)
        self.bb_update = Linear(c_s, 6, init="final")
        self.angle_resnet = AngleResnet(c_s, c_hidden_ang_res, num_ang_res_blocks, num_angles, eps)

    def forward(self, s, z, mask, aatype):
        s = self.layer_norm_s(s)
        z = self.layer_norm_z(z)
        s_initial = s
        s = self.linear_in(s)
        B, N = s.shape[:2]
        rot = torch.eye(3, dtype=s.dtype, device=s.device).expand(B, N, 3, 3)
        trans = s.new_zeros(B, N, 3)
        rots, transs, raws, angles, group_rots, group_transs, positions = [], [], [], [], [], [], []
        for _ in range(self.num_blocks):
            s = s + self.ipa(s, z, rot, trans, mask)
            s = self.layer_norm_ipa(self.ipa_dropout(s))
            s = self.layer_norm_transition(self.transition_dropout(s + self.transition(s)))
            rot, trans = compose_update(rot, trans, self.bb_update(s))
            raw, angle = self.angle_resnet(s, s_initial)
            group_rot, group_trans = torsion_frames(rot, trans * self.scale_factor, angle, aatype)
            rots.append(rot)
            transs.append(trans * self.scale_factor)
            raws.append(raw)
            angles.append(angle)
            group_rots.append(group_rot)
            group_transs.append(group_trans)
            positions.append(atom14_from_frames(group_rot, group_trans, aatype))
            rot = rot.detach()  # Algorithm 20 line 20: no gradient through rotations between blocks
        return {
            "frames_rot": torch.stack(rots, 1),
            "frames_trans": torch.stack(transs, 1),
            "unnormalized_angles": torch.stack(raws, 1),
            "angles": torch.stack(angles, 1),
            "sidechain_rot": torch.stack(group_rots, 1),  # [B, blocks, N, 8, 3, 3]
            "sidechain_trans": torch.stack(group_transs, 1),  # [B, blocks, N, 8, 3]
            "positions": torch.stack(positions, 1),  # [B, blocks, N, 14, 3] atom14, Angstrom
            "single": s,
        }
