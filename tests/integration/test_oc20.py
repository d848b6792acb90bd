"""OC20 (DimeNet++ S2EF): the model against the MLCommons HPC reference's own code (parameter
count at the reference configuration, energy and forces at a small one), the periodic radius
graph against brute force, the LMDB layout, and a real 2-rank training run to the forces-MAE
target with a compliant MLPerf log."""

from __future__ import annotations

import itertools
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from exabench.data import oc20
from exabench.models.dimenet import DimeNetPlusPlus

@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a loaded 2-core machine torch's QR (orthogonal init) with 2 threads
    took 100 times longer (measured 0.06 s vs 0.0006 s for 192 x 192)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "oc20" / "dimenet_reference.json").read_text())


def _fill(model):
    """The deterministic weights the reference numbers were made with (REFERENCE['weights'])."""
    with torch.no_grad():
        for k, (name, p) in enumerate(model.named_parameters()):
            if not name.endswith("rbf.freq"):
                m = torch.arange(p.numel(), dtype=torch.float64)
                p.copy_((0.5 * torch.sin(0.37 * m + k) / p.shape[-1] ** 0.5).view(p.shape))


def test_reference_configuration_has_the_reference_parameter_count():
    # configs/mlperf_hpc.yml: hidden 192, out_emb 192, 3 blocks, 6 radial, 7 spherical, cutoff 6.
    assert REFERENCE["full_parameters"] == 1_810_182
    with torch.device("meta"):
        model = DimeNetPlusPlus(hidden_channels=192, num_blocks=3, out_emb_channels=192, cutoff=6.0)
    assert sum(p.numel() for p in model.parameters()) == REFERENCE["full_parameters"]


def test_energy_and_forces_match_the_reference_model():
    c = REFERENCE["small_config"]
    model = DimeNetPlusPlus(c["hidden_channels"], c["num_blocks"], c["int_emb_size"], c["basis_emb_size"],
                            c["out_emb_channels"], c["num_spherical"], c["num_radial"], c["cutoff"]).double()
    assert sum(p.numel() for p in model.parameters()) == REFERENCE["small_parameters"]
    _fill(model)
    structures = []
    for s in REFERENCE["structures"]:
        pos = torch.tensor(s["pos"], dtype=torch.float32)
        edge_index, offsets = oc20.radius_graph_pbc(pos.double(), torch.tensor(s["cell"]), c["cutoff"])
        n = len(pos)
        structures.append(oc20.S2EFData(pos=pos, atomic_numbers=torch.tensor(s["atomic_numbers"]),
                                        cell=torch.tensor(s["cell"]).view(1, 3, 3), natoms=n, edge_index=edge_index,
                                        cell_offsets=offsets, y=0.0, force=torch.zeros(n, 3), fixed=torch.zeros(n)))
    batch = {k: (v.double() if v.is_floating_point() else v) for k, v in oc20.collate(structures).items()}
    model.eval()
    energy, forces = model(batch)
    assert energy.tolist() == pytest.approx(REFERENCE["energy"], rel=1e-9, abs=1e-9)
    assert np.allclose(forces.detach().numpy(), np.array(REFERENCE["forces"]), rtol=1e-7, atol=1e-9)


def test_radius_graph_finds_every_periodic_neighbour_by_brute_force():
    rng = np.random.default_rng(3)
    cell = np.array([[3.1, 0.0, 0.0], [0.9, 2.8, 0.0], [0.4, -0.3, 3.6]])
    pos = rng.uniform(0, 1, (5, 3)) @ cell
    cutoff = 4.2
    edge_index, offsets = oc20.radius_graph_pbc(pos, cell, cutoff, max_neighbors=10**6)
    found = {(int(j), int(i), tuple(o.tolist())) for (j, i), o in zip(edge_index.T, offsets)}
    expected = set()
    for i, j in itertools.product(range(5), repeat=2):
        for o in itertools.product(range(-3, 4), repeat=3):
            d = np.linalg.norm(pos[j] + np.array(o) @ cell - pos[i])
            if 1e-8 < d <= cutoff:
                expected.add((j, i, o))
    assert found == expected and len(found) == edge_index.shape[1]
    # Capped at the nearest k per centre, nearest first.
    e3, o3 = oc20.radius_graph_pbc(pos, cell, cutoff, max_neighbors=3)
    assert torch.bincount(e3[1]).tolist() == [3] * 5
    d = (torch.tensor(pos)[e3[0]] + o3.double() @ torch.tensor(cell) - torch.tensor(pos)[e3[1]]).norm(dim=1)
    for i in range(5):
        mine = d[e3[1] == i]
        assert mine.tolist() == sorted(mine.tolist())
        assert float(mine.max()) <= sorted(x for (j, c, o) in expected if c == i
                                           for x in [np.linalg.norm(pos[j] + np.array(o) @ cell - pos[i])])[2] + 1e-9


