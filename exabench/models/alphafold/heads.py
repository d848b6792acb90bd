"""Auxiliary heads (supplement 1.9): per-residue lDDT-Ca (pLDDT), distogram, masked MSA,
experimentally resolved atoms and, when enabled, the TM-score (predicted aligned error) head."""

from __future__ import annotations

from torch import nn

from exabench.models.alphafold.primitives import Linear


class PerResidueLDDTCaPredictor(nn.Module):
    def __init__(self, c_s: int, c_hidden: int, num_bins: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(c_s),
            Linear(c_s, c_hidden, init="relu"),
            nn.ReLU(),
            Linear(c_hidden, c_hidden, init="relu"),
            nn.ReLU(),
            Linear(c_hidden, num_bins, init="final"),
        )

    def forward(self, s):
        return self.net(s)


class AuxiliaryHeads(nn.Module):
    def __init__(
        self,
        c_s: int,
        c_z: int,
        c_m: int,
        plddt_hidden: int,
        plddt_bins: int,
        distogram_bins: int,
        msa_classes: int,
        atom_types: int,
        tm_bins: int,
        tm_enabled: bool,
    ):
        super().__init__()
        self.plddt = PerResidueLDDTCaPredictor(c_s, plddt_hidden, plddt_bins)
        self.distogram = Linear(c_z, distogram_bins, init="final")
        self.masked_msa = Linear(c_m, msa_classes, init="final")
        self.experimentally_resolved = Linear(c_s, atom_types, init="final")
        self.tm = Linear(c_z, tm_bins, init="final") if tm_enabled else None

    def forward(self, out: dict) -> dict:
        logits = self.distogram(out["pair"])
        heads = {
            "lddt_logits": self.plddt(out["sm_single"]),
            "distogram_logits": logits + logits.transpose(-2, -3),  # symmetric in i, j
            "masked_msa_logits": self.masked_msa(out["msa"]),
            "experimentally_resolved_logits": self.experimentally_resolved(out["single"]),
        }
        if self.tm is not None:
            heads["tm_logits"] = self.tm(out["pair"])
        return heads
