"""MLPerf-HPC DeepCAM in PyTorch: per-pixel segmentation of climate data (background,
tropical cyclone, atmospheric river), trained to a validation mean-IoU target.

Follows the MLCommons reference: DeepLabv3+ with the modified Xception encoder
(exabench.models.deeplab), weighted cross-entropy with w_c = f_c^-0.125, mean IoU per
sample with absent classes counting 1, LAMB / Adam / AdamW with eps 1e-6, warmup then
multistep or cosine LR per step, optional batch norm synchronised over groups of
ranks, one HDF5 file per sample min-max normalised with stats.h5, files sharded over
ranks. Data come from `data_dir` or are generated synthetically, untimed.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import register
from .base import Benchmark, Outcome, param
from .cosmoflow import _outcome


@dataclass
class DeepCAMParams:
    height: int = param(768, "input height in pixels (multiple of 16)", minimum=16)
    width: int = param(1152, "input width in pixels (multiple of 16)", minimum=16)
    model_width: int = param(1, "divisor of every channel count (1: the reference network)", minimum=1)
    middle_blocks: int = param(16, "Xception middle-flow blocks (reference 16)", minimum=0)
    batch_size: int = param(2, "samples per rank per step (reference 2)", minimum=1)
    optimizer: str = param("LAMB", "optimizer (the MLPerf-HPC allowed ones)", choices=("LAMB", "Adam", "AdamW"))
    start_lr: float = param(0.0055, "LR after warmup (before the warmup factor)", minimum=0.0)
    beta1: float = param(0.9, "first-moment decay", minimum=0.0)
    beta2: float = param(0.999, "second-moment decay", minimum=0.0)
    weight_decay: float = param(0.01, "weight decay", minimum=0.0)
    lr_schedule: str = param("multistep", "LR schedule after warmup", choices=("multistep", "cosine_annealing"))
    warmup_steps: int = param(400, "steps of linear LR warmup", minimum=0)
    warmup_factor: float = param(1.0, "LR multiplier reached at the end of warmup (1: warm up from 0)",
                                 minimum=1.0)
    milestones: str = param("800", "multistep: space-separated steps where the LR is multiplied by decay_rate")
    decay_rate: float = param(0.1, "multistep decay factor", minimum=0.0)
    t_max: int = param(5000, "cosine: steps of annealing after warmup", minimum=1)
    eta_min: float = param(0.0, "cosine: final LR", minimum=0.0)
    batchnorm_group_size: int = param(1, "ranks whose batch-norm statistics are synchronised (1: none)",
                                      minimum=1)
    max_epochs: int = param(64, "stop after this many epochs if the target is not reached", minimum=1)
    target_iou: float = param(0.82, "validation mean IoU to reach (MLPerf: 0.82)", minimum=0.0)
    data_dir: str = param("", "data set root (train/, validation/, stats.h5); empty: generate a synthetic one")
    n_train: int = param(1024, "training samples to generate (synthetic data only)", minimum=1)
    n_validation: int = param(128, "validation samples to generate (synthetic data only)", minimum=1)
    stage_dir: str = param("", "node-local directory to copy the data to first (timed); empty: no staging")
    division: str = param("open", "MLPerf division written to the log", choices=("open", "closed"))
    backend: str = param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                         choices=("auto", "gloo", "nccl", "mpi"))
    seed: int = param(333, "seed of weights, shuffling and synthetic data", minimum=1)


@register
class DeepCAM(Benchmark):
    name = "deepcam"
    suite = "mlperf-hpc"
    framework = "pytorch"
    Params = DeepCAMParams
    presets = {
        # Same code path, laptop scale: 96 x 144 inputs, channels / 8, 2 middle blocks.
        "tiny": {"height": 96, "width": 144, "model_width": 8, "middle_blocks": 2, "n_train": 64,
                 "n_validation": 16, "optimizer": "Adam", "start_lr": 0.004, "warmup_steps": 8,
                 "milestones": "400", "max_epochs": 12},
        "small": {"height": 192, "width": 288, "model_width": 4, "middle_blocks": 4, "n_train": 256,
                  "n_validation": 32, "warmup_steps": 50, "milestones": "1000", "max_epochs": 20},
        "full": {"n_train": 121266, "n_validation": 15158},
    }

    def run(self, p: DeepCAMParams, ctx) -> Outcome:
        import numpy as np
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        from .. import mlperf
        from ..data import climate
        from ..distributed import init_torch, shutdown_torch
        from ..models import segmentation as seg
        from ..models.deeplab import DeepLabV3Plus
        from ..models.optim import LAMB, deepcam_lr_factor

        for key in ("height", "width"):
            if getattr(p, key) % 16:
                raise ConfigError("(params)", key, getattr(p, key), "a multiple of 16 (output stride)")
        try:
            milestones = [int(m) for m in p.milestones.split()]
        except ValueError:
            raise ConfigError("(params)", "milestones", p.milestones, "space-separated step numbers") from None
        torch.set_num_threads(ctx.threads)
        world = ctx.world
        if world.size % p.batchnorm_group_size:
            raise ConfigError("(params)", "batchnorm_group_size", p.batchnorm_group_size,
                              f"a divisor of the {world.size} ranks")
        device, default_backend = mlperf.torch_device(world)
        backend = p.backend if p.backend != "auto" else default_backend
        init_torch(world, backend, ctx.run_dir)
        log_path = Path(ctx.run_dir) / "mlperf.log"
        log = mlperf.MLPerfLog(log_path, world.rank, "deepcam", division=p.division,
                               platform=mlperf.mlperf_platform(ctx))
        barrier = ctx.collectives.barrier
        staged = None
        try:
            root = Path(p.data_dir) if p.data_dir else Path(ctx.run_dir) / "data"
            if not p.data_dir:
                if world.rank == 0 and not (root / "stats.h5").exists():
                    climate.generate(root, p.n_train, p.n_validation, p.height, p.width, seed=p.seed)
                barrier()
            barrier()
            log.start("init_start")
            log.event("cache_clear", True)
            global_batch = p.batch_size * world.size
            mlperf.log_common(log, ctx, global_batch, p.seed)
            log.event("batchnorm_group_size", p.batchnorm_group_size)
            staging_time = 0.0
            if p.stage_dir:
                log.start("staging_start")
                staged = Path(p.stage_dir) / f"exabench-deepcam-{Path(ctx.run_dir).name}"
                t0 = time.perf_counter()
                if world.local_rank == 0:
                    files = [str(f) for f in root.rglob("*.h5")]
                    mlperf.stage_files(files, root, staged)
                barrier()
                staging_time = mlperf.allreduce([time.perf_counter() - t0], "max")[0]
                log.end("staging_stop", metadata={"staging_duration": staging_time})
                root = staged
            shift, scale = climate.read_stats(root / "stats.h5")
            train_files = climate.list_samples(root / "train")
            val_files = climate.list_samples(root / "validation")
            n_local = len(train_files) // world.size
            my_train = train_files[world.rank::world.size][:n_local]
            my_val = val_files[world.rank::world.size]
            steps = n_local // p.batch_size
            if steps < 1:
                raise ConfigError("(params)", "batch_size", p.batch_size,
                                  f"<= {n_local} (training samples per rank)", "leaves no step per epoch")
            log.event("train_samples", len(train_files))
            log.event("eval_samples", len(val_files))

            # Batch-norm groups of consecutive ranks; every rank must create every group.
            group = None
            if p.batchnorm_group_size > 1:
                for start in range(0, world.size, p.batchnorm_group_size):
                    g = dist.new_group(list(range(start, start + p.batchnorm_group_size)))
                    if start <= world.rank < start + p.batchnorm_group_size:
                        group = g
            torch.manual_seed(p.seed)
            model = DeepLabV3Plus(climate.CHANNELS, climate.CLASSES, p.model_width, p.middle_blocks,
                                  process_group=group).to(device)
            ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
            betas = (p.beta1, p.beta2)
            eps = 1e-6  # fixed by the HPC rules (opt_eps)
            if p.optimizer == "LAMB":
                opt = LAMB(ddp.parameters(), lr=p.start_lr, betas=betas, eps=eps, weight_decay=p.weight_decay)
            else:
                cls = torch.optim.Adam if p.optimizer == "Adam" else torch.optim.AdamW
                opt = cls(ddp.parameters(), lr=p.start_lr, betas=betas, eps=eps, weight_decay=p.weight_decay)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: deepcam_lr_factor(
                step, p.warmup_steps, p.warmup_factor, p.lr_schedule, milestones, p.decay_rate, p.t_max,
                p.eta_min / p.start_lr if p.start_lr else 0.0))
            log.event("opt_name", p.optimizer)
            log.event("opt_lr", p.start_lr)
            log.event("opt_betas", list(betas))
            log.event("opt_eps", eps)
            log.event("opt_weight_decay", p.weight_decay)
            if p.optimizer == "LAMB":
                log.event("opt_bias_correction", True)
                log.event("opt_grad_averaging", True)
                log.event("opt_max_grad_norm", 1.0)
            log.event("scheduler_type", p.lr_schedule)
            log.event("scheduler_lr_warmup_steps", p.warmup_steps)
            log.event("scheduler_lr_warmup_factor", p.warmup_factor)
            if p.lr_schedule == "multistep":
                log.event("scheduler_milestones", milestones)
                log.event("scheduler_decay_rate", p.decay_rate)
            else:
                log.event("scheduler_t_max", p.t_max)
                log.event("scheduler_eta_min", p.eta_min)
            weights = torch.tensor(seg.class_weights(), dtype=torch.float32, device=device)

            def batch(files):
                xs, ys = zip(*(climate.load_sample(f, shift, scale) for f in files))
                return torch.from_numpy(np.stack(xs)).to(device), torch.from_numpy(np.stack(ys)).to(device)

            losses: list[float] = []

            def train_epoch(epoch: int):
                order = np.random.default_rng(p.seed + epoch).permutation(n_local)
                ddp.train()
                t0 = time.perf_counter()
                total = 0.0
                for s in range(steps):
                    x, y = batch([my_train[i] for i in order[s * p.batch_size:(s + 1) * p.batch_size]])
                    opt.zero_grad(set_to_none=True)
                    loss = seg.weighted_cross_entropy(ddp(x), y, weights)
                    loss.backward()
                    opt.step()
                    sched.step()
                    total += float(loss.detach())
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds = mlperf.allreduce([time.perf_counter() - t0], "max")[0]
                mean_loss = mlperf.allreduce([total / steps])[0] / world.size
                losses.append(mean_loss)
                return seconds, steps * global_batch, mean_loss

            def evaluate(epoch: int) -> float:
                ddp.eval()
                iou_sum, count = 0.0, 0
                with torch.no_grad():
                    for s in range(0, len(my_val), p.batch_size):
                        x, y = batch(my_val[s:s + p.batch_size])
                        iou = seg.iou_per_sample(model(x).argmax(dim=1), y, climate.CLASSES)
                        iou_sum += float(iou.sum())
                        count += len(iou)
                iou_sum, count = mlperf.allreduce([iou_sum, float(count)])
                return iou_sum / count

            log.end("init_stop")
            result = mlperf.run_to_target(log, p.max_epochs, train_epoch, evaluate, "eval_accuracy", p.target_iou,
                                          higher_is_better=True, barrier=barrier)
            spread, checksum = mlperf.weight_spread(model)
            n_params = sum(x.numel() for x in model.parameters())
        finally:
            log.close()
            if staged is not None and world.local_rank == 0:
                shutil.rmtree(staged, ignore_errors=True)
            shutdown_torch()
        return _outcome("eval_accuracy", "IoU", p.target_iou, True, result, log_path, world, ctx, losses, spread,
                        checksum, {"parameters": n_params, "global_batch": global_batch,
                                   "staging_time_s": staging_time, "data_dir": str(root), "device": str(device),
                                   "backend": backend, "batchnorm_group_size": p.batchnorm_group_size})
