"""The runs of a GPU check, planned as an ordinary campaign on a site made for this machine.

Each part is one benchmark at one setting with its own time limit (its budget), so one slow or
hung part costs at most that. The whole check is bounded by the check itself (TOTAL_S, or
QUICK_S with --quick): before each part it compares the time left with the part's budget and
skips, naming it, what no longer fits. Beside each ResNet-50 part runs a bare PyTorch loop of
the same step (exabench.gpucheck.bare), alternated with it, for the exabench / bare ratio.

Budgets, from the first full check on an H100 (420 s in all, of which 120 s were four GEMM
parts timing out at 30 s) and the second (the same H100 model, driver 580.159.04, torch 2.11):
a ResNet-50 part is process start, model build and FLOP count, and 10 + 30 steps of batch 256.
Without tensor cores (fp32) or with TF32, cudnn.benchmark's search and the steps themselves took
43 s and 45 s of wall: those two get 55 s; the fp16 and bf16 parts took 29-31 s and keep 45 s.
The bare loop has no launcher and no FLOP count: 22-25 s with fp16/bf16 (35 s held), 31 s (tf32)
and 36.5 s (fp32, which timed out at the former 35 s) without: 45 s for those two. A GEMM part
was 28 s of wall for 0.2 s of timed kernels when operands were drawn and checked on the host;
on the device it took 10-12 s of its 30 s. Convolutions took 10-12 s (25 s held), the LSTM 14 s
(20 s), the 1-GPU allreduce 16 s (25 s), CosmoFlow and DeepCAM tiny 20 s and 25 s (40 s each):
about 540 s in all with set-up, inside the 600 s bound. The report puts each part's seconds
beside its budget, so every GPU run checks these figures.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from exabench.campaign.plan import Run, expand
from exabench.campaign.render import write_runs_files
from exabench.campaign.site import load_site
from exabench.config import validate
from exabench.gpucheck.anchors import peak_tflops
from exabench.io import atomic_write_text


@dataclass(frozen=True)
class Part:
    key: str           # the run's label: what the report row is called
    what: str          # what it proves, in words
    benchmark: str
    params: dict
    timeout_s: int
    ranks: int = 1     # GPUs (one rank each)
    min_gpus: int = 1  # machines with fewer GPUs skip the part (and the report says so)
    min_capability: float = 0.0  # CUDA compute capability the part needs (tf32, bf16: 8.0, Ampere)
    rehearsal: dict = field(default_factory=dict)  # parameter overrides for a CPU rehearsal


RESNET = {"batch_size": 256, "warmup_steps": 10, "steps": 30, "data": "synthetic"}
TOTAL_S = 600  # the whole check: 10 minutes
QUICK_S = 240  # --quick, for brief GPU loans: 4 minutes
BARE = "bare"  # the benchmark name of the bare-loop parts (run by exabench.gpucheck.bare, not planned)
BARE_BUDGET_S = 35
# Without fp16/bf16 tensor cores a ResNet-50 step is slower and cudnn.benchmark tries more
# algorithms: the fp32 and tf32 parts and their bare twins get more time (measured: module docstring).
SLOW_PRECISION_BUDGET_S = {"resnet50": 55, BARE: 45}
SLOW_PRECISIONS = ("fp32", "tf32")
# --quick: ResNet-50 in fp32 (no tensor cores) and fp16 channels-last, each with its bare twin, one
# GEMM, the allreduce on one GPU and across the GPUs where there are several: budgets of 235 s on
# one GPU, 265 s on several (the bound then skips the last part unless the others finish early, as
# they do: 168 s for the one-GPU parts on an H100). The convolutions are left to the full check.
QUICK_PARTS = ("resnet50-fp32", "bare-fp32", "resnet50-fp16-nhwc", "bare-fp16-nhwc", "gemm-fp16",
               "allreduce-nccl-1gpu", "allreduce-nccl-across")
# A CPU rehearsal's runs are tiny, but each starts Python and torch on a CPU that may be shared:
# 27 s for `import torch, torchvision` alone on a loaded 2-core machine. Its budgets are at least this.
REHEARSAL_MIN_BUDGET_S = 180
# A CPU rehearsal of a bare part: tiny, fp32 (bf16 autocast on a CPU takes a minute for two steps).
BARE_REHEARSAL = {"batch": 2, "image_size": 32, "warmup": 1, "steps": 2, "precision": "fp32", "device": "cpu"}
# Precisions that need an Ampere or later GPU (compute capability 8.0): TF32 and bf16 tensor cores.
AMPERE = {"tf32": 8.0, "bf16": 8.0}

# A CPU rehearsal keeps these parameters of a part and takes the rest from the tiny preset.
REHEARSAL_KEEPS = ("precision", "channels_last", "algorithm", "cell", "data")


def parts(gpus: int, device_name: str) -> list[Part]:
    """Every part, in the order they run; parts needing more GPUs than `gpus` are still listed."""
    out = []
    for precision, channels_last in (("fp32", False), ("tf32", False), ("fp16", False), ("bf16", False),
                                     ("fp16", True), ("bf16", True)):
        nhwc = "-nhwc" if channels_last else ""
        amp = " AMP" if precision in ("fp16", "bf16") else ""
        out.append(Part(f"resnet50-{precision}{nhwc}", f"ResNet-50 training, synthetic ImageNet batch 256,{amp} "
                        f"{precision}{', channels-last' if channels_last else ''}", "resnet50",
                        {**RESNET, "precision": precision, "channels_last": channels_last},
                        SLOW_PRECISION_BUDGET_S["resnet50"] if precision in SLOW_PRECISIONS else 45,
                        min_capability=AMPERE.get(precision, 0.0)))
        out.append(Part(f"bare-{precision}{nhwc}", f"the same step in a bare PyTorch loop ({precision}"
                        f"{', channels-last' if channels_last else ''}): the yardstick of exabench's overhead", BARE,
                        {"precision": precision, "channels_last": channels_last, "batch": 256, "image_size": 224,
                         "warmup": 10, "steps": 30, "device": "cuda"},
                        SLOW_PRECISION_BUDGET_S[BARE] if precision in SLOW_PRECISIONS else BARE_BUDGET_S,
                        min_capability=AMPERE.get(precision, 0.0), rehearsal=BARE_REHEARSAL))
    for precision in ("fp32", "tf32", "fp16", "bf16"):
        peak = peak_tflops(device_name, precision)
        out.append(Part(f"gemm-{precision}", f"GEMM at DeepBench's shapes, {precision}", "gemm",
                        {"shapes": "deepbench", "precision": precision, "samples": 5,
                         "peak_tflops": peak.value if peak else 0.0}, 30, min_capability=AMPERE.get(precision, 0.0)))
    for algorithm in ("heuristic", "benchmark", "deterministic"):
        out.append(Part(f"conv-{algorithm}", f"convolutions with cuDNN algorithm selection '{algorithm}'", "conv",
                        {"shapes": "summit", "precision": "fp16", "channels_last": True, "algorithm": algorithm},
                        25, rehearsal={"precision": "fp32", "channels_last": False}))
    out.append(Part("rnn-lstm", "LSTM (cuDNN), fp16, DeepBench-style", "rnn", {"cell": "lstm", "precision": "fp16"},
                    20, rehearsal={"hidden": 32, "batch": 4, "steps": 5, "precision": "fp32"}))
    sweep = {"sizes": "doubling", "min_bytes": 8, "max_bytes": 1 << 28}
    out.append(Part("allreduce-nccl-1gpu", "NCCL allreduce on one GPU (latency; no link is crossed)", "allreduce",
                    {"backend": "nccl", **sweep}, 25, rehearsal={"backend": "gloo"}))
    out.append(Part("allreduce-nccl-across", f"NCCL allreduce across the machine's {gpus} GPUs (busbw)",
                    "allreduce", {"backend": "nccl", **sweep}, 30, ranks=gpus, min_gpus=2,
                    rehearsal={"backend": "gloo"}))
    out.append(Part("cosmoflow", "MLPerf-HPC CosmoFlow, tiny, on the GPU, MLPerf log checked", "cosmoflow",
                    {"backend": "nccl"}, 40, rehearsal={"backend": "gloo"}))
    out.append(Part("deepcam", "MLPerf-HPC DeepCAM, tiny, on the GPU, MLPerf log checked", "deepcam",
                    {"backend": "nccl"}, 40, rehearsal={"backend": "gloo"}))
    out.append(Part("ddp-nccl-2gpu", "2-process DDP over NCCL: ResNet-50 AMP fp16, batch 256 per GPU", "resnet50",
                    {**RESNET, "precision": "fp16", "channels_last": True, "backend": "nccl"}, 45, ranks=2,
                    min_gpus=2, rehearsal={"backend": "gloo"}))
    return out


def budget_of(part: Part, rehearsal: bool = False) -> int:
    """The part's time limit: its GPU budget, or for a CPU rehearsal at least REHEARSAL_MIN_BUDGET_S."""
    return max(part.timeout_s, REHEARSAL_MIN_BUDGET_S) if rehearsal else part.timeout_s


