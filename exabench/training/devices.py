"""Where a rank computes: its GPU (by local rank) where there are GPUs, else the CPU, and the
torch.distributed backend that suits it; and the DDP wrapper every PyTorch workload shares.

torch is imported inside the functions: importing this module costs nothing."""

from __future__ import annotations


def torch_device(world, threads: int | None = None):
    """(device, default backend) of this rank: cuda:<local rank mod GPUs> and NCCL, else the CPU
    (with `threads` intra-op threads where given) and Gloo."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    if torch.cuda.is_available():
        device = torch.device(f"cuda:{world.local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
        return device, "nccl"
    return torch.device("cpu"), "gloo"


def ddp(model, device):
    """The model in torch DDP, on this rank's GPU where it has one."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
