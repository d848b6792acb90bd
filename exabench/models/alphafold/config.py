"""Sizes of the AlphaFold2 network. The defaults are the MLCommons HPC OpenFold reference's
initial-training configuration (openfold/openfold/config.py, AlphaFoldConfig defaults with
the initial_training stage): 93,229,082 parameters. Smaller presets change only these knobs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AlphaFoldConfig:
    c_m: int = 256  # MSA channels
    c_z: int = 128  # pair channels
    c_s: int = 384  # single channels
    c_t: int = 64  # template pair channels
    c_e: int = 64  # extra-MSA channels
    evoformer_blocks: int = 48
    extra_msa_blocks: int = 4
    template_blocks: int = 2
    structure_blocks: int = 8
    msa_heads: int = 8
    tri_heads: int = 4
    c_hidden_msa_att: int = 32
    c_hidden_extra_msa_att: int = 8
    c_hidden_opm: int = 32
    c_hidden_tri_mul: int = 128
    c_hidden_tri_att: int = 32
    c_hidden_template_tri_mul: int = 64
    c_hidden_template_tri_att: int = 16
    c_hidden_template_pointwise: int = 16
    template_pointwise_heads: int = 4
    c_hidden_ipa: int = 16
    ipa_heads: int = 12
    ipa_qk_points: int = 4
    ipa_v_points: int = 8
    c_hidden_angle_resnet: int = 128
    angle_resnet_blocks: int = 2
    c_hidden_plddt: int = 128
    transition_n: int = 4
    template_transition_n: int = 2
    msa_dropout: float = 0.15
    pair_dropout: float = 0.25
    template_dropout: float = 0.25
    structure_dropout: float = 0.1
    tm_enabled: bool = False  # the pTM head belongs to fine-tuning, not initial training
    inf: float = 1e9
    # fixed by the features, not by the preset
    tf_dim: int = 22
    msa_dim: int = 49
    emsa_dim: int = 25
    ta_dim: int = 57
    tp_dim: int = 88
    relpos_k: int = 32
    recycle_bins: tuple = (3.25, 20.75, 15, 1e8)
    template_dgram: tuple = (3.25, 50.75, 39, 1e5)  # min, max, bins, inf of the template distogram
    num_angles: int = 7
    plddt_bins: int = 50
    distogram_bins: int = 64
    msa_classes: int = 23
    atom_types: int = 37
    tm_bins: int = 64


def scaled_config(
    width_divisor: int,
    evoformer_blocks: int,
    extra_msa_blocks: int,
    template_blocks: int,
    structure_blocks: int,
    **overrides,
) -> AlphaFoldConfig:
    """The reference network with every channel and hidden width divided by `width_divisor`
    (at least 1) and the given block counts; head counts stay. (1, 48, 4, 2, 8) is the reference."""
    ref = AlphaFoldConfig()
    widths = {
        k: max(1, getattr(ref, k) // width_divisor)
        for k in (
            "c_m",
            "c_z",
            "c_s",
            "c_t",
            "c_e",
            "c_hidden_msa_att",
            "c_hidden_extra_msa_att",
            "c_hidden_opm",
            "c_hidden_tri_mul",
            "c_hidden_tri_att",
            "c_hidden_template_tri_mul",
            "c_hidden_template_tri_att",
            "c_hidden_template_pointwise",
            "c_hidden_ipa",
            "c_hidden_angle_resnet",
            "c_hidden_plddt",
        )
    }
    return AlphaFoldConfig(
        **widths,
        evoformer_blocks=evoformer_blocks,
        extra_msa_blocks=extra_msa_blocks,
        template_blocks=template_blocks,
        structure_blocks=structure_blocks,
        **overrides,
    )