def budget_s(chosen: list[Part], rehearsal: bool = False) -> int:
    return sum(budget_of(p, rehearsal) for p in chosen)


def site_document(info: dict) -> dict:
    """A site for this one machine: no scheduler, torchrun (it ships with torch: no MPI needed)."""
    gpus = max(1, int(info["gpus"]))
    return {"name": "gpu-check", "description": f"GPU check on {info.get('name', 'this machine')}",
            "scheduler": "none", "launcher": "torchrun", "python": sys.executable, "max_nodes": 1,
            "node": {"sockets": 1, "cores_per_socket": os.cpu_count() or 1, "smt": 1, "gpus": gpus,
                     "gpu": {"vendor": "nvidia", "model": str(info.get("name", "unknown"))}}}


def config_document(part: Part, rehearsal: bool) -> dict:
    """One part as a campaign config: its parameters at the full preset (the MLPerf-HPC models at
    tiny: a check of the CUDA path, not a time to train), or all at tiny for a CPU rehearsal."""
    preset = "tiny" if rehearsal or part.benchmark in ("cosmoflow", "deepcam") else "full"
    params = part.params
    if rehearsal:  # what the part is about stays; the sizes come from the tiny preset
        params = {**{k: v for k, v in params.items() if k in REHEARSAL_KEEPS}, **part.rehearsal}
    entry = {"name": part.benchmark, "params": params,
             "sweep": {"ranks_per_node": [part.ranks], "gpus_per_rank": [1]}}
    if part.key != part.benchmark:
        entry["label"] = part.key  # run ids then say which part they are
    return {"campaign": "gpu-check", "preset": preset, "repeats": 1, "timeout_s": budget_of(part, rehearsal),
            "benchmarks": [entry]}


