"""What does exabench's harness cost? ResNet-50 synthetic training throughput through the
`resnet50` benchmark (planned against the local site, run by exabench.runner on one rank)
against a bare PyTorch loop of the same model, batch, precision and thread count, in one
process, alternating the two so drifting machine load hits both alike.

    PYTHONPATH=. python bench/resnet_overhead.py [--image-size 64 --batch 8 --steps 20]

Both sides report the median over their timed steps' throughputs (robust to bursts of load
from other processes); prints both per round, the median ratio, and whether the harness
costs < 2 %. On a shared machine the per-round ratios scatter: read the spread too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def exabench_throughput(args, run_root: Path) -> float:
    from exabench.training.distributed import World
    from exabench.campaign.render import RunPaths, run_spec
    from exabench.campaign.plan import expand
    from exabench.runner import run
    from exabench.campaign.site import load_site

    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    params = {"image_size": args.image_size, "batch_size": args.batch, "steps": args.steps,
              "warmup_steps": args.warmup, "precision": args.precision, "data": "synthetic"}
    config = {"campaign": "overhead", "preset": "tiny", "repeats": 1, "timeout_s": 3600,
              "benchmarks": [{"name": "resnet50", "params": params,
                              "sweep": {"ranks_per_node": [1], "threads_per_rank": [args.threads]}}]}
    (planned,) = expand(config, site)
    paths = RunPaths(run_root, planned.run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    record = run(run_spec(planned, site, paths, "(in process)"), World(0, 1, 0, 1, "single", False))
    if record["status"] != "ok":
        raise RuntimeError(f"exabench run {record['status']}: {record['error']}")
    return record["metrics"]["throughput"]["stats"]["median"]  # median over the timed steps


def bare_throughput(args) -> float:
    """The loop anyone would write, with a clock around each timed step; median step throughput."""
    import torch
    import torch.nn.functional as F
    import torchvision

    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    model = torchvision.models.resnet50(weights=None, num_classes=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * args.batch / 256, momentum=0.9)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size)
    labels = torch.randint(0, 1000, (args.batch,))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return args.batch / statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="exabench-overhead-") as tmp:
        for i in range(args.rounds):
            if i % 2:  # alternate which goes first, so neither always inherits the other's allocator state
                exa = exabench_throughput(args, Path(tmp) / f"round{i}")
                bare = bare_throughput(args)
            else:
                bare = bare_throughput(args)
                exa = exabench_throughput(args, Path(tmp) / f"round{i}")
            ratios.append(exa / bare)
            print(f"round {i + 1}: bare {bare:.2f} images/s, exabench {exa:.2f} images/s, ratio {exa / bare:.4f}",
                  flush=True)
    ratio = statistics.median(ratios)
    cost = 1.0 - ratio
    print(f"ResNet-50 {args.precision}, {args.image_size}px, batch {args.batch}, {args.threads} threads, "
          f"{args.steps} timed steps x {args.rounds} rounds")
    print(f"median exabench/bare throughput ratio: {ratio:.4f} (harness cost {100 * cost:+.2f} %; "
          f"spread of ratios {min(ratios):.4f} .. {max(ratios):.4f})")
    print("harness cost < 2 %: " + ("yes" if cost < 0.02 else "NO"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
