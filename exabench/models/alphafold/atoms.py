"""All-atom geometry on top of the residue tables (exabench.models.alphafold.residues), in the
MLCommons HPC OpenFold reference's conventions: the structure module's torsions to the 8
rigid-group frames and atom14 positions (supplement Algorithms 24 and 25), and what the
reference's data transforms derive from true atom37 positions: atom14 ground truth with
its symmetric alternative, rigid-group frames and their alternatives, torsion angles.
Frames are (rotation [*, 3, 3], translation [*, 3]) pairs, as in geometry.py."""

from __future__ import annotations

from functools import lru_cache

import torch

import exabench.models.alphafold.residues as residues  # the module, not the package: no circle through __init__
from exabench.models.alphafold.geometry import from_3_points


def table(name: str, like: torch.Tensor) -> torch.Tensor:
    """A residues table on `like`'s device (float tables in its dtype)."""
    return _table(name, like.device, like.dtype)


@lru_cache(maxsize=None)
def _table(name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(getattr(residues, name))
    return t.to(device, dtype if t.is_floating_point() else t.dtype)


def compose(rot_a, trans_a, rot_b, trans_b):
    """a o b: apply b, then a."""
    return rot_a @ rot_b, torch.einsum("...ij,...j->...i", rot_a, trans_b) + trans_a


def to_4x4(rot: torch.Tensor, trans: torch.Tensor) -> torch.Tensor:
    m = rot.new_zeros(rot.shape[:-2] + (4, 4))
    m[..., :3, :3], m[..., :3, 3], m[..., 3, 3] = rot, trans, 1.0
    return m


def torsion_frames(rot, trans, angles, aatype):
    """Algorithm 24: the 8 rigid-group frames [*, N, 8] in the global frame from the backbone
    frames [*, N], the 7 torsions (sin, cos) [*, N, 7, 2] (omega, phi, psi, chi1-4) and the
    residue types. Each group is its default frame turned about x by its torsion; chi2-4
    hang on the previous chi group, the others on the backbone."""
    default = table("DEFAULT_FRAMES", rot)[aatype]  # [*, N, 8, 4, 4]
    backbone_angle = angles.new_tensor([0.0, 1.0]).expand(angles.shape[:-2] + (1, 2))
    sin, cos = torch.cat([backbone_angle, angles], dim=-2).unbind(-1)  # [*, N, 8]
    turn = torch.zeros(sin.shape + (3, 3), dtype=angles.dtype, device=angles.device)
    turn[..., 0, 0] = 1.0
    turn[..., 1, 1], turn[..., 1, 2] = cos, -sin
    turn[..., 2, 1], turn[..., 2, 2] = sin, cos
    local_rot, local_trans = default[..., :3, :3] @ turn, default[..., :3, 3]
    rots, transs = list(local_rot.unbind(-3)), list(local_trans.unbind(-2))
    for g in (5, 6, 7):
        rots[g], transs[g] = compose(rots[g - 1], transs[g - 1], rots[g], transs[g])
    local_rot, local_trans = torch.stack(rots, -3), torch.stack(transs, -2)
    return compose(rot[..., None, :, :], trans[..., None, :], local_rot, local_trans)


def atom14_from_frames(group_rot, group_trans, aatype):
    """Algorithm 25: each atom's literature position placed by its rigid group's frame,
    zero where the residue has no such atom. [*, N, 14, 3]"""
    group = table("ATOM14_GROUP", aatype)[aatype]  # [*, N, 14]
    idx = group[..., None, None].expand(group.shape + (3, 3))
    rot = torch.gather(group_rot, -3, idx)
    trans = torch.gather(group_trans, -2, group[..., None].expand(group.shape + (3,)))
    lit = table("ATOM14_LITERATURE", group_rot)[aatype]
    pos = torch.einsum("...ij,...j->...i", rot, lit) + trans
    return pos * table("ATOM14_MASK", group_rot)[aatype][..., None]


def atom14_to_atom37(atom14: torch.Tensor, atom37_to_atom14: torch.Tensor, atom37_exists: torch.Tensor):
    idx = atom37_to_atom14[..., None].expand(atom37_to_atom14.shape + (3,))
    return torch.gather(atom14, -2, idx) * atom37_exists[..., None]


def pseudo_beta(aatype: torch.Tensor, atom37: torch.Tensor) -> torch.Tensor:
    """C-beta, C-alpha for glycine."""
    ca, cb = atom37[..., residues.ATOM_INDEX["CA"], :], atom37[..., residues.ATOM_INDEX["CB"], :]
    return torch.where((aatype == residues.GLYCINE)[..., None], ca, cb)


def gather_atoms(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Positions [*, N, 37, 3] or a mask [*, N, 37] at per-residue atom37 indices idx
    [*, N, ...] -> [*, N, ..., 3] or [*, N, ...]."""
    is_mask = x.shape[-1] == 37
    lead = x.shape[:-1] if is_mask else x.shape[:-2]
    flat = idx.reshape(lead + (-1,))
    if is_mask:
        return torch.gather(x, -1, flat).reshape(idx.shape)
    return torch.gather(x, -2, flat[..., None].expand(flat.shape + (3,))).reshape(idx.shape + (3,))


def atom14_ground_truth(aatype: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> dict:
    """The reference's make_atom14_masks and make_atom14_positions: atom14 and atom37 index
    maps and masks, the true atom14 positions, and the same with every symmetric pair's
    names swapped (positions and masks), plus which atoms are ambiguous."""
    atom14_exists = table("ATOM14_MASK", mask)[aatype]
    to37 = table("ATOM14_TO_ATOM37", aatype)[aatype]
    gt_exists = atom14_exists * gather_atoms(mask, to37)
    gt = gather_atoms(pos, to37) * gt_exists[..., None]
    swap = table("ATOM14_SWAP", aatype)[aatype]
    return {
        "atom14_atom_exists": atom14_exists,
        "residx_atom14_to_atom37": to37,
        "residx_atom37_to_atom14": table("ATOM37_TO_ATOM14", aatype)[aatype],
        "atom37_atom_exists": table("ATOM37_MASK", mask)[aatype],
        "atom14_gt_exists": gt_exists,
        "atom14_gt_positions": gt,
        "atom14_alt_gt_positions": torch.gather(gt, -2, swap[..., None].expand(swap.shape + (3,))),
        "atom14_alt_gt_exists": torch.gather(gt_exists, -1, swap),
        "atom14_atom_is_ambiguous": table("ATOM14_AMBIGUOUS", mask)[aatype],
    }


def rigid_group_frames(aatype: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> dict:
    """The reference's atom37_to_frames: each rigid group's true frame (4x4) from three of its
    atoms, whether the group exists and its atoms are present, and the alternative frame of
    the group a symmetric flip turns (its last chi group turned by pi)."""
    base = table("GROUP_BASE_ATOM37", aatype)[aatype]  # [*, N, 8, 3]
    atoms = gather_atoms(pos, base)  # [*, N, 8, 3, 3]
    rot, trans = from_3_points(atoms[..., 0, :], atoms[..., 1, :], atoms[..., 2, :], eps)
    # Backbone: the frame from (C, CA, N) turned by pi about y, so x points from CA to C.
    flip = torch.ones(8, 3, dtype=rot.dtype, device=rot.device)
    flip[0, 0] = flip[0, 2] = -1.0
    rot = rot * flip[:, None, :]
    group_exists = table("GROUP_EXISTS", mask)[aatype]
    gt_exists = gather_atoms(mask, base).amin(-1) * group_exists
    ambiguous = table("GROUP_AMBIGUOUS", mask)[aatype]
    alt_flip = torch.stack([torch.ones_like(ambiguous), 1 - 2 * ambiguous, 1 - 2 * ambiguous], -1)
    return {
        "rigidgroups_gt_frames": to_4x4(rot, trans),
        "rigidgroups_gt_exists": gt_exists,
        "rigidgroups_group_exists": group_exists,
        "rigidgroups_group_is_ambiguous": ambiguous,
        "rigidgroups_alt_gt_frames": to_4x4(rot * alt_flip[..., None, :], trans),
    }


def torsion_angles(aatype: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> dict:
    """The reference's atom37_to_torsion_angles: (sin, cos) [*, N, 7, 2] of omega, phi, psi and
    chi1-4 measured from atoms (the previous residue's for omega and phi; psi through O, sign
    flipped), the same with pi-periodic chis turned by pi, and which torsions exist."""
    aatype = aatype.clamp(max=residues.UNKNOWN)
    prev_pos = torch.cat([torch.zeros_like(pos[..., :1, :, :]), pos[..., :-1, :, :]], dim=-3)
    prev_mask = torch.cat([torch.zeros_like(mask[..., :1, :]), mask[..., :-1, :]], dim=-2)
    omega = torch.cat([prev_pos[..., 1:3, :], pos[..., :2, :]], dim=-2)  # CA C | N CA
    phi = torch.cat([prev_pos[..., 2:3, :], pos[..., :3, :]], dim=-2)  # C | N CA C
    psi = torch.cat([pos[..., :3, :], pos[..., 4:5, :]], dim=-2)  # N CA C O
    chi_idx = table("CHI_ATOM37", aatype)[aatype]  # [*, N, 4, 4]
    quads = torch.cat(
        [omega[..., None, :, :], phi[..., None, :, :], psi[..., None, :, :], gather_atoms(pos, chi_idx)], -3
    )
    chi_mask = table("CHI_MASK", mask)[aatype] * gather_atoms(mask, chi_idx).prod(-1)
    torsion_mask = torch.cat(
        [
            (prev_mask[..., 1] * prev_mask[..., 2] * mask[..., 0] * mask[..., 1])[..., None],
            (prev_mask[..., 2] * mask[..., :3].prod(-1))[..., None],
            (mask[..., :3].prod(-1) * mask[..., 4])[..., None],
            chi_mask,
        ],
        dim=-1,
    )
    rot, trans = from_3_points(quads[..., 1, :], quads[..., 2, :], quads[..., 0, :])
    fourth = torch.einsum("...ji,...j->...i", rot, quads[..., 3, :] - trans)
    sin_cos = torch.stack([fourth[..., 2], fourth[..., 1]], dim=-1)
    sin_cos = sin_cos / torch.sqrt((sin_cos**2).sum(-1, keepdim=True) + 1e-8)
    sin_cos = sin_cos * sin_cos.new_tensor([1.0, 1.0, -1.0, 1.0, 1.0, 1.0, 1.0])[:, None]
    periodic = table("CHI_PI_PERIODIC", mask)[aatype]
    mirror = torch.cat([torch.ones_like(periodic[..., :3]), 1.0 - 2.0 * periodic], dim=-1)
    return {
        "torsion_angles_sin_cos": sin_cos,
        "alt_torsion_angles_sin_cos": sin_cos * mirror[..., None],
        "torsion_angles_mask": torsion_mask,
    }


def build_atom37(aatype: torch.Tensor, rot: torch.Tensor, trans: torch.Tensor, angles: torch.Tensor):
    """Every heavy atom (atom37 positions and mask) of residues with backbone frames
    (rot, trans) and torsions (sin, cos) [*, N, 7, 2]: how synthetic chains get side chains."""
    group_rot, group_trans = torsion_frames(rot, trans, angles, aatype)
    atom14 = atom14_from_frames(group_rot, group_trans, aatype)
    exists = table("ATOM37_MASK", rot)[aatype]
    return atom14_to_atom37(atom14, table("ATOM37_TO_ATOM14", aatype)[aatype], exists), exists
