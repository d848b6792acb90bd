"""Optimizers and learning-rate schedules of the MLPerf-HPC references.

- LAMB as NVIDIA apex's FusedLAMB (the DeepCAM reference's): Adam moments with bias
  correction, gradients first clipped to a global norm (max_grad_norm 1.0), decoupled
  weight decay, and a per-tensor trust ratio ||w|| / ||update||.
- CosmoFlow: LR scaled with the global batch, linear warmup over epochs from the
  unscaled base LR, then absolute decay factors on the peak LR at given epochs.
- DeepCAM: warmup over steps, then multistep decay or cosine annealing (per step).
"""

from __future__ import annotations

import math

import torch


class LAMB(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01,
                 bias_correction: bool = True, grad_averaging: bool = True, max_grad_norm: float = 1.0):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction, grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return loss
        global_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            clip = torch.clamp(global_norm / group["max_grad_norm"], min=1.0) if group["max_grad_norm"] > 0 \
                else torch.ones(())
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / clip
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(grad, alpha=(1 - beta1) if group["grad_averaging"] else 1.0)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat = m / (1 - beta1 ** state["step"])
                    v_hat = v / (1 - beta2 ** state["step"])
                else:
                    m_hat, v_hat = m, v
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update = update.add(p, alpha=group["weight_decay"])
                w_norm, u_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                p.add_(update * trust, alpha=-group["lr"])
        return loss


def cosmoflow_lr(epoch: int, base_lr: float, global_batch: int, base_batch: int, warmup_epochs: int,
                 decay: dict[int, float]) -> float:
    """The reference schedule: peak = base_lr * global_batch / base_batch (linear scaling);
    epoch < warmup: linear from base_lr to peak; after: peak x the factor of the latest
    decay epoch strictly before `epoch` (1 before the first)."""
    peak = base_lr * global_batch / base_batch
    if epoch < warmup_epochs:
        return epoch * (peak - base_lr) / warmup_epochs + base_lr
    factor, last = 1.0, 0
    for e, f in sorted(decay.items()):
        if last <= e < epoch:
            last, factor = e, f
    return peak * factor


def deepcam_lr_factor(step: int, warmup_steps: int, warmup_factor: float, schedule: str,
                      milestones=(), decay_rate: float = 0.1, t_max: int = 1, eta_min_ratio: float = 0.0) -> float:
    """Multiplier of the start LR at optimizer step `step` (0-based), in closed form, of the
    reference's MultiStepLRWarmup / CosineAnnealingLRWarmup (MultiStepLR / CosineAnnealingLR
    without warmup), stepped once after every optimizer step. As the reference computes it:
    - warmup is linear over steps 0 .. warmup_steps - 1, from 0 when warmup_factor is 1, else
      from 1 towards warmup_factor; afterwards the LR stays at the last warmup value (the
      reference keeps the optimizer's LR; it never sets warmup_factor itself);
    - milestones count steps after warmup: with warmup, the LR is multiplied by decay_rate
      at step milestone + warmup_steps + 1 (warmup 400, milestone 800: step 1201);
    - cosine annealing starts from the last warmup value and reaches eta_min after t_max
      steps; past t_max it follows the periodic cosine between eta_min and the start LR,
      as the reference's recursive formula does."""
    def warmup(s: int) -> float:
        frac = s / warmup_steps
        return frac if warmup_factor == 1.0 else (warmup_factor - 1.0) * frac + 1.0

    if step < warmup_steps:
        return warmup(step)
    after = warmup(warmup_steps - 1) if warmup_steps > 0 else 1.0
    if schedule == "multistep":
        shift = warmup_steps + 1 if warmup_steps > 0 else 0
        return after * decay_rate ** sum(step >= m + shift for m in milestones)
    if schedule == "cosine_annealing":
        t = step - warmup_steps
        top = after if t <= t_max else 1.0
        return eta_min_ratio + (top - eta_min_ratio) * (1 + math.cos(math.pi * t / t_max)) / 2
    raise ValueError(f"schedule {schedule!r}: valid: multistep, cosine_annealing")
