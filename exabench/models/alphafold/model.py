"""AlphaFold2 (supplement Algorithm 2) as the MLCommons HPC OpenFold reference trains it:
input and recycling embedders, template pair stack and pointwise attention, template torsion
rows, extra-MSA stack, Evoformer, structure module and auxiliary heads."""

from __future__ import annotations

import torch
from torch import nn

from exabench.models.alphafold.atoms import atom14_to_atom37, pseudo_beta
from exabench.models.alphafold.config import AlphaFoldConfig
from exabench.models.alphafold.embedders import (
    ExtraMSAEmbedder,
    InputEmbedder,
    RecyclingEmbedder,
    TemplateAngleEmbedder,
    TemplatePairEmbedder,
    TemplatePointwiseAttention,
    extra_msa_feat,
    template_angle_feat,
    template_pair_feat,
)
from exabench.models.alphafold.evoformer import EvoformerStack, ExtraMSAStack
from exabench.models.alphafold.heads import AuxiliaryHeads
from exabench.models.alphafold.pair import TemplatePairStack
from exabench.models.alphafold.structure import StructureModule


class AlphaFold(nn.Module):
    def __init__(self, cfg: AlphaFoldConfig | None = None):
        super().__init__()
        self.cfg = c = cfg or AlphaFoldConfig()
        self.input_embedder = InputEmbedder(c.tf_dim, c.msa_dim, c.c_z, c.c_m, c.relpos_k)
        self.recycling_embedder = RecyclingEmbedder(c.c_m, c.c_z, *c.recycle_bins)
        self.template_angle_embedder = TemplateAngleEmbedder(c.ta_dim, c.c_m)
        self.template_pair_embedder = TemplatePairEmbedder(c.tp_dim, c.c_t)
        self.template_pair_stack = TemplatePairStack(
            c.c_t,
            c.c_hidden_template_tri_att,
            c.c_hidden_template_tri_mul,
            c.template_blocks,
            c.tri_heads,
            c.template_transition_n,
            c.template_dropout,
            c.inf,
        )
        self.template_pointwise_attention = TemplatePointwiseAttention(
            c.c_t, c.c_z, c.c_hidden_template_pointwise, c.template_pointwise_heads, 1e5
        )
        self.extra_msa_embedder = ExtraMSAEmbedder(c.emsa_dim, c.c_e)
        trunk = dict(
            c_hidden_opm=c.c_hidden_opm,
            c_hidden_tri_mul=c.c_hidden_tri_mul,
            c_hidden_tri_att=c.c_hidden_tri_att,
            num_heads_msa=c.msa_heads,
            num_heads_tri=c.tri_heads,
            transition_n=c.transition_n,
            msa_dropout=c.msa_dropout,
            pair_dropout=c.pair_dropout,
            inf=c.inf,
            eps_opm=1e-3,
        )
        self.extra_msa_stack = ExtraMSAStack(
            c.c_e, c.c_z, c.extra_msa_blocks, c_hidden_msa_att=c.c_hidden_extra_msa_att, **trunk
        )
        self.evoformer_stack = EvoformerStack(
            c.c_m, c.c_z, c.c_s, c.evoformer_blocks, c_hidden_msa_att=c.c_hidden_msa_att, **trunk
        )
        self.structure_module = StructureModule(
            c.c_s,
            c.c_z,
            c.c_hidden_ipa,
            c.c_hidden_angle_resnet,
            c.ipa_heads,
            c.ipa_qk_points,
            c.ipa_v_points,
            c.structure_dropout,
            c.structure_blocks,
            c.angle_resnet_blocks,
            c.num_angles,
            10.0,
            1e5,
            1e-8,
        )
        self.auxiliary_heads = AuxiliaryHeads(
            c.c_s,
            c.c_z,
            c.c_m,
            c.c_hidden_plddt,
            c.plddt_bins,
            c.distogram_bins,
            c.msa_classes,
            c.atom_types,
            c.tm_bins,
            c.tm_enabled,
        )

    def forward(self, feats: dict, recycles: int = 0) -> dict:
        """`recycles` iterations without gradient feed the last one (Algorithm 31)."""
        prev = None
        for _ in range(recycles):
            with torch.no_grad():
                prev = self._iteration(feats, prev)[1]
        out, _ = self._iteration(feats, prev)
        out.update(self.auxiliary_heads(out))
        return out

    def _iteration(self, f: dict, prev):
        c = self.cfg
        seq_mask = f["seq_mask"]
        pair_mask = seq_mask[:, :, None] * seq_mask[:, None, :]
        n_clust = f["msa_feat"].shape[1]
        m, z = self.input_embedder(f["target_feat"], f["residue_index"], f["msa_feat"])
        if prev is None:
            prev = (m.new_zeros(m[:, 0].shape), z.new_zeros(z.shape), z.new_zeros(z.shape[:2] + (3,)))
        m0_prev, z_prev = self.recycling_embedder(*prev)
        m = torch.cat([m[:, :1] + m0_prev[:, None], m[:, 1:]], dim=1)
        z = z + z_prev

        # Templates: pair stack per template, pointwise attention into z; torsions as MSA rows.
        t = torch.stack(
            [
                self.template_pair_embedder(
                    template_pair_feat(f, i, *c.template_dgram, eps=1e-6, use_unit_vector=False)
                )
                for i in range(f["template_aatype"].shape[1])
            ],
            dim=1,
        )
        t = self.template_pair_stack(t, pair_mask)
        t = self.template_pointwise_attention(t, z, f["template_mask"])
        z = z + t * (f["template_mask"].sum(1) > 0).to(t.dtype)[:, None, None, None]
        m = torch.cat([m, self.template_angle_embedder(template_angle_feat(f))], dim=1)
        msa_mask = torch.cat([f["msa_mask"], f["template_torsion_angles_mask"][..., 2]], dim=1)

        a = self.extra_msa_embedder(extra_msa_feat(f))
        z = self.extra_msa_stack(a, z, f["extra_msa_mask"], pair_mask)
        m, z, s = self.evoformer_stack(m, z, msa_mask, pair_mask)
        out = {"msa": m[:, :n_clust], "pair": z, "single": s}
        sm = self.structure_module(s, z, seq_mask, f["aatype"])
        out.update({"sm_" + k: v for k, v in sm.items()})
        final = atom14_to_atom37(sm["positions"][:, -1], f["residx_atom37_to_atom14"], f["atom37_atom_exists"])
        out["final_atom_positions"] = final
        out["final_ca"] = final[..., 1, :]
        # the next recycling iteration embeds the built C-betas (C-alphas of glycines)
        x_prev = pseudo_beta(f["aatype"], final)
        return out, (m[:, 0].detach(), z.detach(), x_prev.detach())


def parameter_count(cfg: AlphaFoldConfig | None = None) -> int:
    """Parameters of the network built on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        return sum(p.numel() for p in AlphaFold(cfg).parameters())
