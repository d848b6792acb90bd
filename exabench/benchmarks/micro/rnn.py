"""DeepBench-style recurrent layers: LSTM, GRU and vanilla RNN, forward and forward+backward.

The Summit slides' shapes are the defaults: LSTM with 1024 hidden units, batch 64,
25 time steps; GRU with 1024 hidden units, batch 64, 1500 steps (`steps: 0` picks the
cell's slide value). One layer of torch.nn (cuDNN's fused kernels on NVIDIA GPUs,
oneDNN or native on CPUs), input width = hidden width, as in DeepBench. Flops count
the gate GEMMs only (2 x batch x gates x hidden x (input + hidden) per step; backward
twice the forward). The sanity check runs the same weights and inputs in float64.
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.micro.base import MicroBenchmark
from exabench.benchmarks.base import Check, Metric, Outcome, param
from exabench.benchmarks.timing import (PRECISIONS, dtype_of, float64_check, measure, relative_error, restore_tf32,
                                        set_tf32, slowest, torch_device)

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1}
SLIDE_STEPS = {"lstm": 25, "gru": 1500, "rnn_tanh": 25}
# Relative error of the output after a recurrence is compounded step by step: looser than GEMM.
TOLERANCE = {"fp32": 1e-4, "tf32": 1e-2, "fp16": 1e-2, "bf16": 5e-2}
CHECK_STEPS = 50  # the float64 reference runs this many steps at most


@dataclass
class RnnParams:
    cell: str = param("lstm", "recurrent cell", choices=tuple(GATES))
    hidden: int = param(1024, "hidden units (and input width)", minimum=1)
    batch: int = param(64, "sequences per batch", minimum=1)
    steps: int = param(0, "time steps; 0: the Summit slides' value for the cell (LSTM 25, GRU 1500)", minimum=0)
    precision: str = param("fp32", "weights, inputs and states", choices=PRECISIONS)
    warmup: int = param(2, "untimed iterations", minimum=0)
    samples: int = param(10, "timed samples of forward and of forward+backward", minimum=1)
    check: bool = param(True, f"compare the output (first {CHECK_STEPS} steps) with float64 (sanity check)")
    seed: int = param(5, "seed of weights and inputs")


def rnn_flop(cell: str, hidden: int, batch: int, steps: int) -> float:
    """Forward flops of the gate GEMMs of one layer (input width = hidden)."""
    return 2.0 * batch * GATES[cell] * hidden * (2 * hidden) * steps


@register
class Rnn(MicroBenchmark):
    name = "rnn"
    headline = "tflops"
    metric_names = ("tflops", "tflops_fwd", "time_fwd", "time_fwd_bwd")
    framework = "pytorch"
    Params = RnnParams
    id_params = ("cell", "precision")
    presets = {
        "tiny": {"hidden": 64, "batch": 4, "steps": 10, "warmup": 1, "samples": 5},
        "small": {"hidden": 256, "batch": 16, "steps": 25, "warmup": 2, "samples": 5},
        "full": {"hidden": 1024, "batch": 64, "steps": 0, "warmup": 3, "samples": 20},
    }

    def run(self, p: RnnParams, ctx) -> Outcome:
        dev = torch_device(ctx)
        torch = dev.torch
        dtype = dtype_of(torch, p.precision)
        steps = p.steps or SLIDE_STEPS[p.cell]
        before = set_tf32(torch, p.precision == "tf32")
        try:
            torch.manual_seed(p.seed)
            kind = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn_tanh": torch.nn.RNN}[p.cell]
            layer = kind(p.hidden, p.hidden).to(dev.device, dtype)
            gen = torch.Generator().manual_seed(p.seed + ctx.world.rank)
            x = torch.randn(steps, p.batch, p.hidden, generator=gen).to(dev.device, dtype).requires_grad_()
            gy = torch.randn(steps, p.batch, p.hidden, generator=gen).to(dev.device, dtype)
            params = list(layer.parameters())

            def forward():
                return layer(x)[0]

            def forward_backward():
                for w in params:
                    w.grad = None
                x.grad = None
                torch.autograd.backward(forward(), gy)

            fwd = measure(forward, dev, p.warmup, p.samples)
            fwd_bwd = measure(forward_backward, dev, p.warmup, p.samples)
            checks = []
            if p.check:
                n = min(steps, CHECK_STEPS)
                ref_layer = copy.deepcopy(layer).double()
                with torch.no_grad():
                    err = relative_error(torch, layer(x[:n])[0], ref_layer(x[:n].double())[0])
                checks.append(float64_check([(f"output of {n} steps", err)], p.precision, TOLERANCE))
            checks.append(Check("gradients_finite", all(bool(torch.isfinite(w.grad).all()) for w in params),
                                "weight gradients of the last forward+backward"))
        finally:
            restore_tf32(torch, before)
        t_fwd, t_fb = slowest(ctx, [statistics.median(fwd), statistics.median(fwd_bwd)])
        flop = rnn_flop(p.cell, p.hidden, p.batch, steps)
        label = f"{p.cell} h{p.hidden} b{p.batch} t{steps}"
        metrics = {
            "time_fwd": Metric(t_fwd, "s", fwd, p.precision, higher_is_better=False,
                               description=f"forward of {label}, median, slowest rank"),
            "time_fwd_bwd": Metric(t_fb, "s", fwd_bwd, p.precision, higher_is_better=False,
                                   description=f"forward + backward of {label}, median, slowest rank"),
            "tflops_fwd": Metric(flop / t_fwd / 1e12, "TFLOP/s", [flop / s / 1e12 for s in fwd], p.precision,
                                 description="gate GEMM flops / forward time"),
            "tflops": Metric(3 * flop / t_fb / 1e12, "TFLOP/s", [3 * flop / s / 1e12 for s in fwd_bwd], p.precision,
                             description="3 x forward gate GEMM flops / forward+backward time"),
        }
        info = {**dev.describe(), "kernel": "rnn", "cell": p.cell, "steps": steps, "shape": label,
                "tf32_effective": p.precision == "tf32" and dev.cuda,
                "algorithm": "cuDNN fused RNN" if dev.cuda else "torch CPU RNN (oneDNN where supported)"}
        return Outcome(metrics, checks, info)
