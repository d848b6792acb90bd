"""Auxiliary heads (supplement 1.9): per-residue lDDT-Ca (pLDDT), distogram, masked MSA,
experimentally resolved atoms and, when enabled, the TM-score (predicted aligned error) head."""

from __future__ import annotations

from torch import nn

from exabench.models.alphafold.primitives import Linear, three_layer_relu


class PerResidueLDDTCaPredictor(nn.Module):
    def __init__(self, c_s: int, c_hidden: int, num_bins: int):
        super().__init__()
        # One Sequential, LayerNorm first: the parameter names (net.0 ... net.5) stay those of the
        # packaged checkpoint.
        self.net = nn.Sequential(nn.LayerNorm(c_s), *three_layer_relu(c_s, c_hidden, num_bins))

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
