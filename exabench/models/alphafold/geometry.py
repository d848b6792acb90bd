"""Rigid frames as (rotation [*, 3, 3], translation [*, 3]) pairs, in the AlphaFold2 backbone
convention: origin at C-alpha, x towards C, N in the xy-plane with positive y (supplement
Algorithm 21)."""

from __future__ import annotations

import torch

# Alanine's N and C in its backbone frame (Angstrom; every residue's own: residues.LITERATURE).
IDEAL_N = (-0.525, 1.363, 0.0)
IDEAL_C = (1.526, 0.0, 0.0)


def apply(rot: torch.Tensor, trans: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Local -> global: R x + t."""
    return torch.einsum("...ij,...j->...i", rot, x) + trans


def invert_apply(rot: torch.Tensor, trans: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Global -> local: R^T (x - t)."""
    return torch.einsum("...ji,...j->...i", rot, x - trans)


def from_3_points(neg_x: torch.Tensor, origin: torch.Tensor, xy: torch.Tensor, eps: float = 1e-8):
    """Algorithm 21: frame at `origin`, x away from `neg_x`, `xy` in the xy-plane (y > 0)."""
    e0 = origin - neg_x
    e0 = e0 / torch.sqrt((e0**2).sum(-1, keepdim=True) + eps)
    e1 = xy - origin
    e1 = e1 - (e0 * e1).sum(-1, keepdim=True) * e0
    e1 = e1 / torch.sqrt((e1**2).sum(-1, keepdim=True) + eps)
    return torch.stack([e0, e1, torch.cross(e0, e1, dim=-1)], dim=-1), origin


def frames_from_atoms(n: torch.Tensor, ca: torch.Tensor, c: torch.Tensor, eps: float = 1e-8):
    """Backbone frame of each residue from its N, CA, C positions [*, 3]: x along CA -> C, N in the
    xy-plane. Algorithm 21 on (C, CA, N) with its x and z axes turned, as the backbone group's
    frame is defined."""
    rot, trans = from_3_points(c, ca, n, eps)
    return rot * rot.new_tensor([-1.0, 1.0, -1.0]), trans


def quaternion_to_rotation(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternions (a, b, c, d) [*, 4] -> rotation matrices [*, 3, 3]."""
    a, b, c, d = q.unbind(-1)
    return torch.stack(
        [
            a * a + b * b - c * c - d * d,
            2 * (b * c - a * d),
            2 * (b * d + a * c),
            2 * (b * c + a * d),
            a * a - b * b + c * c - d * d,
            2 * (c * d - a * b),
            2 * (b * d - a * c),
            2 * (c * d + a * b),
            a * a - b * b - c * c + d * d,
        ],
        dim=-1,
    ).unflatten(-1, (3, 3))


def compose_update(rot: torch.Tensor, trans: torch.Tensor, update: torch.Tensor):
    """Algorithm 23's update [*, 6] = (b, c, d, t): rotation by the normalised quaternion
    (1, b, c, d) and translation t, both in the current frame."""
    q = torch.cat([torch.ones_like(update[..., :1]), update[..., :3]], dim=-1)
    q = q / q.norm(dim=-1, keepdim=True)
    return rot @ quaternion_to_rotation(q), trans + torch.einsum("...ij,...j->...i", rot, update[..., 3:])
