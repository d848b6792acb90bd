"""A bare PyTorch training loop of ResNet-50: the yardstick of the harness's own overhead.

The same step as exabench's `resnet50` (torchvision ResNet-50, cross-entropy, SGD with momentum
0.9, a fixed synthetic batch on the device, autocast for fp16 and bf16, channels-last on request,
cudnn.benchmark on, TF32 allowed only for tf32), with nothing else: no launcher, no distributed
wrapper, no per-step synchronisation, no record. Warm-up steps, then the timed steps issued back
to back and one synchronisation. The GPU check runs it beside each ResNet-50 part, alternated,
and reports exabench / bare.

    python -m exabench.gpucheck.bare --precision fp16 --channels-last   # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def step_loop(precision: str, channels_last: bool, batch: int, image_size: int, warmup: int, steps: int,
              device: str) -> dict:
    """Images per second of `steps` timed training steps (one synchronisation at the end)."""
    import torch
    import torch.nn.functional as F
    import torchvision

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(batch, 3, image_size, image_size, device=dev).to(memory_format=fmt)
    y = torch.randint(0, 1000, (batch,), device=dev)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(dev.type, enabled=precision == "fp16" and cuda)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    if cuda:
        torch.cuda.synchronize(dev)
    seconds = time.perf_counter() - t0
    return {"images_per_s": batch * steps / seconds, "seconds": seconds, "steps": steps, "batch": batch,
            "precision": precision, "channels_last": channels_last, "device": str(dev),
            "loss": float(loss.detach())}


def run(precision: str, channels_last: bool, batch: int, image_size: int, warmup: int, steps: int, device: str,
        timeout_s: float, python: str = sys.executable) -> dict:
    """The loop in a fresh process (as each exabench part runs in its own), bounded by `timeout_s`:
    its result, or {"error": ...}."""
    cmd = [python, "-m", "exabench.gpucheck.bare", "--precision", precision, "--batch", str(batch),
           "--image-size", str(image_size), "--warmup", str(warmup), "--steps", str(steps), "--device", device]
    if channels_last:
        cmd.append("--channels-last")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout_s:g} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit " + str(proc.returncode)])[-1][:300]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m exabench.gpucheck.bare", description=__doc__.splitlines()[0])
    p.add_argument("--precision", default="fp32", choices=("fp32", "tf32", "fp16", "bf16"))
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda")
    a = p.parse_args(argv)
    print(json.dumps(step_loop(a.precision, a.channels_last, a.batch, a.image_size, a.warmup, a.steps, a.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
