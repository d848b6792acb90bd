"""MLPerf-HPC CosmoFlow in PyTorch: regress 4 cosmological parameters from 3D dark-matter
volumes, trained to a validation MAE target, time-to-train measured as MLPerf does.

Follows the MLCommons reference (Keras): the 5-layer 3D CNN (exabench.models.cosmoflow),
MSE loss, MAE metric, SGD with momentum, LR = base_lr x global batch / base batch with
a linear warmup over epochs from base_lr and absolute decay factors at given epochs,
log(x + 1) on the int16 counts, data sharded over ranks by file. Data come from
`data_dir` (train/ and validation/ with TFRecord or HDF5 files in the reference
layout) or are generated synthetically, untimed, into the run directory.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import register
from .base import Benchmark, Check, Metric, Outcome, param


@dataclass
class CosmoFlowParams:
    sample_size: int = param(128, "edge of the cubic input volume in voxels (4 channels)", minimum=32)
    conv_size: int = param(32, "filters of the first conv layer (doubled per layer; reference 32)", minimum=1)
    kernel_size: int = param(3, "conv kernel edge", minimum=1)
    fc1_size: int = param(128, "units of the first dense layer", minimum=1)
    fc2_size: int = param(64, "units of the second dense layer", minimum=1)
    dropout: float = param(0.5, "dropout after each dense layer", minimum=0.0)
    batch_size: int = param(4, "samples per rank per step (reference 4)", minimum=1)
    base_lr: float = param(0.001, "LR at base_batch; scaled linearly with the global batch", minimum=0.0)
    base_batch: int = param(64, "global batch at which base_lr holds", minimum=1)
    warmup_epochs: int = param(4, "epochs of linear warmup from base_lr to the scaled LR", minimum=0)
    decay_schedule: str = param("32:0.25 64:0.125", "'epoch:factor ...' absolute LR factors from that epoch on")
    momentum: float = param(0.9, "SGD momentum", minimum=0.0)
    weight_decay: float = param(0.0, "L2 weight decay", minimum=0.0)
    max_epochs: int = param(128, "stop after this many epochs if the target is not reached", minimum=1)
    target_mae: float = param(0.124, "validation MAE to reach (MLPerf: 0.124)", minimum=0.0)
    data_dir: str = param("", "data set root (train/, validation/); empty: generate a synthetic one")
    data_format: str = param("tfrecord", "file format to read", choices=("tfrecord", "hdf5"))
    n_train: int = param(1024, "training samples to generate (synthetic data only)", minimum=1)
    n_validation: int = param(256, "validation samples to generate (synthetic data only)", minimum=1)
    stage_dir: str = param("", "node-local directory to copy the data to first (timed); empty: no staging")
    division: str = param("open", "MLPerf division written to the log", choices=("open", "closed"))
    backend: str = param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                         choices=("auto", "gloo", "nccl", "mpi"))
    seed: int = param(42, "seed of weights, shuffling and synthetic data", minimum=1)


def parse_decay(text: str, key: str = "decay_schedule") -> dict[int, float]:
    try:
        return {int(e): float(f) for e, f in (item.split(":") for item in text.split())}
    except ValueError:
        raise ConfigError("(params)", key, text, "space-separated 'epoch:factor' pairs, e.g. '32:0.25 64:0.125'") \
            from None


@register
class CosmoFlow(Benchmark):
    name = "cosmoflow"
    suite = "mlperf-hpc"
    framework = "pytorch"
    Params = CosmoFlowParams
    presets = {
        # Same code path, laptop scale: 32^3 volumes, narrow convs, a few hundred samples.
        # LR and batch tuned on the synthetic set (SGD reached MAE 0.10 in 6 epochs, one process).
        "tiny": {"sample_size": 32, "conv_size": 8, "dropout": 0.0, "n_train": 256, "n_validation": 64,
                 "batch_size": 2, "base_lr": 0.01, "base_batch": 4, "warmup_epochs": 1,
                 "decay_schedule": "8:0.5 12:0.25", "max_epochs": 16},
        "small": {"sample_size": 64, "conv_size": 16, "n_train": 1024, "n_validation": 256, "max_epochs": 32,
                  "base_lr": 0.002, "base_batch": 16, "warmup_epochs": 2, "decay_schedule": "16:0.25 24:0.125"},
        "full": {"sample_size": 128, "conv_size": 32, "n_train": 524288, "n_validation": 65536},
    }

    def run(self, p: CosmoFlowParams, ctx) -> Outcome:
        import numpy as np
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        from .. import mlperf
        from ..data import cosmo
        from ..distributed import init_torch, shutdown_torch
        from ..models.cosmoflow import CosmoFlow as Net
        from ..models.optim import cosmoflow_lr

        decay = parse_decay(p.decay_schedule)
        torch.set_num_threads(ctx.threads)
        world = ctx.world
        device, default_backend = mlperf.torch_device(world)
        backend = p.backend if p.backend != "auto" else default_backend
        init_torch(world, backend, ctx.run_dir)
        log_path = Path(ctx.run_dir) / "mlperf.log"
        log = mlperf.MLPerfLog(log_path, world.rank, "cosmoflow", division=p.division,
                               platform=mlperf.mlperf_platform(ctx))
        barrier = ctx.collectives.barrier
        staged = None
        try:
            root = Path(p.data_dir) if p.data_dir else Path(ctx.run_dir) / "data"
            if not p.data_dir:  # synthetic data: generated before init_start, not timed
                if world.rank == 0 and not (root / "validation").exists():
                    cosmo.generate(root, p.n_train, p.n_validation, p.sample_size, seed=p.seed)
                barrier()
            barrier()
            log.start("init_start")
            log.event("cache_clear", True)
            global_batch = p.batch_size * world.size
            mlperf.log_common(log, ctx, global_batch, p.seed)
            staging_time = 0.0
            if p.stage_dir:
                log.start("staging_start")
                staged = Path(p.stage_dir) / f"exabench-cosmoflow-{Path(ctx.run_dir).name}"
                t0 = time.perf_counter()
                if world.local_rank == 0:
                    files = [str(f) for f in root.rglob("*") if f.is_file() and f.parent.name in cosmo.SPLITS]
                    mlperf.stage_files(files, root, staged)
                barrier()
                staging_time = mlperf.allreduce([time.perf_counter() - t0], "max")[0]
                log.end("staging_stop", metadata={"staging_duration": staging_time})
                root = staged
            train_refs = cosmo.list_samples(root / "train", p.data_format, p.sample_size)
            val_refs = cosmo.list_samples(root / "validation", p.data_format, p.sample_size)
            # Shard by sample as the reference shards by file; equal counts keep DDP in lockstep.
            n_local = len(train_refs) // world.size
            my_train = train_refs[world.rank::world.size][:n_local]
            my_val = val_refs[world.rank::world.size]
            steps = n_local // p.batch_size
            if steps < 1:
                raise ConfigError("(params)", "batch_size", p.batch_size,
                                  f"<= {n_local} (training samples per rank)", "leaves no step per epoch")
            log.event("train_samples", len(train_refs))
            log.event("eval_samples", len(val_refs))

            torch.manual_seed(p.seed)
            model = Net(p.sample_size, conv_size=p.conv_size, kernel_size=p.kernel_size, fc1_size=p.fc1_size,
                        fc2_size=p.fc2_size, dropout=p.dropout).to(device)
            ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
            opt = torch.optim.SGD(ddp.parameters(), lr=p.base_lr, momentum=p.momentum,
                                  weight_decay=p.weight_decay)
            peak = p.base_lr * global_batch / p.base_batch
            for key, value in (("opt_name", "SGD"), ("opt_base_learning_rate", peak),
                               ("opt_learning_rate_warmup_epochs", p.warmup_epochs),
                               ("opt_learning_rate_warmup_factor", global_batch / p.base_batch),
                               ("opt_learning_rate_decay_boundary_epochs", sorted(decay)),
                               ("opt_learning_rate_decay_factor", max(decay.values()) if decay else 1.0),
                               ("dropout", p.dropout), ("opt_weight_decay", p.weight_decay)):
                log.event(key, value)

            def batch(refs):
                xs, ys = zip(*(cosmo.load_sample(r, p.data_format, p.sample_size) for r in refs))
                x = torch.from_numpy(np.stack([cosmo.log_transform(x) for x in xs])).to(device)
                return x, torch.from_numpy(np.stack(ys)).to(device)

            losses: list[float] = []

            def train_epoch(epoch: int):
                for g in opt.param_groups:  # Keras' LearningRateScheduler counts epochs from 0
                    g["lr"] = cosmoflow_lr(epoch - 1, p.base_lr, global_batch, p.base_batch, p.warmup_epochs,
                                           decay)
                order = np.random.default_rng(p.seed + epoch).permutation(n_local)
                ddp.train()
                t0 = time.perf_counter()
                total = 0.0
                for s in range(steps):
                    x, y = batch([my_train[i] for i in order[s * p.batch_size:(s + 1) * p.batch_size]])
                    opt.zero_grad(set_to_none=True)
                    loss = torch.nn.functional.mse_loss(ddp(x), y)
                    loss.backward()
                    opt.step()
                    total += float(loss.detach())
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                seconds = mlperf.allreduce([time.perf_counter() - t0], "max")[0]
                mean_loss = mlperf.allreduce([total / steps])[0] / world.size
                losses.append(mean_loss)
                return seconds, steps * global_batch, mean_loss

            def evaluate(epoch: int) -> float:
                ddp.eval()
                abs_err, count = 0.0, 0
                with torch.no_grad():
                    for s in range(0, len(my_val), p.batch_size):
                        x, y = batch(my_val[s:s + p.batch_size])
                        abs_err += float((model(x) - y).abs().sum())
                        count += y.numel()
                abs_err, count = mlperf.allreduce([abs_err, float(count)])
                return abs_err / count

            log.end("init_stop")
            result = mlperf.run_to_target(log, p.max_epochs, train_epoch, evaluate, "eval_error", p.target_mae,
                                          higher_is_better=False, barrier=barrier)
            spread, checksum = mlperf.weight_spread(model)
            n_params = sum(x.numel() for x in model.parameters())
        finally:
            log.close()
            if staged is not None and world.local_rank == 0:
                shutil.rmtree(staged, ignore_errors=True)
            shutdown_torch()
        return _outcome("eval_error", "MAE", p.target_mae, False, result, log_path, world, ctx, losses,
                        spread, checksum, {"parameters": n_params, "global_batch": global_batch,
                                           "peak_lr": peak, "staging_time_s": staging_time,
                                           "data_dir": str(root), "data_format": p.data_format,
                                           "device": str(device), "backend": backend})


def _outcome(quality_key: str, quality_name: str, target: float, higher_is_better: bool, result, log_path,
             world, ctx, losses, spread, checksum, info) -> Outcome:
    """Metrics, checks and info of a train-to-target run (shared by CosmoFlow and DeepCAM)."""
    from .. import mlperf

    epochs = result.epochs
    train_times = [e.train_time for e in epochs]
    samples = sum(e.train_samples for e in epochs)
    metrics = {
        "time_to_train": Metric(result.time_to_train, "s", higher_is_better=False, precision="fp32",
                                description="run_start to run_stop (MLPerf time-to-train); "
                                            "meaningful only when the target was reached"),
        "throughput": Metric(samples / sum(train_times), "samples/s",
                             [e.train_samples / e.train_time for e in epochs], "fp32",
                             description="global training samples / training time of the slowest rank, "
                                         "per epoch"),
        "epoch_time": Metric(sum(train_times) / len(epochs), "s", train_times, "fp32", higher_is_better=False,
                             description="training time of one epoch, slowest rank"),
        f"eval_{quality_name.lower()}": Metric(epochs[-1].quality, quality_name, [e.quality for e in epochs],
                                               "fp32", higher_is_better=higher_is_better,
                                               description=f"validation {quality_name} after each epoch"),
        "epochs": Metric(len(epochs), "epochs", higher_is_better=False, description="epochs run"),
    }
    if info.get("staging_time_s"):
        metrics["staging_time"] = Metric(info["staging_time_s"], "s", higher_is_better=False,
                                         description="copy of the data set to node-local storage")
    checks = [
        Check("quality_target_reached", result.reached,
              f"{quality_key} {epochs[-1].quality:.4f} after {len(epochs)} epochs; target "
              f"{'>=' if higher_is_better else '<='} {target}"),
        Check("loss_finite", all(math.isfinite(x) for x in losses), f"epoch losses {losses}"),
        Check("weights_in_sync", spread <= 1e-6 * max(1.0, abs(checksum)),
              f"parameter checksum spread over ranks {spread:.3g}"),
    ]
    if world.rank == 0:
        ok, output = mlperf.compliance_check(log_path)
        checks.append(Check("mlperf_compliance", ok, f"compliance_checker --usage hpc --ruleset "
                                                      f"{mlperf.HPC_RULESET}: {output.strip().splitlines()[-1:]}"))
    info.update({"mlperf_log": str(log_path), "mlperf_ruleset": mlperf.HPC_RULESET, "losses": losses,
                 "quality_per_epoch": [e.quality for e in epochs], "ranks": world.size})
    return Outcome(metrics, checks, info)
