"""MLPerf-HPC OpenCatalyst (OC20 S2EF) in PyTorch: DimeNet++ regressing atomic forces of
adsorbate-catalyst structures, trained to a validation forces-MAE target.

Follows the MLCommons HPC reference (open_catalyst, configs/mlperf_hpc.yml, trainer
`mlperf_forces`): DimeNet++ (exabench.models.dimenet) with hidden 192, 3 interaction blocks,
cutoff 6 A, forces = -dE/dpos; labels normalised (energy by its mean and std, forces by the
force std); loss = energy_coefficient x L1(energy) + force_coefficient x L1(forces of free
atoms), each L1 a sum over the local batch divided by the global number of structures or free
atoms (the reference's DDPLoss: not by the 3 x atoms force components); AdamW; LR warmup from warmup_factor x lr over warmup_steps, then x lr_gamma at each
milestone, stepped every step; evaluation every epoch: forces MAE over the free atoms of the
validation split in eV/A (`eval_error`), stop at the target. Data: the reference's LMDB
layout (exabench.data.oc20) from `data_dir` (train/, val_id/) or generated, untimed.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from exabench.errors import ConfigError
from exabench.benchmarks.registry import register
from exabench.training import devices
from exabench.benchmarks.base import Check, Outcome, param
from exabench.benchmarks.mlperf.base import MLPerfBenchmark, MLPerfParams


@dataclass
class OC20Params(MLPerfParams, seed=7):
    hidden_channels: int = param(192, "DimeNet++ hidden size (reference 192)", minimum=1)
    out_emb_channels: int = param(192, "output-block embedding size (reference 192)", minimum=1)
    num_blocks: int = param(3, "interaction blocks (reference 3)", minimum=1)
    int_emb_size: int = param(64, "triplet embedding size (reference default 64)", minimum=1)
    basis_emb_size: int = param(8, "basis embedding size (reference default 8)", minimum=1)
    num_radial: int = param(6, "radial basis functions", minimum=1)
    num_spherical: int = param(7, "spherical harmonics orders", minimum=1)
    cutoff: float = param(6.0, "interaction cutoff in Angstrom (also the generated graph's radius)", minimum=0.5)
    batch_size: int = param(8, "structures per rank per step (reference 8 x 32 GPUs = 256)", minimum=1)
    lr_initial: float = param(0.0004, "AdamW LR after warmup", minimum=0.0)
    warmup_steps: int = param(31252, "steps of linear warmup (reference: 4 epochs at global batch 256)", minimum=0)
    warmup_factor: float = param(0.2, "LR factor at step 0 of the warmup", minimum=0.0)
    lr_milestones: str = param("125008 187512 250016", "space-separated steps where the LR is multiplied by lr_gamma")
    lr_gamma: float = param(0.1, "LR decay factor at each milestone", minimum=0.0)
    max_epochs: int = param(30, "stop after this many epochs if the target is not reached", minimum=1)
    energy_coefficient: float = param(0.0, "weight of the energy L1 loss (reference 0: forces only)", minimum=0.0)
    force_coefficient: float = param(50.0, "weight of the forces L1 loss (reference 50)", minimum=0.0)
    energy_mean: float = param(-0.7554450631141663, "energy normaliser mean (eV; reference: the 2M split)")
    energy_std: float = param(2.887317180633545, "energy normaliser std (eV)", minimum=1e-9)
    force_std: float = param(2.887317180633545, "forces normaliser std (eV/A; mean 0)", minimum=1e-9)
    target_forces_mae: float = param(0.036, "validation forces MAE to reach, eV/A (MLPerf: 0.036)", minimum=0.0)
    data_dir: str = param("", "data set root (train/, val_id/ with data.NNNN.lmdb); empty: generate a synthetic one")
    n_train: int = param(2048, "training structures to generate (synthetic data only)", minimum=1)
    n_validation: int = param(256, "validation structures to generate (synthetic data only)", minimum=1)
    slab_layers: int = param(3, "metal layers of a synthetic slab (the bottom one fixed)", minimum=2)
    slab_size: int = param(2, "atoms along each in-plane lattice vector of a synthetic slab", minimum=1)


def lr_factor(step: int, warmup_steps: int, warmup_factor: float, milestones: list[int], gamma: float) -> float:
    """The reference's warmup_lr_lambda: linear from warmup_factor to 1 over warmup_steps, then
    gamma^(milestones passed)."""
    if step <= warmup_steps:
        alpha = step / float(warmup_steps) if warmup_steps else 1.0
        return warmup_factor * (1.0 - alpha) + alpha
    return gamma ** bisect.bisect(milestones, step)


def parse_milestones(text: str) -> list[int]:
    try:
        steps = [int(m) for m in text.split()]
    except ValueError:
        raise ConfigError("(params)", "lr_milestones", text, "space-separated step numbers") from None
    if steps != sorted(steps):
        raise ConfigError("(params)", "lr_milestones", text, "increasing step numbers")
    return steps


def global_l1(pred, target):
    """Sum of |pred - target| over this rank divided by the global number of samples (rows: the
    structures for energies, the free atoms for forces, not their 3 x atoms components), times the
    world size: DDP's gradient mean then gives the global per-sample sum, as the reference's
    DDPLoss does (L1 with reduction "sum", over input.shape[0] all-reduced across ranks)."""
    import torch
    import torch.distributed as dist
    world = dist.get_world_size() if dist.is_initialized() else 1
    total = torch.tensor([float(pred.shape[0])], device=pred.device)
    if world > 1:
        dist.all_reduce(total)
    return (pred - target).abs().sum() * world / total.clamp_min(1.0)[0]


@register
class OC20(MLPerfBenchmark):  # time_to_train: to the target forces MAE
    name = "oc20"
    Params = OC20Params
    presets = {
        # Same code path, laptop scale: a narrow 2-block DimeNet++ on 14-atom slabs, cutoff 3.5 A (the
        # synthetic potential's range). Its target, 0.025 eV/A, is below MLPerf's 0.036 (so the log
        # passes the checker) and below half the MAE of predicting zero forces on the small
        # validation split (0.054 to 0.08 depending on the draw). Tuned on the synthetic set
        # (1 process): forces MAE 0.023 eV/A after 2 epochs.
        "tiny": {"hidden_channels": 48, "out_emb_channels": 48, "num_blocks": 2, "int_emb_size": 16,
                 "basis_emb_size": 4, "cutoff": 3.5, "batch_size": 8, "lr_initial": 0.004, "warmup_steps": 8,
                 "lr_milestones": "80 120", "max_epochs": 10, "n_train": 128, "n_validation": 32,
                 "force_std": 0.1, "energy_mean": 0.0, "energy_std": 1.0, "target_forces_mae": 0.025},
        "small": {"hidden_channels": 96, "out_emb_channels": 96, "num_blocks": 2, "cutoff": 5.0, "batch_size": 4,
                  "lr_initial": 0.001, "warmup_steps": 100, "lr_milestones": "2000", "max_epochs": 20,
                  "n_train": 512, "n_validation": 64, "force_std": 0.1, "energy_mean": 0.0, "energy_std": 1.0},
        # The reference's data: S2EF 2M training split, val_id for validation (999,866 frames after
        # OC20's version-2 update: open_catalyst/DATASET.md in mlcommons/hpc).
        "full": {"n_train": 2000000, "n_validation": 999866},
    }

    def run(self, p: OC20Params, ctx) -> Outcome:
        import torch

        from exabench.data import oc20
        from exabench.benchmarks.mlperf.harness import TrainingRun
        from exabench.models.dimenet import DimeNetPlusPlus

        milestones = parse_milestones(p.lr_milestones)
        shape = oc20.SlabShape(nx=p.slab_size, ny=p.slab_size, layers=p.slab_layers)
        with TrainingRun(ctx, "oc20", p) as tr:
            root = tr.data_root(lambda r: oc20.generate(r, p.n_train, p.n_validation, p.cutoff, seed=p.data_seed,
                                                        shape=shape), oc20.SPLITS[-1])
            tr.begin_init()
            root = tr.stage(root, [str(f) for f in root.rglob("*.lmdb")])
            train_set, val_set = (oc20.LmdbSplit(root / split) for split in oc20.SPLITS)
            tr.shard(list(range(len(train_set))), list(range(len(val_set))))
            torch.manual_seed(p.seed)
            model = DimeNetPlusPlus(p.hidden_channels, p.num_blocks, p.int_emb_size, p.basis_emb_size,
                                    p.out_emb_channels, p.num_spherical, p.num_radial, p.cutoff).to(tr.device)
            ddp = devices.ddp(model, tr.device)
            opt = torch.optim.AdamW(ddp.parameters(), lr=p.lr_initial)
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda step: lr_factor(step, p.warmup_steps, p.warmup_factor, milestones, p.lr_gamma))
            for key, value in (("number_of_ranks", tr.world.size), ("opt_name", "AdamW"),
                               ("opt_base_learning_rate", p.lr_initial),
                               ("opt_learning_rate_warmup_steps", p.warmup_steps),
                               ("opt_learning_rate_warmup_factor", p.warmup_factor),
                               ("opt_learning_rate_decay_boundary_steps", milestones),
                               ("opt_learning_rate_decay_factor", p.lr_gamma)):
                tr.log.event(key, value)

            def batch(indices, split=train_set):
                b = oc20.collate([split[i] for i in indices], tr.device)
                return b, b

            def loss_fn(out, b):
                energy, forces = out
                free = b["fixed"] == 0
                loss = p.energy_coefficient * global_l1(energy, (b["y"] - p.energy_mean) / p.energy_std)
                return loss + p.force_coefficient * global_l1(forces[free], b["force"][free] / p.force_std)

            def train_epoch(epoch: int):
                return tr.train_epoch(epoch, ddp, opt, batch, loss_fn, sched.step)

            def score(out, b):  # forces MAE over free atoms, eV/A, as the reference's evaluator
                free = b["fixed"] == 0
                err = (out[1][free] * p.force_std - b["force"][free]).abs()
                return float(err.sum()), err.numel()

            def evaluate(epoch: int) -> float:
                return tr.evaluate(model, lambda idx: batch(idx, val_set), score)

            result = tr.train(p.max_epochs, train_epoch, evaluate, "eval_error", p.target_forces_mae, False)
            zero_mae = _zero_force_mae(val_set, tr)
            train_set.close()
            val_set.close()
            final = result.epochs[-1].quality
            floor = Check("beats_zero_forces", final <= 0.5 * zero_mae,
                          f"forces MAE {final:.4f} eV/A vs {zero_mae:.4f} for predicting zero forces "
                          "(must be at most half)")
            outcome = tr.outcome(result, model, "eval_error", "eV/A", p.target_forces_mae, False,
                                 {"data_dir": str(root), "zero_force_mae": zero_mae, "cutoff": p.cutoff})
            outcome.checks.append(floor)
            return outcome


def _zero_force_mae(val_set, tr) -> float:
    """Validation forces MAE of a model that predicts zero forces: the floor a run must beat."""
    from exabench.benchmarks.mlperf.harness import allreduce
    total, count = 0.0, 0
    for i in tr.my_val:
        s = val_set[i]
        free = s.fixed == 0
        total += float(s.force[free].abs().sum())
        count += int(free.sum()) * 3
    total, count = allreduce([total, float(count)])
    return total / count
