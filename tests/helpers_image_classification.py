"""Run one image-classification benchmark the way a campaign does: plan it against the local
site, render its job script (mpirun), execute it, and return the result record."""

from __future__ import annotations

from pathlib import Path

from exabench.execute import execute
from exabench.campaign.render import RunPaths, write_run_files
from exabench.campaign.plan import expand
from exabench.campaign.site import load_site

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(tmp_path: Path, name: str, params: dict, ranks: int = 2, preset: str = "tiny",
                  timeout_s: int = 240) -> dict:
    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    config = {"campaign": "test", "preset": preset, "repeats": 1, "timeout_s": timeout_s,
              "benchmarks": [{"name": name, "params": params, "sweep": {"ranks_per_node": [ranks]}}]}
    (run,) = expand(config, site)
    paths = RunPaths(tmp_path / "results", run.run_id)
    write_run_files(run, site, paths)
    return execute(paths.spec)


def run_in_process(tmp_path: Path, name: str, params: dict, preset: str = "tiny") -> dict:
    """The same run on one rank inside the test process (no launcher start-up cost)."""
    from exabench.training.distributed import World
    from exabench.campaign.render import run_spec
    from exabench.runner import run

    site = load_site(ROOT / "profiles" / "local" / "site.yaml")
    config = {"campaign": "test", "preset": preset, "repeats": 1, "timeout_s": 240,
              "benchmarks": [{"name": name, "params": params, "sweep": {"ranks_per_node": [1]}}]}
    (planned,) = expand(config, site)
    paths = RunPaths(tmp_path / "results", planned.run_id)
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    return run(run_spec(planned, site, paths, "(in process)"), World(0, 1, 0, 1, "single", False))


def ddp_step_check(backend: str, run_dir: str) -> dict | None:
    """One data-parallel SGD step on 2 x 4 images against one process's step on all 8.

    ConvNet-CIFAR10 has no BatchNorm, so the averaged gradient of the two halves is exactly
    the gradient of the whole batch: the weights must agree up to floating-point rounding."""
    import copy

    import torch

    from exabench.benchmarks.image_classification.pytorch import build_model, train_step
    from exabench.training.distributed import detect_world
    from exabench.training.torch_loop import data_parallel, precision_for

    world = detect_world()
    device = torch.device("cpu")
    torch.set_num_threads(1)
    dp = data_parallel(backend, world, run_dir, device)
    torch.manual_seed(0)
    model = build_model("convnet_cifar10", 10)
    reference, initial = copy.deepcopy(model), copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(4 * world.size, 3, 32, 32, generator=gen)
    labels = torch.randint(0, 10, (4 * world.size,), generator=gen)
    mine = slice(4 * world.rank, 4 * (world.rank + 1))
    fp32 = precision_for("fp32", device)
    scaler = fp32.grad_scaler(device)
    net, opt = dp.wrap(model, torch.optim.SGD(model.parameters(), lr=0.5))
    train_step(net, opt, scaler, fp32, dp, device, images[mine], labels[mine])
    grads = [float(p.grad.double().norm()) for p in model.parameters()]
    gathered = dp.allgather([p.detach().clone() for p in model.parameters()])
    all_grads = dp.allgather(grads)
    dp.shutdown()
    if world.rank != 0:
        return None
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    train_step(reference, ref_opt, scaler, fp32, _Single(), device, images, labels)
    diff_single = _max_diff(gathered[0], reference.parameters())
    diff_ranks = max(_max_diff(gathered[0], rank) for rank in gathered[1:])
    moved = _max_diff(gathered[0], initial.parameters())
    return {"size": world.size, "diff_single": diff_single, "diff_ranks": diff_ranks, "grad_norms": all_grads,
            "moved": moved}


def _max_diff(xs, ys) -> float:
    return max(float((x.detach() - y.detach()).abs().max()) for x, y in zip(xs, ys))


class _Single:
    def step(self, optimizer, scaler):
        scaler.step(optimizer)


if __name__ == "__main__":
    import json
    import sys

    out = ddp_step_check(sys.argv[1], sys.argv[2])
    if out is not None:
        Path(sys.argv[2], "ddp_step.json").write_text(json.dumps(out))


def write_cifar10_batches_bin(parent: Path, batches: dict) -> Path:
    """parent/cifar-10-batches-bin/ in the official binary release's layout, written byte by byte:
    each `name: (images uint8 [n, 3, 32, 32], labels)` as n records of one label byte then the
    3,072 pixel bytes (red, green, blue planes, row-major), beside the release's other files."""
    folder = parent / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    for name, (images, labels) in batches.items():
        (folder / name).write_bytes(b"".join(bytes([int(y)]) + img.astype("uint8").tobytes()
                                             for img, y in zip(images, labels)))
    (folder / "batches.meta.txt").write_text("airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n")
    (folder / "readme.html").write_text("<html></html>\n")
    return folder
