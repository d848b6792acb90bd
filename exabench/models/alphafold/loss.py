"""The training loss of the MLCommons HPC OpenFold reference (openfold/openfold/loss.py with the
initial-training LossConfig) and the lDDT-Ca metric of its validation_metrics.py.

Terms and weights: FAPE 1.0 (backbone 0.5: C-alphas in the backbone frames of every
structure-module iteration; side chains 0.5: all atom14 atoms in all 8 rigid-group frames of
the last iteration, against the ground truth renamed per residue to whichever naming of its
symmetric atoms fits the prediction better, clamped at 10 A, length scale 10 A), supervised
chi 1.0, distogram 0.3, masked MSA 2.0, pLDDT 0.01, experimentally resolved 0.0 (computed
and weighted 0, as the reference does). The weighted sum is scaled by the square root of the
cropped length and averaged over the batch.

Not computed: the violation loss (bond lengths and angles, clashes). The reference computes
it every step but weighs it 0.0 in initial training, so it changes neither the total nor a
gradient; it would need the stereochemistry tables it alone uses. The pTM loss is off in
initial training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from exabench.models.alphafold.atoms import table as residue_table
from exabench.models.alphafold.geometry import invert_apply


@dataclass(frozen=True)
class LossWeights:
    fape: float = 1.0
    fape_backbone: float = 0.5
    fape_sidechain: float = 0.5
    supervised_chi: float = 1.0
    chi_weight: float = 0.5
    angle_norm_weight: float = 0.01
    distogram: float = 0.3
    masked_msa: float = 2.0
    plddt: float = 0.01
    experimentally_resolved: float = 0.0  # 0.01 only in fine-tuning
    clamp_distance: float = 10.0  # backbone FAPE (when clamped)
    length_scale: float = 10.0
    sidechain_clamp_distance: float = 10.0
    sidechain_length_scale: float = 10.0
    distogram_bins: tuple = (2.3125, 21.6875, 64)
    plddt_bins: int = 50
    plddt_cutoff: float = 15.0
    resolution_range: tuple = (0.1, 3.0)


def _masked_mean(mask, value, dims, eps=1e-4):
    return (mask * value).sum(dims) / (eps + mask.sum(dims))


def compute_fape(
    frames: tuple,
    true_frames: tuple,
    frames_mask: torch.Tensor,
    points: torch.Tensor,
    true_points: torch.Tensor,
    points_mask: torch.Tensor,
    length_scale: float,
    clamp: float | None,
    eps: float,
) -> torch.Tensor:
    """Algorithm 28: the distance between each point seen from each predicted frame and the
    true point seen from the true frame, clamped, over the length scale, averaged over
    frames [*, F] and points [*, P] (frames: (rot [*, F, 3, 3], trans [*, F, 3]))."""
    local = invert_apply(frames[0][..., :, None, :, :], frames[1][..., :, None, :], points[..., None, :, :])
    true_local = invert_apply(
        true_frames[0][..., :, None, :, :], true_frames[1][..., :, None, :], true_points[..., None, :, :]
    )
    dist = torch.sqrt(((local - true_local) ** 2).sum(-1) + eps)  # [*, F, P]
    if clamp is not None:
        dist = dist.clamp(max=clamp)
    err = dist / length_scale * frames_mask[..., :, None] * points_mask[..., None, :]
    err = err.sum(-1) / (eps + frames_mask.sum(-1))[..., None]
    return err.sum(-1) / (eps + points_mask.sum(-1))


def backbone_fape(out: dict, batch: dict, w: LossWeights, eps: float = 1e-4) -> torch.Tensor:
    """FAPE of C-alphas in every backbone frame, averaged over the structure module's blocks;
    clamped at 10 A when batch["use_clamped_fape"] is 1, unclamped otherwise."""
    rot_p, t_p = out["sm_frames_rot"], out["sm_frames_trans"]  # [B, blocks, N, 3, 3], [B, blocks, N, 3]
    gt = batch["backbone_rigid_tensor"][:, None]
    true = (gt[..., :3, :3], gt[..., :3, 3])
    mask = batch["backbone_rigid_mask"][:, None]

    def fape(clamp):
        return compute_fape((rot_p, t_p), true, mask, t_p, true[1], mask, w.length_scale, clamp, eps)

    clamped = batch["use_clamped_fape"][:, None]
    value = fape(w.clamp_distance) * clamped + fape(None) * (1 - clamped)
    return value.mean(1)


def renamed_ground_truth(batch: dict, positions: torch.Tensor, eps: float = 1e-10) -> dict:
    """Algorithm 26: per residue, the naming of its symmetric atoms (true or swapped) whose
    distances to the residue's unambiguous atoms and to every other residue's atoms match the
    predicted atom14 `positions` [B, N, 14, 3] better; the ground truth renamed accordingly."""

    def dists(x):
        return torch.sqrt(eps + ((x[..., :, None, :, None, :] - x[..., None, :, None, :, :]) ** 2).sum(-1))

    pred = dists(positions)  # [B, N, N, 14, 14]
    gt, alt = batch["atom14_gt_positions"], batch["atom14_alt_gt_positions"]
    exists, ambiguous = batch["atom14_gt_exists"], batch["atom14_atom_is_ambiguous"]
    mask = (exists * ambiguous)[..., :, None, :, None] * (exists * (1.0 - ambiguous))[..., None, :, None, :]
    err = (mask * torch.sqrt(eps + (pred - dists(gt)) ** 2)).sum((-1, -2, -3))
    alt_err = (mask * torch.sqrt(eps + (pred - dists(alt)) ** 2)).sum((-1, -2, -3))
    better = (alt_err < err).to(positions.dtype)  # [B, N]
    alt_exists = batch["atom14_alt_gt_exists"]
    return {
        "alt_naming_is_better": better,
        "renamed_atom14_gt_positions": (1.0 - better[..., None, None]) * gt + better[..., None, None] * alt,
        "renamed_atom14_gt_exists": (1.0 - better[..., None]) * exists + better[..., None] * alt_exists,
    }


def sidechain_fape(out: dict, batch: dict, renamed: dict, w: LossWeights, eps: float = 1e-4) -> torch.Tensor:
    """FAPE of every atom14 atom in every rigid-group frame of the last iteration, against the
    renamed ground truth (and, where the alternative naming won, the alternative frames)."""
    better = renamed["alt_naming_is_better"][..., None, None, None]
    true = (1.0 - better) * batch["rigidgroups_gt_frames"] + better * batch["rigidgroups_alt_gt_frames"]
    B = true.shape[0]
    true = true.reshape(B, -1, 4, 4)
    frames = (out["sm_sidechain_rot"][:, -1].reshape(B, -1, 3, 3), out["sm_sidechain_trans"][:, -1].reshape(B, -1, 3))
    return compute_fape(
        frames,
        (true[..., :3, :3], true[..., :3, 3]),
        batch["rigidgroups_gt_exists"].reshape(B, -1),
        out["sm_positions"][:, -1].reshape(B, -1, 3),
        renamed["renamed_atom14_gt_positions"].reshape(B, -1, 3),
        renamed["renamed_atom14_gt_exists"].reshape(B, -1),
        w.sidechain_length_scale,
        w.sidechain_clamp_distance,
        eps,
    )


def fape(out: dict, batch: dict, renamed: dict, w: LossWeights) -> torch.Tensor:
    return w.fape_backbone * backbone_fape(out, batch, w) + w.fape_sidechain * sidechain_fape(out, batch, renamed, w)


def supervised_chi(out: dict, batch: dict, w: LossWeights, eps: float = 1e-8) -> torch.Tensor:
    """Algorithm 27: squared chord distance of predicted and true chi (pi-periodic chis
    compared to both), plus the angle-norm penalty on the unnormalised angles."""
    pred = out["sm_angles"][..., 3:, :]  # [B, blocks, N, 4, 2]
    true = batch["chi_angles_sin_cos"][:, None]
    periodic = residue_table("CHI_PI_PERIODIC", pred)[batch["aatype"]]
    shifted = true * (1 - 2 * periodic)[:, None, ..., None]
    err = torch.minimum(((true - pred) ** 2).sum(-1), ((shifted - pred) ** 2).sum(-1))
    chi_mask = batch["chi_mask"][:, None].expand_as(err)
    loss = w.chi_weight * _masked_mean(chi_mask, err, (-1, -2, -3))
    norm = torch.sqrt((out["sm_unnormalized_angles"] ** 2).sum(-1) + eps)
    seq = batch["seq_mask"][:, None, :, None].expand_as(norm)
    return loss + w.angle_norm_weight * _masked_mean(seq, (norm - 1.0).abs(), (-1, -2, -3))


def distogram(out: dict, batch: dict, w: LossWeights, eps: float = 1e-8) -> torch.Tensor:
    lo, hi, n = w.distogram_bins
    edges = torch.linspace(lo, hi, n - 1, device=out["distogram_logits"].device) ** 2
    pb = batch["pseudo_beta"]
    d2 = ((pb[..., :, None, :] - pb[..., None, :, :]) ** 2).sum(-1, keepdim=True)
    true_bins = (d2 > edges).sum(-1)
    errors = F.cross_entropy(out["distogram_logits"].permute(0, 3, 1, 2), true_bins, reduction="none")
    mask = batch["pseudo_beta_mask"][..., :, None] * batch["pseudo_beta_mask"][..., None, :]
    return (errors * mask).sum((-1, -2)) / (eps + mask.sum((-1, -2)))


def masked_msa(out: dict, batch: dict, w: LossWeights, eps: float = 1e-8) -> torch.Tensor:
    errors = F.cross_entropy(out["masked_msa_logits"].permute(0, 3, 1, 2), batch["true_msa"], reduction="none")
    mask = batch["bert_mask"]
    return (errors * mask).sum((-1, -2)) / (eps + mask.sum((-1, -2)))


def lddt(
    pred: torch.Tensor,
    true: torch.Tensor,
    mask: torch.Tensor,
    cutoff: float = 15.0,
    eps: float = 1e-10,
    per_residue: bool = True,
) -> torch.Tensor:
    """lDDT of points [*, N, 3] with mask [*, N]: the fraction of true distances under `cutoff`
    (other residues only) preserved within 0.5, 1, 2 and 4 A, averaged over the four."""
    dt = torch.sqrt(eps + ((true[..., :, None, :] - true[..., None, :, :]) ** 2).sum(-1))
    dp = torch.sqrt(eps + ((pred[..., :, None, :] - pred[..., None, :, :]) ** 2).sum(-1))
    n = mask.shape[-1]
    scored = (dt < cutoff) * mask[..., :, None] * mask[..., None, :] * (1.0 - torch.eye(n, device=mask.device))
    err = (dt - dp).abs()
    score = 0.25 * ((err < 0.5).to(err.dtype) + (err < 1.0) + (err < 2.0) + (err < 4.0))
    dims = (-1,) if per_residue else (-2, -1)
    return (eps + (scored * score).sum(dims)) / (eps + scored.sum(dims))


def lddt_ca(out: dict, batch: dict, per_residue: bool = False) -> torch.Tensor:
    """validation_metrics.py's lddt_ca: lDDT of the final C-alphas against the true ones."""
    return lddt(
        out["final_ca"], batch["all_atom_positions"][..., 1, :], batch["all_atom_mask"][..., 1], per_residue=per_residue
    )


