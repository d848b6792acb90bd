"""The training loss of the MLCommons HPC OpenFold reference (openfold/openfold/loss.py with the
initial-training LossConfig) and the lDDT-Ca metric of its validation_metrics.py.

Terms and weights: FAPE 1.0 (backbone 0.5, side chains 0.5), supervised chi 1.0, distogram 0.3,
masked MSA 2.0, pLDDT 0.01, experimentally resolved 0.0 (computed and weighted 0, as the
reference does); the violation loss weighs 0.0 at this stage and the pTM loss is off, so
neither is computed. The weighted sum is scaled by the square root
of the cropped length and averaged over the batch. Not computed here: the side-chain FAPE (it
needs all-atom side chains, which this implementation does not build), so the FAPE term is
its backbone half only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from exabench.models.alphafold import geometry


@dataclass(frozen=True)
class LossWeights:
    fape: float = 1.0
    fape_backbone: float = 0.5
    fape_sidechain: float = 0.5  # logged; the side-chain term itself is not computed (see above)
    supervised_chi: float = 1.0
    chi_weight: float = 0.5
    angle_norm_weight: float = 0.01
    distogram: float = 0.3
    masked_msa: float = 2.0
    plddt: float = 0.01
    experimentally_resolved: float = 0.0  # 0.01 only in fine-tuning
    clamp_distance: float = 10.0
    length_scale: float = 10.0
    distogram_bins: tuple = (2.3125, 21.6875, 64)
    plddt_bins: int = 50
    plddt_cutoff: float = 15.0
    resolution_range: tuple = (0.1, 3.0)


def _masked_mean(mask, value, dims, eps=1e-4):
    return (mask * value).sum(dims) / (eps + mask.sum(dims))


def backbone_fape(out: dict, batch: dict, w: LossWeights, eps: float = 1e-4) -> torch.Tensor:
    """Frame-aligned point error of C-alphas in every backbone frame, averaged over the structure
    module's blocks; clamped at 10 A when batch["use_clamped_fape"] is 1, unclamped otherwise."""
    rot_p, t_p = out["sm_frames_rot"], out["sm_frames_trans"]  # [B, blocks, N, 3, 3], [B, blocks, N, 3]
    gt = batch["backbone_rigid_tensor"][:, None]
    rot_t, t_t = gt[..., :3, :3], gt[..., :3, 3]
    mask = batch["backbone_rigid_mask"][:, None]
    local_p = geometry.invert_apply(rot_p[..., :, None, :, :], t_p[..., :, None, :], t_p[..., None, :, :])
    local_t = geometry.invert_apply(rot_t[..., :, None, :, :], t_t[..., :, None, :], t_t[..., None, :, :])
    dist = torch.sqrt(((local_p - local_t) ** 2).sum(-1) + eps)  # [B, blocks, frames, points]
    pair = mask[..., :, None] * mask[..., None, :]

    def fape(d):
        return (d / w.length_scale * pair).sum((-1, -2)) / ((eps + mask.sum(-1)) ** 2)

    clamped = batch["use_clamped_fape"][:, None]
    value = fape(dist.clamp(max=w.clamp_distance)) * clamped + fape(dist) * (1 - clamped)
    return value.mean(1)


def supervised_chi(out: dict, batch: dict, w: LossWeights, eps: float = 1e-8) -> torch.Tensor:
    """Algorithm 27: squared chord distance of predicted and true chi (pi-periodic chis
    compared to both), plus the angle-norm penalty on the unnormalised angles."""
    pred = out["sm_angles"][..., 3:, :]  # [B, blocks, N, 4, 2]
    true = batch["chi_angles_sin_cos"][:, None]
    shifted = true * (1 - 2 * batch["chi_pi_periodic"])[:, None, ..., None]
    err = torch.minimum(((true - pred) ** 2).sum(-1), ((shifted - pred) ** 2).sum(-1))
    chi_mask = batch["chi_mask"][:, None].expand_as(err)
    loss = w.chi_weight * _masked_mean(chi_mask, err, (-1, -2, -3), eps)
    norm = torch.sqrt((out["sm_unnormalized_angles"] ** 2).sum(-1) + eps)
    seq = batch["seq_mask"][:, None, :, None].expand_as(norm)
    return loss + w.angle_norm_weight * _masked_mean(seq, (norm - 1.0).abs(), (-1, -2, -3), eps)


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
    terms = {
        "fape": w.fape * w.fape_backbone * backbone_fape(out, batch, w),
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