def _cannot_run(part: Part, info: dict, rehearsal: bool) -> str:
    if int(info["gpus"]) < part.min_gpus:
        return f"needs {part.min_gpus} GPUs, this machine has {info['gpus']}"
    if part.min_capability and rehearsal:
        return f"needs a GPU of compute capability {part.min_capability} or later (a CPU rehearsal has none)"
    capability = str(info.get("capability", ""))
    if part.min_capability and re.fullmatch(r"\d+\.\d+", capability) and float(capability) < part.min_capability:
        return f"needs compute capability {part.min_capability} or later; this GPU has {capability}"
    return ""


def plan(info: dict, out: Path, only: list[str] | None = None, rehearsal: bool = False
         ) -> tuple[list[tuple[Part, Run]], list[tuple[Part, str]]]:
    """Write the site and every part's spec and job script under `out`; returns (planned, skipped)."""
    out = Path(out)
    site_path = out / "site.yaml"
    atomic_write_text(site_path, yaml.safe_dump(site_document(info), sort_keys=False))
    site = load_site(site_path)
    planned, skipped = [], []
    for part in parts(int(info["gpus"]), str(info.get("name", ""))):
        if only and not any(part.key.startswith(k) for k in only):
            continue
        why = _cannot_run(part, info, rehearsal)
        if why:
            skipped.append((part, why))
            continue
        if part.benchmark == BARE:  # no campaign run: the check starts it itself
            planned.append((part, None))
            continue
        doc = config_document(part, rehearsal)
        config_path = out / "config" / f"{part.key}.yaml"
        atomic_write_text(config_path, yaml.safe_dump(doc, sort_keys=False))
        config = validate(doc, "config", str(config_path))
        (run,) = expand(config, site, str(config_path))
        planned.append((part, run))
    write_runs_files([run for _, run in planned if run is not None], site, out / "results")
    return planned, skipped


def bare_params(part: Part, rehearsal: bool) -> dict:
    """The arguments of a bare part's loop (tiny and on the CPU for a rehearsal)."""
    return {**part.params, **(part.rehearsal if rehearsal else {})}


def left_for(part: Part, elapsed_s: float, bound_s: float, rehearsal: bool = False) -> str:
    """Why `part` no longer fits in the check's bound after `elapsed_s` (empty: it fits)."""
    left = bound_s - elapsed_s
    budget = budget_of(part, rehearsal)
    if left >= budget:
        return ""
    return f"no longer fits: {max(0.0, left):.0f} s left of the check's {bound_s:g} s bound, its budget is {budget} s"
