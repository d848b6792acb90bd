"""Training helpers shared by the deep-learning workloads: the large-batch learning-rate
rules (linear scaling with gradual warmup, Goyal et al. 2017), LARS/LARC, precision
settings (fp32, tf32, fp16 with loss scaling, bf16) and one data-parallel layer over
torch DDP (NCCL/Gloo/MPI) and Horovod.

torch is imported at module import: import this module inside a benchmark's run().
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from exabench.errors import NotRunnableHere
from exabench.training.lr_rules import scaled_lr, warmup_factor  # noqa: F401 - re-exported: the torch workloads' names

PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
BACKENDS = ("auto", "gloo", "nccl", "mpi", "horovod")


# -- learning rate -----------------------------------------------------------
def warmup_schedule(optimizer, warmup_steps: int, start: float):
    """A LambdaLR applying `warmup_factor` per optimizer step (on the torch optimizer inside any wrapper)."""
    while not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer.base  # LARC and the Horovod LARC wrapper name what they wrap
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_factor(step, warmup_steps, start))


# -- LARS / LARC -------------------------------------------------------------
class LARC:
    """Layer-wise adaptive rate control around any optimizer (NVIDIA apex's LARC).

    Per parameter: local_lr = trust * ||w|| / (||g|| + wd * ||w|| + eps). Clip mode
    (LARC) takes min(local_lr, lr), i.e. scales the gradient by min(local_lr / lr, 1);
    scale mode (LARS) scales it by local_lr. Weight decay is folded into the gradient
    here, so the wrapped optimizer's own is switched off during its step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, trust_coefficient: float = 0.02, clip: bool = True,
                 eps: float = 1e-8):
        self.optim = self.base = optimizer
        self.trust_coefficient = trust_coefficient
        self.clip = clip
        self.eps = eps

    def __getattr__(self, name):  # state_dict, zero_grad, param_groups ... of the wrapped optimizer
        return getattr(self.optim, name)

    @torch.no_grad()
    def adapt_gradients(self) -> None:
        for group in self.optim.param_groups:
            wd = group.get("weight_decay", 0.0)
            for p in group["params"]:
                if p.grad is None:
                    continue
                w_norm, g_norm = torch.norm(p), torch.norm(p.grad)
                if w_norm == 0 or g_norm == 0:
                    continue  # leave zero weights (fresh biases) or zero gradients as they are
                local_lr = self.trust_coefficient * w_norm / (g_norm + wd * w_norm + self.eps)
                if self.clip:
                    local_lr = torch.clamp(local_lr / group["lr"], max=1.0)
                p.grad.add_(p, alpha=wd).mul_(local_lr)

    def step(self, closure=None):
        saved = [g.get("weight_decay", 0.0) for g in self.optim.param_groups]
        self.adapt_gradients()
        for g in self.optim.param_groups:
            g["weight_decay"] = 0.0
        try:
            return self.optim.step(closure)
        finally:
            for g, wd in zip(self.optim.param_groups, saved):
                g["weight_decay"] = wd


# -- precision ---------------------------------------------------------------
@dataclass
class Precision:
    """How a precision name is realised on a device, and what the record should say about it."""

    name: str
    autocast_dtype: torch.dtype | None
    loss_scaling: bool
    note: str

    def autocast(self, device: torch.device):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.autocast_dtype)

    def grad_scaler(self, device: torch.device):
        return torch.amp.GradScaler(device.type, enabled=self.loss_scaling)


def precision_for(name: str, device: torch.device) -> Precision:
    """Set up `name` on `device` (tf32 switches the matmul/cuDNN flags); refuses what cannot run."""
    if name not in PRECISIONS:
        raise ValueError(f"precision {name!r}: valid are {', '.join(PRECISIONS)}")
    cuda = device.type == "cuda"
    tf32 = name == "tf32"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    if tf32:
        if not cuda or torch.cuda.get_device_capability(device)[0] < 8:
            raise NotRunnableHere("precision tf32 needs an NVIDIA GPU of compute capability >= 8.0 "
                                  f"(Ampere or later); this run has {device}")
        return Precision(name, None, False, "fp32 storage, TF32 tensor-core matmul and convolution")
    if name == "fp16":
        if cuda:
            return Precision(name, torch.float16, True, "autocast fp16 with dynamic loss scaling (GradScaler)")
        # CPU autocast supports float16 in torch 2.x but runs it through slow reference kernels; the
        # GradScaler does run on CPU. Said plainly so nobody compares it with a GPU's fp16.
        return Precision(name, torch.float16, True,
                         "EMULATED on CPU: autocast fp16 through CPU kernels, loss scaling active; "
                         "not representative of fp16 hardware")
    if name == "bf16":
        return Precision(name, torch.bfloat16, False, "autocast bf16, no loss scaling (8-bit exponent)")
    return Precision(name, None, False, "fp32 (tf32 tensor cores disabled)" if cuda else "fp32")


