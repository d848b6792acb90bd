"""CANDLE pilots P1B1, P1B2, P3B1 on synthetic data of the real widths, DDP over ranks.

The defaults are those of 2018; data-parallel over ranks with torch DDP.

- P1B1: autoencoder of 60,483 expression values, Dense [2000, 600] and its mirror,
  Adam, MSE, batch 100.
- P1B2: 10-class classifier of 28,205 SNP features, Dense [1024, 512, 256] sigmoid,
  L2 1e-5 on the kernels, RMSprop 1e-3 (Keras' rho 0.9, eps 1e-7), batch 60.
- P3B1: multi-task classifier of 400 features, shared Dense [1200], per task
  [1200, 1200], SGD 0.01, batch 10. The four tasks and their class counts are
  inferred (the pathology-report tasks: site, laterality, histology, grade).

The data are learnable: class prototypes plus noise (P1B2, P3B1 with one prototype
per task and class), a low-rank signal (P1B1). Every rank draws its own rows; each
step is timed on the slowest rank and throughput is global samples / max elapsed.
Loss and accuracy are on a held-out set after training, summed over ranks; the
sanity checks ask for a finite loss that falls and for accuracy well above chance.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.base import Benchmark, Check, Metric, Outcome, param

MODELS = {
    "p1b1": {"features": 60483, "batch": 100, "lr": 1e-3},
    "p1b2": {"features": 28205, "batch": 60, "lr": 1e-3, "classes": 10},
    "p3b1": {"features": 400, "batch": 10, "lr": 0.01, "tasks": {"site": 6, "laterality": 2, "histology": 12,
                                                                  "grade": 4}},
}


@dataclass
class CandleParams:
    model: str = param("p1b2", "pilot benchmark: p1b1 (autoencoder), p1b2 (classifier), p3b1 (multi-task)",
                       choices=tuple(MODELS))
    max_features: int = param(0, "cap on the input width (0: the real width; presets for a laptop cap it)", minimum=0)
    batch_size: int = param(0, "samples per rank per step (0: the benchmark's default: 100, 60, 10)", minimum=0)
    samples_per_rank: int = param(0, "synthetic training rows per rank (0: 20 batches)", minimum=0)
    val_samples_per_rank: int = param(256, "held-out rows per rank for the final loss and accuracy", minimum=1)
    epochs: int = param(2, "passes over the training rows", minimum=1)
    warmup_steps: int = param(2, "first steps excluded from the timing", minimum=0)
    precision: str = param("fp32", "arithmetic precision (bf16: autocast)", choices=("fp32", "bf16"))
    lr: float = param(0.0, "learning rate (0: the benchmark's default)", minimum=0.0)
    backend: str = param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                         choices=("auto", "gloo", "nccl", "mpi"))
    seed: int = param(17, "seed of weights, prototypes and rows")


def build_model(torch, name: str, features: int):
    nn = torch.nn
    if name == "p1b1":
        return nn.Sequential(nn.Linear(features, 2000), nn.ReLU(), nn.Linear(2000, 600), nn.ReLU(),
                             nn.Linear(600, 2000), nn.ReLU(), nn.Linear(2000, features))
    if name == "p1b2":
        return nn.Sequential(nn.Linear(features, 1024), nn.Sigmoid(), nn.Linear(1024, 512), nn.Sigmoid(),
                             nn.Linear(512, 256), nn.Sigmoid(), nn.Linear(256, MODELS["p1b2"]["classes"]))

    class MultiTask(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Sequential(nn.Linear(features, 1200), nn.ReLU())
            self.heads = nn.ModuleDict({t: nn.Sequential(nn.Linear(1200, 1200), nn.ReLU(), nn.Linear(1200, 1200),
                                                         nn.ReLU(), nn.Linear(1200, k))
                                        for t, k in MODELS["p3b1"]["tasks"].items()})

        def forward(self, x):
            h = self.shared(x)
            return {t: head(h) for t, head in self.heads.items()}

    return MultiTask()


def synthetic(torch, name: str, features: int, rows: int, shared_gen, gen):
    """(inputs, targets) of a learnable synthetic task; prototypes come from `shared_gen` (same on all ranks)."""
    if name == "p1b1":
        basis = torch.randn(16, features, generator=shared_gen) / 4
        x = torch.sigmoid(torch.randn(rows, 16, generator=gen) @ basis)
        return x, x
    if name == "p1b2":
        k = MODELS["p1b2"]["classes"]
        protos = torch.randn(k, features, generator=shared_gen)
        y = torch.randint(0, k, (rows,), generator=gen)
        return protos[y] + 2.0 * torch.randn(rows, features, generator=gen), y
    x = torch.randn(rows, features, generator=gen)
    ys = {}
    for t, k in MODELS["p3b1"]["tasks"].items():
        protos = 2.0 * torch.randn(k, features, generator=shared_gen)
        ys[t] = torch.randint(0, k, (rows,), generator=gen)
        x += protos[ys[t]]
    return x, ys


def loss_and_correct(torch, name: str, out, y, model) -> tuple:
    """(loss, {task: correct predictions}) of one batch."""
    F = torch.nn.functional
    if name == "p1b1":
        return F.mse_loss(out.float(), y), {}
    if name == "p1b2":
        l2 = sum((m.weight.float() ** 2).sum() for m in model.modules() if isinstance(m, torch.nn.Linear))
        return F.cross_entropy(out.float(), y) + 1e-5 * l2, {"class": int((out.argmax(1) == y).sum())}
    loss = sum(F.cross_entropy(out[t].float(), y[t]) for t in out)
    return loss, {t: int((out[t].argmax(1) == y[t]).sum()) for t in out}


@register
class Candle(Benchmark):
    name = "candle"
    headline = "throughput"
    communication = {"pattern": "ddp-gradient-buckets"}
    data_parallel = True
    suite = "coral2-dl"
    framework = "pytorch"
    Params = CandleParams
    id_params = ("model", "precision")
    presets = {
        "tiny": {"max_features": 2048, "batch_size": 16, "samples_per_rank": 256, "epochs": 2, "warmup_steps": 2},
        "small": {"max_features": 0, "samples_per_rank": 0, "epochs": 2, "warmup_steps": 2},
        "full": {"max_features": 0, "samples_per_rank": 0, "epochs": 5, "warmup_steps": 5},
    }

    def run(self, p: CandleParams, ctx) -> Outcome:
        import torch

        from exabench.training import torch_loop as training
        from exabench.training.devices import torch_device

        spec, world = MODELS[p.model], ctx.world
        device, default_backend = torch_device(world, ctx.threads)
        backend = default_backend if p.backend == "auto" else p.backend
        features = min(spec["features"], p.max_features) if p.max_features else spec["features"]
        batch = p.batch_size or spec["batch"]
        rows = p.samples_per_rank or 20 * batch
        lr = p.lr or spec["lr"]
        precision = training.precision_for(p.precision, device)
        dp = training.data_parallel(backend, world, ctx.run_dir, device)
        # No try/finally: shutdown is a barrier, and on a failing rank it would wait forever for
        # peers still inside a collective; the runner exits and the launcher stops them.
        torch.manual_seed(p.seed)
        model = build_model(torch, p.model, features).to(device)
        net, opt = dp.wrap(model, make_optimizer(torch, p.model, model.parameters(), lr))
        data = rank_data(torch, p, features, rows, world.rank, device)
        fit = Fit(torch, p, net, model, opt, dp, precision.autocast(device), data, world)
        val_loss_before, acc_before = fit.evaluate()
        losses, step_max = fit.train(rows, batch)
        val_loss, acc = fit.evaluate()
        n_params = sum(w.numel() for w in model.parameters())
        dp.shutdown()
        if not step_max:
            raise ValueError(f"candle: warmup_steps ({p.warmup_steps}) leaves no timed step of {len(losses)}; "
                             "lower warmup_steps or raise samples_per_rank")
        info = {"device": str(device), "backend": backend, "features": features, "batch_size": batch,
                "global_batch": batch * world.size, "parameters": n_params, "steps": len(losses), "lr": lr,
                "accuracy_before": acc_before, "val_loss_before": val_loss_before,
                "tasks": list(spec.get("tasks", {})) or None, "losses": losses}
        return outcome(p, batch * world.size, rows // batch, losses, step_max, (val_loss_before, val_loss), acc, info)


def make_optimizer(torch, name: str, parameters, lr: float):
    """The release's optimizers: Adam (P1B1), RMSprop (P1B2), SGD (P3B1), Keras' epsilon."""
    if name == "p1b1":
        return torch.optim.Adam(parameters, lr=lr, eps=1e-7)
    if name == "p1b2":
        return torch.optim.RMSprop(parameters, lr=lr, alpha=0.9, eps=1e-7)
    return torch.optim.SGD(parameters, lr=lr)


def rank_data(torch, p: CandleParams, features: int, rows: int, rank: int, device) -> tuple:
    """(x, y, x_val, y_val) of this rank on its device; the prototypes are the same on every rank."""
    x, y = synthetic(torch, p.model, features, rows, torch.Generator().manual_seed(p.seed),
                     torch.Generator().manual_seed(p.seed + 1 + rank))
    xv, yv = synthetic(torch, p.model, features, p.val_samples_per_rank, torch.Generator().manual_seed(p.seed),
                       torch.Generator().manual_seed(p.seed + 100_003 + rank))
    return x.to(device), _to(y, device), xv.to(device), _to(yv, device)


def _to(t, device):
    return {k: v.to(device) for k, v in t.items()} if isinstance(t, dict) else t.to(device)


def _pick(t, idx):
    return {k: v[idx] for k, v in t.items()} if isinstance(t, dict) else t[idx]


class Fit:
    """The training and held-out evaluation of one pilot on one rank, over the shared data-parallel layer."""

    def __init__(self, torch, p, net, model, opt, dp, autocast, data, world):
        self.torch, self.p, self.net, self.model, self.opt, self.dp = torch, p, net, model, opt, dp
        self.autocast, self.rank, self.world_size = autocast, world.rank, world.size
        self.x, self.y, self.xv, self.yv = data

    def evaluate(self) -> tuple[float, list[float]]:
        """(held-out loss, mean over ranks; accuracy per task over all ranks' held-out rows)."""
        self.net.eval()
        with self.torch.no_grad(), self.autocast:
            loss, correct = loss_and_correct(self.torch, self.p.model, self.net(self.xv), self.yv, self.model)
        self.net.train()
        parts = self.dp.allgather([float(loss), *correct.values()])
        sums = [sum(column) for column in zip(*parts)]
        return sums[0] / self.world_size, [c / (self.p.val_samples_per_rank * self.world_size) for c in sums[1:]]

    def train(self, rows: int, batch: int) -> tuple[list[float], list[float]]:
        """(every step's loss on this rank, each timed step's slowest-rank time)."""
        torch, p, device = self.torch, self.p, self.x.device
        cuda = device.type == "cuda"
        losses, times = [], []
        gen = torch.Generator().manual_seed(p.seed + 7 + self.rank)
        for _ in range(p.epochs):
            order = torch.randperm(rows, generator=gen).to(device)
            for s in range(rows // batch):
                idx = order[s * batch:(s + 1) * batch]
                if cuda:
                    torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                self.opt.zero_grad(set_to_none=True)
                with self.autocast:
                    loss, _ = loss_and_correct(torch, p.model, self.net(self.x[idx]), _pick(self.y, idx), self.model)
                loss.backward()
                self.opt.step()
                if cuda:
                    torch.cuda.synchronize(device)
                times.append(time.perf_counter() - t0)
                losses.append(float(loss.detach()))
        timed = times[p.warmup_steps:]
        return losses, self.dp.max(timed) if timed else []


def outcome(p: CandleParams, global_batch: int, steps_per_epoch: int, losses: list[float], step_max: list[float],
            val_losses: tuple[float, float], acc: list[float], info: dict) -> Outcome:
    spec = MODELS[p.model]
    val_loss_before, val_loss = val_losses
    elapsed = sum(step_max)
    metrics = {
        "throughput": Metric(global_batch * len(step_max) / elapsed, "samples/s",
                             [global_batch / s for s in step_max], p.precision,
                             description="global samples / slowest rank's elapsed time"),
        "step_time": Metric(elapsed / len(step_max), "s", step_max, p.precision, higher_is_better=False),
        "val_loss": Metric(val_loss, "mse" if p.model == "p1b1" else "cross-entropy", [], p.precision,
                           higher_is_better=False, description="held-out loss after training, mean over ranks"),
        "train_loss": Metric(sum(losses[-steps_per_epoch:]) / steps_per_epoch, "loss", [], p.precision,
                             higher_is_better=False, description="mean loss of the last epoch, rank 0"),
    }
    checks = [Check("loss_finite", all(math.isfinite(v) for v in losses + [val_loss]),
                    f"train {losses[0]:.4g} .. {losses[-1]:.4g}, held-out {val_loss:.4g}"),
              Check("loss_falls", val_loss < val_loss_before,
                    f"held-out loss {val_loss_before:.4g} before training, {val_loss:.4g} after")]
    if p.model != "p1b1":
        classes = [spec["classes"]] if p.model == "p1b2" else list(spec["tasks"].values())
        metrics["accuracy"] = Metric(sum(acc) / len(acc), "fraction", acc, p.precision,
                                     description="held-out accuracy (P3B1: mean over tasks; samples per task)")
        floors = [1.5 / k for k in classes]
        checks.append(Check("accuracy_above_chance", all(a >= f for a, f in zip(acc, floors)),
                            "accuracy " + ", ".join(f"{a:.3f} (floor {f:.3f})" for a, f in zip(acc, floors))))
    return Outcome(metrics, checks, info)