def plddt(out: dict, batch: dict, w: LossWeights, eps: float = 1e-10) -> torch.Tensor:
    """Cross-entropy of the pLDDT head against the binned per-residue lDDT-Ca of the final
    structure (no gradient through the target); zero outside the resolution range."""
    score = lddt_ca(out, batch, per_residue=True).detach()
    bins = torch.clamp(torch.floor(score * w.plddt_bins).long(), max=w.plddt_bins - 1)
    errors = F.cross_entropy(out["lddt_logits"].permute(0, 2, 1), bins, reduction="none")
    mask = batch["all_atom_mask"][..., 1]
    loss = (errors * mask).sum(-1) / (eps + mask.sum(-1))
    lo, hi = w.resolution_range
    return loss * ((batch["resolution"] >= lo) & (batch["resolution"] <= hi))


def experimentally_resolved(out: dict, batch: dict, w: LossWeights, eps: float = 1e-8) -> torch.Tensor:
    """Sigmoid cross-entropy of the per-atom "resolved" logits over the atoms that exist."""
    errors = F.binary_cross_entropy_with_logits(
        out["experimentally_resolved_logits"], batch["all_atom_mask"], reduction="none"
    )
    exists = batch["atom37_atom_exists"]
    loss = (errors * exists).sum((-1, -2)) / (eps + exists.sum((-1, -2)))
    lo, hi = w.resolution_range
    return loss * ((batch["resolution"] >= lo) & (batch["resolution"] <= hi))


def alphafold_loss(out: dict, batch: dict, w: LossWeights = LossWeights()) -> tuple[torch.Tensor, dict]:
    """(scaled weighted total averaged over the batch, each weighted term's batch mean)."""
    renamed = renamed_ground_truth(batch, out["sm_positions"][:, -1])
    terms = {
        "fape": w.fape * fape(out, batch, renamed, w),
        "supervised_chi": w.supervised_chi * supervised_chi(out, batch, w),
        "distogram": w.distogram * distogram(out, batch, w),
        "masked_msa": w.masked_msa * masked_msa(out, batch, w),
        "plddt_loss": w.plddt * plddt(out, batch, w),
        "experimentally_resolved": w.experimentally_resolved * experimentally_resolved(out, batch, w),
    }
    total = sum(terms.values())
    crop = torch.full_like(batch["seq_length"], batch["aatype"].shape[1])
    scale = torch.sqrt(torch.minimum(batch["seq_length"], crop).to(total.dtype))
    return (scale * total).mean(), {k: float(v.detach().mean()) for k, v in terms.items()}