def test_generated_split_has_the_reference_lmdb_layout(tmp_path):
    import lmdb
    counts = oc20.generate(tmp_path, 5, 3, cutoff=3.5, seed=2)
    assert counts == {"train": 5, "val_id": 3}
    files = sorted(p.name for p in (tmp_path / "train").iterdir())
    assert files == ["data.0000.lmdb", "data.0001.lmdb"]  # no lock or temporary files left
    env = lmdb.open(str(tmp_path / "train" / "data.0000.lmdb"), subdir=False, readonly=True, lock=False)
    with env.begin() as txn:
        assert pickle.loads(txn.get(b"length")) == 3
        keys = sorted(k.decode() for k, _ in txn.cursor())
    env.close()
    assert keys == ["0", "1", "2", "length"]
    split = oc20.LmdbSplit(tmp_path / "train")
    assert len(split) == 5
    s = split[4]
    n = s.natoms
    assert s.pos.dtype == torch.float32 and s.pos.shape == (n, 3)
    assert s.atomic_numbers.dtype == torch.float32 and s.cell.shape == (1, 3, 3)
    assert s.tags.dtype == torch.int64 and set(s.tags.tolist()) <= {0, 1, 2} and 2 in s.tags.tolist()
    assert s.fixed.dtype == torch.float32 and s.force.shape == (n, 3) and isinstance(s.y, float)
    assert s.edge_index.dtype == torch.int64 and s.cell_offsets.shape == (s.edge_index.shape[1], 3)
    # The stored forces are -dE/dpos of the stored energy's potential.
    pos = s.pos.double().requires_grad_(True)
    energy = oc20.morse_energy(pos, s.atomic_numbers.tolist(), s.cell.view(3, 3).double(),
                               *oc20.radius_graph_pbc(s.pos.double(), s.cell.view(3, 3), oc20.POTENTIAL_CUTOFF, 10**6))
    (grad,) = torch.autograd.grad(energy, pos)
    assert float(energy.detach()) == pytest.approx(s.y, abs=1e-4)
    assert torch.allclose(-grad.float(), s.force, atol=1e-4)
    split.close()


def test_torch_geometric_data_objects_read_without_torch_geometric(tmp_path):
    # A pickle naming torch_geometric 1.x's Data class (as the released LMDBs do) loads as S2EFData.
    blob = pickle.dumps(oc20.S2EFData(pos=[[0.0, 0.0, 0.0]] * 2, natoms=2), protocol=0)
    blob = blob.replace(b"exabench.data.oc20\nS2EFData", b"torch_geometric.data.data\nData")
    assert oc20.loads(blob).natoms == 2
    with pytest.raises(ValueError, match="without `pos`"):
        oc20.loads(pickle.dumps({"x": 1}))


class _Planted:
    """An LMDB entry planted in a shared data set: unpickling it would run `touch marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


class _StorageBytes:
    """A tensor's storage as pickled tensors hold it: bytes for torch.storage._load_from_bytes."""

    def __init__(self, blob):
        self.blob = blob

    def __reduce__(self):
        import torch.storage
        return torch.storage._load_from_bytes, (self.blob,)


def test_a_planted_entry_runs_no_code_and_is_refused_naming_its_file(tmp_path):
    marker = tmp_path / "planted-code-ran"
    planted = tmp_path / "split" / "data.0000.lmdb"
    oc20.write_lmdb(planted, [_Planted(marker)])
    split = oc20.LmdbSplit(tmp_path / "split")
    # refused naming its file, before anything in it runs
    with pytest.raises(ValueError, match=rf"^{planted}: entry 0 names posix.system, .*; refused"):
        split[0]
    # ... nor inside a tensor's storage bytes, which torch's own reader reads as any pickle
    with pytest.raises(pickle.UnpicklingError):
        oc20.loads(pickle.dumps(_StorageBytes(pickle.dumps(_Planted(marker)))))
    assert not marker.exists()
    split.close()


