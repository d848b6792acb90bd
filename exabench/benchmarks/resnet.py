"""ResNet-50 training throughput on synthetic data (torchvision model, DDP).

The Horovod synthetic-benchmark convention (one fixed random batch per rank on the
device, warmup steps excluded), measured honestly: every step's time is the slowest
rank's, and total throughput is global images / max elapsed over ranks, never
rank 0's figure times the world size.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from . import register
from .base import Benchmark, Check, Metric, Outcome, param


@dataclass
class ResNetParams:
    image_size: int = param(224, "input height and width in pixels", minimum=32)
    batch_size: int = param(32, "images per rank per step (weak scaling keeps it fixed)", minimum=1)
    num_classes: int = param(1000, "classifier outputs (1000 for the ImageNet head)", minimum=2)
    warmup_steps: int = param(10, "steps run before timing starts", minimum=0)
    steps: int = param(100, "timed steps", minimum=2)
    precision: str = param("fp32", "arithmetic precision of the forward/backward pass", choices=("fp32", "bf16"))
    channels_last: bool = param(False, "use the channels-last memory format")
    lr: float = param(0.01, "SGD learning rate", minimum=0.0)
    backend: str = param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                         choices=("auto", "gloo", "nccl", "mpi"))
    seed: int = param(42, "seed of the synthetic batch and the weights")
    fail_at_step: int = param(-1, "raise at this step on the last rank (to test failure handling); -1: never",
                              minimum=-1)


@register
class ResNet50(Benchmark):
    name = "resnet50"
    suite = "coral2-dl"
    framework = "pytorch"
    Params = ResNetParams
    id_params = ("precision",)
    presets = {
        "tiny": {"image_size": 64, "batch_size": 4, "warmup_steps": 2, "steps": 6},
        "small": {"image_size": 128, "batch_size": 16, "warmup_steps": 5, "steps": 20},
        "full": {"image_size": 224, "batch_size": 32, "warmup_steps": 10, "steps": 100},
    }

    def run(self, p: ResNetParams, ctx) -> Outcome:
        import torch
        import torch.nn.functional as F
        import torchvision
        from torch.nn.parallel import DistributedDataParallel as DDP

        from ..distributed import init_torch, shutdown_torch

        torch.set_num_threads(ctx.threads)
        world = ctx.world
        cuda = torch.cuda.is_available()
        device = torch.device(f"cuda:{world.local_rank % torch.cuda.device_count()}" if cuda else "cpu")
        if cuda:
            torch.cuda.set_device(device)
        backend = p.backend if p.backend != "auto" else ("nccl" if cuda else "gloo")
        init_torch(world, backend, ctx.run_dir)
        # No try/finally around the loop: a barrier on the way out of a failing rank would
        # wait forever for peers still in a collective; the runner exits and the launcher stops them.
        torch.manual_seed(p.seed)  # same initial weights on every rank (DDP also broadcasts them)
        model = torchvision.models.resnet50(weights=None, num_classes=p.num_classes).to(device)
        memory_format = torch.channels_last if p.channels_last else torch.contiguous_format
        model = model.to(memory_format=memory_format)
        ddp = DDP(model, device_ids=[device.index] if cuda else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=p.lr, momentum=0.9)
        gen = torch.Generator().manual_seed(p.seed + world.rank)
        images = torch.randn(p.batch_size, 3, p.image_size, p.image_size, generator=gen)
        images = images.to(device).contiguous(memory_format=memory_format)
        labels = torch.randint(0, p.num_classes, (p.batch_size,), generator=gen).to(device)
        autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=p.precision == "bf16")

        def sync():
            if cuda:
                torch.cuda.synchronize(device)

        losses, times = [], []
        for step in range(p.warmup_steps + p.steps):
            if step == p.fail_at_step and world.rank == world.size - 1:
                raise RuntimeError(f"injected failure at step {step} (fail_at_step)")
            sync()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            with autocast:
                loss = F.cross_entropy(ddp(images), labels)
            loss.backward()
            opt.step()
            sync()
            dt = time.perf_counter() - t0
            losses.append(float(loss.detach()))
            if step >= p.warmup_steps:
                times.append(dt)
        # The slowest rank sets every step's time and the total.
        t = torch.tensor(times, dtype=torch.float64)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        step_max = t.tolist()
        elapsed = sum(step_max)
        checksum = torch.tensor([sum(float(x.double().sum()) for x in model.parameters())], dtype=torch.float64)
        sums = [torch.zeros_like(checksum) for _ in range(world.size)]
        torch.distributed.all_gather(sums, checksum)
        weight_spread = float(max(s.item() for s in sums) - min(s.item() for s in sums))
        n_params = sum(x.numel() for x in model.parameters())
        shutdown_torch()

        global_batch = p.batch_size * world.size
        nodes = int(ctx.layout["nodes"])
        total = global_batch * p.steps / elapsed
        per_step = [global_batch / s for s in step_max]
        metrics = {
            "throughput": Metric(total, "images/s", per_step, p.precision,
                                 description="total images/s over all ranks: global batch x steps / max elapsed"),
            "throughput_per_rank": Metric(total / world.size, "images/s", [x / world.size for x in per_step],
                                          p.precision, description="total throughput / ranks"),
            "throughput_per_node": Metric(total / nodes, "images/s", [x / nodes for x in per_step], p.precision),
            "step_time": Metric(elapsed / p.steps, "s", step_max, p.precision, higher_is_better=False,
                                description="time of one step, slowest rank"),
        }
        half = max(1, len(losses) // 2)
        first, last = sum(losses[:half]) / half, sum(losses[-half:]) / half
        checks = [
            Check("loss_finite", all(math.isfinite(x) for x in losses), f"losses {losses[0]:.4g} .. {losses[-1]:.4g}"),
            Check("loss_falls", last < first, f"mean loss first half {first:.4f}, second half {last:.4f}"),
            Check("weights_in_sync", weight_spread <= 1e-6 * max(1.0, abs(checksum.item())),
                  f"parameter checksum spread over ranks {weight_spread:.3g}"),
        ]
        info = {"device": str(device), "backend": backend, "parameters": n_params, "global_batch": global_batch,
                "losses": losses}
        return Outcome(metrics, checks, info)