# -- data parallelism --------------------------------------------------------
class DataParallel:
    """One interface over torch DDP and Horovod: wrap the model and optimizer, reduce
    timing figures, gather objects, shut down. Built by `data_parallel()`."""

    backend: str

    def step(self, optimizer, scaler) -> None:
        """The optimizer step through the loss scaler (a plain step when scaling is off)."""
        scaler.step(optimizer)

    def max(self, values: list[float]) -> list[float]:
        raise NotImplementedError

    def allgather(self, obj) -> list:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError


class TorchDDP(DataParallel):
    def __init__(self, world, backend: str, run_dir, device: torch.device):
        from exabench.training.distributed import init_torch
        self.backend, self.world, self.device = backend, world, device
        init_torch(world, backend, run_dir)

    def wrap(self, model, optimizer, named_parameters=None):
        from exabench.training.devices import ddp
        if self.world.size == 1:
            return model, optimizer  # one rank: nothing to average, DDP's bucket copies would be pure overhead
        return ddp(model, self.device), optimizer

    def max(self, values):
        from exabench.training.distributed import torch_allreduce
        return torch_allreduce(values, "max")

    def allgather(self, obj):
        out = [None] * self.world.size
        torch.distributed.all_gather_object(out, obj)
        return out

    def shutdown(self):
        from exabench.training.distributed import shutdown_torch
        shutdown_torch()


class Horovod(DataParallel):
    """Horovod: allreduce inside DistributedOptimizer, tensor fusion, optional fp16 compression."""

    def __init__(self, world, fusion_threshold_mb: float, compression: str):
        # Read by Horovod at init: the fusion buffer size in bytes.
        os.environ["HOROVOD_FUSION_THRESHOLD"] = str(int(fusion_threshold_mb * 1024 * 1024))
        if world.mpi:
            # MPI initialised by mpi4py first: Horovod then leaves MPI_Finalize to it, and the
            # runner's own collectives still work after hvd.shutdown().
            from mpi4py import MPI  # noqa: F401
        import horovod.torch as hvd

        from exabench.training.distributed import init_horovod
        init_horovod(hvd)
        if hvd.size() != world.size:
            raise RuntimeError(f"Horovod sees {hvd.size()} ranks but the launcher says {world.size}")
        self.hvd, self.backend, self.compression = hvd, "horovod", compression

    def wrap(self, model, optimizer, named_parameters=None):
        hvd = self.hvd
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        compression = hvd.Compression.fp16 if self.compression == "fp16" else hvd.Compression.none
        inner = optimizer.optim if isinstance(optimizer, LARC) else optimizer
        dist_opt = hvd.DistributedOptimizer(inner, named_parameters=model.named_parameters(),
                                            compression=compression)
        if isinstance(optimizer, LARC):  # LARC adapts the already averaged gradients
            dist_opt = _HorovodLARC(dist_opt, optimizer)
        return model, dist_opt

    def step(self, optimizer, scaler) -> None:
        if not scaler.is_enabled():
            optimizer.step()
            return
        # The scaler must see averaged gradients: synchronise first, then step without a second allreduce.
        optimizer.synchronize()
        with optimizer.skip_synchronize():
            scaler.step(optimizer)

    def max(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        gathered = self.hvd.allgather(t.unsqueeze(0))
        return gathered.max(dim=0).values.tolist()

    def allgather(self, obj):
        return self.hvd.allgather_object(obj)

    def shutdown(self):
        self.hvd.join()  # every rank reaches here before any leaves
        self.hvd.shutdown()


class _HorovodLARC:
    """LARC over a Horovod DistributedOptimizer: synchronize (average), adapt, then step."""

    def __init__(self, dist_opt, larc: LARC):
        self.dist_opt, self.larc = dist_opt, larc
        self.base = dist_opt

    def __getattr__(self, name):
        return getattr(self.dist_opt, name)

    def step(self, closure=None):
        self.dist_opt.synchronize()
        self.larc.adapt_gradients()
        saved = [g.get("weight_decay", 0.0) for g in self.dist_opt.param_groups]
        for g in self.dist_opt.param_groups:
            g["weight_decay"] = 0.0
        try:
            with self.dist_opt.skip_synchronize():
                return self.dist_opt.step(closure)
        finally:
            for g, wd in zip(self.dist_opt.param_groups, saved):
                g["weight_decay"] = wd


def data_parallel(backend: str, world, run_dir, device: torch.device, fusion_threshold_mb: float = 64.0,
                  compression: str = "none") -> DataParallel:
    """The data-parallel layer for `backend` (auto: nccl on GPUs, gloo on CPUs)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: valid are {', '.join(BACKENDS)}")
    if backend == "horovod":
        return Horovod(world, fusion_threshold_mb, compression)
    if compression != "none":
        raise ValueError(f"gradient compression {compression!r} needs backend 'horovod' (got {backend!r})")
    if backend == "auto":
        backend = "nccl" if device.type == "cuda" else "gloo"
    return TorchDDP(world, backend, run_dir, device)