def test_lr_schedule_is_the_references_warmup_lr_lambda():
    from exabench.benchmarks.mlperf.oc20 import lr_factor
    ms = [125008, 187512, 250016]
    assert lr_factor(0, 31252, 0.2, ms, 0.1) == pytest.approx(0.2)
    assert lr_factor(15626, 31252, 0.2, ms, 0.1) == pytest.approx(0.6)
    assert lr_factor(31252, 31252, 0.2, ms, 0.1) == pytest.approx(1.0)
    assert lr_factor(125007, 31252, 0.2, ms, 0.1) == pytest.approx(1.0)
    assert lr_factor(125008, 31252, 0.2, ms, 0.1) == pytest.approx(0.1)
    assert lr_factor(250016, 31252, 0.2, ms, 0.1) == pytest.approx(0.001)


@pytest.mark.timeout(300)
def test_tiny_preset_reaches_the_target_on_two_ranks(tmp_path):
    """Real: mpirun -np 2, Gloo DDP with forces from autograd inside the forward, LMDB input."""
    from helpers_mlperf import make_spec, run_mpi
    rec = run_mpi(make_spec(tmp_path, "oc20", "tiny", {}, ranks=2), 2)
    checks = {c["name"]: c for c in rec["checks"]}
    assert rec["status"] == "ok", rec["error"]
    for name in ("quality_target_reached", "mlperf_compliance", "beats_zero_forces", "weights_in_sync"):
        assert checks[name]["passed"], checks[name]
    mae = rec["info"]["quality_per_epoch"]
    assert mae[-1] <= 0.036 < rec["info"]["zero_force_mae"] / 2 + 0.036
    assert mae[-1] < mae[0] or len(mae) == 1
    lines = [json.loads(x.split(":::MLLOG ", 1)[1]) for x in open(rec["info"]["mlperf_log"]).read().splitlines()]
    keys = {x["key"]: x["value"] for x in lines}
    assert keys["submission_benchmark"] == "oc20" and keys["opt_name"] == "AdamW"
    assert keys["global_batch_size"] == 16 and keys["train_samples"] == 128 and keys["eval_samples"] == 32
    assert keys["number_of_ranks"] == 2 and keys["number_of_nodes"] == 1
    for key in ("cache_clear", "number_of_nodes", "accelerators_per_node", "opt_learning_rate_warmup_steps",
                "opt_learning_rate_decay_boundary_steps", "eval_error", "run_stop"):
        assert key in keys


def _forces(atoms: int, error_sum: float):
    """Predicted forces of `atoms` free atoms whose absolute errors against zero sum to `error_sum`."""
    import torch
    return torch.full((atoms, 3), error_sum / (3 * atoms)), torch.zeros(atoms, 3)


def _loss_on_rank(rank: int, world: int, init: str, out: str, split: list) -> None:
    import torch.distributed as dist
    from exabench.benchmarks.mlperf.oc20 import global_l1
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        atoms, error_sum = split[rank]
        Path(f"{out}.{rank}").write_text(str(float(global_l1(*_forces(atoms, error_sum)))))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("split", [[(4, 16.0), (5, 16.0)], [(9, 32.0)], [(1, 2.0), (8, 30.0)]],
                         ids=["two-ranks", "one-rank", "uneven"])
def test_force_loss_is_the_references_per_free_atom_l1(tmp_path, split):
    """The reference's DDPLoss: each rank's L1 sum x world size / the free atoms of all ranks, so the
    mean DDP takes over ranks is the error per free atom: 32 over 9 atoms is 3.5556 (not 1.1852, a
    division by the 3 x 9 force components)."""
    import torch.multiprocessing as mp
    world = len(split)
    out = str(tmp_path / "loss")
    mp.spawn(_loss_on_rank, args=(world, f"file://{tmp_path / 'rendezvous'}", out, split), nprocs=world)
    per_rank = [float(Path(f"{out}.{r}").read_text()) for r in range(world)]
    ddp_mean = sum(per_rank) / world  # what the averaged gradients minimise
    assert ddp_mean == pytest.approx(32.0 / 9.0, rel=1e-6) and round(ddp_mean, 4) == 3.5556
