"""CANDLE pilots P1B1, P1B2, P3B1 as in ECP-CANDLE/Benchmarks release_01 (2018), on
synthetic data of the real widths, data-parallel over ranks with torch DDP.

Reference: github.com/ECP-CANDLE/Benchmarks, branch `release_01` (tag `v0.1` holds the same
pilot files), Pilot1/P1B1/p1b1_baseline_keras2.py + p1b1_default_model.txt, Pilot1/P1B2/
p1b2_baseline_keras2.py + p1b2_default_model.txt, Pilot3/P3B1/p3b1_baseline_keras2.py +
p3b1_default_model.txt, common/keras_utils.py and default_utils.py (Keras defaults). The
release ran on Keras 2; exabench computes the same in PyTorch:

- P1B1 (model `ae`): encoder Dense [2000, 600] relu, a 2-unit relu bottleneck, decoder
  [600, 2000] relu and a sigmoid output of the input width (60,483); MSE; Keras' default
  Adam (lr 1e-3, eps 1e-7, Keras' epsilon placement); batch 100. 244,400,085 parameters.
- P1B2: Dense [1024, 512, 256] sigmoid with L2 1e-5 on each hidden layer's kernel and
  activity (Keras 2: summed over the batch), a sigmoid 10-unit output without penalty,
  Keras' categorical cross-entropy of those outputs (normalised to sum 1, clipped to
  [1e-7, 1 - 1e-7]); RMSprop lr 1e-3, rho 0.9, eps 1e-8; batch 60. 29,541,642 parameters.
- P3B1: three tasks, primary site (13 classes), tumour laterality (2), histological grade
  (4), each its own model of input 400 -> [2400, 2400, 1200, 1200] relu -> softmax: the
  release's builder discards its shared layers (each shared Dense output is dropped, so
  every task's model starts at the input). Every epoch trains the models in turn, one
  epoch each on its own task's data set; SGD lr 0.01; batch 10. 33,164,419 parameters.
- Kernels Glorot-uniform, biases zero (the release's `initialization` default).

The data are learnable: class prototypes plus noise (P1B2; P3B1 one set per task), a
rank-2 signal on per-feature levels in [0, 1] (P1B1; the release min-max scales its
features). Every rank draws
its own rows; each step is timed on the slowest rank and throughput is global samples /
max elapsed. Loss and accuracy are on a held-out set after training (P3B1: per task),
summed over ranks; the sanity checks ask for a finite loss that falls and for accuracy
well above chance.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from exabench.benchmarks.registry import register
from exabench.benchmarks.base import Benchmark, Check, Metric, Outcome, param

REFERENCE = "ECP-CANDLE/Benchmarks release_01 (tag v0.1), Pilot1/P1B1, Pilot1/P1B2, Pilot3/P3B1 keras2 baselines"
KERAS_EPSILON = 1e-7  # Keras 2's K.epsilon(): Adam's default eps and the cross-entropy clip
MODELS = {
    "p1b1": {"features": 60483, "batch": 100, "lr": 1e-3, "dense": (2000, 600), "latent": 2},
    "p1b2": {"features": 28205, "batch": 60, "lr": 1e-3, "dense": (1024, 512, 256), "classes": 10,
             "penalty": 1e-5, "rho": 0.9, "eps": 1e-8},
    "p3b1": {"features": 400, "batch": 10, "lr": 0.01, "dense": (2400, 2400, 1200, 1200),
             "tasks": {"primary_site": 13, "laterality": 2, "histological_grade": 4}},
}


@dataclass
class CandleParams:
    model: str = param("p1b2", "pilot benchmark: p1b1 (autoencoder), p1b2 (classifier), p3b1 (multi-task)",
                       choices=tuple(MODELS))
    max_features: int = param(0, "cap on the input width (0: the real width; presets for a laptop cap it)", minimum=0)
    batch_size: int = param(0, "samples per rank per step (0: the benchmark's default: 100, 60, 10)", minimum=0)
    samples_per_rank: int = param(0, "synthetic training rows per rank, per task for P3B1 (0: 20 batches)",
                                  minimum=0)
    val_samples_per_rank: int = param(256, "held-out rows per rank (per task for P3B1) for the final loss and "
                                           "accuracy", minimum=1)
    epochs: int = param(2, "passes over the training rows (P3B1: each pass trains every task in turn)", minimum=1)
    warmup_steps: int = param(2, "first steps excluded from the timing", minimum=0)
    precision: str = param("fp32", "arithmetic precision (bf16: autocast)", choices=("fp32", "bf16"))
    lr: float = param(0.0, "learning rate (0: the benchmark's default)", minimum=0.0)
    backend: str = param("auto", "torch.distributed backend (auto: nccl on GPUs, gloo on CPUs)",
                         choices=("auto", "gloo", "nccl", "mpi"))
    seed: int = param(17, "seed of weights, prototypes and rows")


def _dense(torch, n_in: int, n_out: int, device):
    """A Keras Dense layer's weights: Glorot-uniform kernel, zero bias."""
    layer = torch.nn.Linear(n_in, n_out, device=device)
    torch.nn.init.xavier_uniform_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    return layer


def _stack(torch, widths, activation, device) -> list:
    """Dense layers through `widths` (input first), each followed by `activation`."""
    layers = []
    for n_in, n_out in zip(widths, widths[1:]):
        layers += [_dense(torch, n_in, n_out, device), activation()]
    return layers


def build_model(torch, name: str, features: int, device=None):
    """The release's network for `name`; P3B1: a ModuleDict of one model per task."""
    nn, spec = torch.nn, MODELS[name]
    if name == "p1b1":
        return nn.Sequential(*_stack(torch, (features, *spec["dense"], spec["latent"]), nn.ReLU, device),
                             *_stack(torch, (spec["latent"], *reversed(spec["dense"])), nn.ReLU, device),
                             _dense(torch, spec["dense"][0], features, device), nn.Sigmoid())
    if name == "p1b2":
        return p1b2_classifier(torch, features, device)
    return nn.ModuleDict({task: nn.Sequential(*_stack(torch, (features, *spec["dense"]), nn.ReLU, device),
                                              _dense(torch, spec["dense"][-1], k, device), nn.Softmax(dim=1))
                          for task, k in spec["tasks"].items()})


def p1b2_classifier(torch, features: int, device=None):
    """P1B2's MLP: forward gives (sigmoid outputs, hidden activations), the latter for their L2 penalty."""
    spec = MODELS["p1b2"]

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            widths = (features, *spec["dense"])
            self.hidden = torch.nn.ModuleList(torch.nn.Sequential(*_stack(torch, pair, torch.nn.Sigmoid, device))
                                              for pair in zip(widths, widths[1:]))
            self.out = torch.nn.Sequential(*_stack(torch, (widths[-1], spec["classes"]), torch.nn.Sigmoid, device))

        def forward(self, x):
            acts = []
            for layer in self.hidden:
                x = layer(x)
                acts.append(x)
            return self.out(x), acts

    return Classifier()


def keras_categorical_crossentropy(torch, probs, y):
    """Keras 2's categorical cross-entropy of probability outputs: rows scaled to sum 1, clipped
    to [eps, 1 - eps], mean of -log p[label]."""
    p = (probs / probs.sum(dim=1, keepdim=True)).clamp(KERAS_EPSILON, 1 - KERAS_EPSILON)
    return -torch.log(p.gather(1, y[:, None])).mean()


def loss_and_correct(torch, name: str, out, y, model) -> tuple:
    """(loss, correct predictions or None) of one batch of one model (P3B1: one task's model)."""
    if name == "p1b1":
        return torch.nn.functional.mse_loss(out.float(), y), None
    if name == "p1b2":
        probs, acts = out
        penalty = MODELS["p1b2"]["penalty"]
        kernels = sum((layer[0].weight.float() ** 2).sum() for layer in model.hidden)
        activity = sum((a.float() ** 2).sum() for a in acts)
        out = probs
        loss = keras_categorical_crossentropy(torch, probs.float(), y) + penalty * (kernels + activity)
    else:
        loss = keras_categorical_crossentropy(torch, out.float(), y)
    return loss, int((out.argmax(1) == y).sum())


def synthetic(torch, name: str, features: int, rows: int, shared_gen, gen, classes: int = 0):
    """(inputs, targets) of a learnable synthetic task; prototypes come from `shared_gen` (same on all ranks)."""
    if name == "p1b1":
        # per-feature levels plus a rank-2 signal (the bottleneck's width), squashed into [0, 1]
        # like the release's min-max scaled expression values
        level, basis = torch.randn(1, features, generator=shared_gen), torch.randn(2, features, generator=shared_gen)
        x = torch.sigmoid(level + torch.randn(rows, 2, generator=gen) @ basis)
        return x, x
    protos = 2.0 * torch.randn(classes, features, generator=shared_gen)
    y = torch.randint(0, classes, (rows,), generator=gen)
    return protos[y] + 2.0 * torch.randn(rows, features, generator=gen), y


def keras_adam(torch, params, lr: float, betas=(0.9, 0.999), eps: float = KERAS_EPSILON):
    """Keras 2's Adam: p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps). torch's Adam
    adds eps after the bias correction of v, a different (if close) update."""

    class KerasAdam(torch.optim.Optimizer):
        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                (b1, b2), eps, lr = group["betas"], group["eps"], group["lr"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state.update(step=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                    state["step"] += 1
                    t, m, v = state["step"], state["m"], state["v"]
                    m.mul_(b1).add_(p.grad, alpha=1 - b1)
                    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                    p.addcdiv_(m, v.sqrt().add_(eps), value=-lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t))

    return KerasAdam(params, dict(lr=lr, betas=tuple(betas), eps=eps))


def make_optimizer(torch, name: str, parameters, lr: float):
    """The release's optimizers: Keras' default Adam (P1B1), RMSprop with CANDLE's Keras defaults
    rho 0.9 and eps 1e-8 (P1B2), plain SGD (P3B1; no momentum, no decay)."""
    if name == "p1b1":
        return keras_adam(torch, parameters, lr=lr)
    if name == "p1b2":
        spec = MODELS["p1b2"]
        return torch.optim.RMSprop(parameters, lr=lr, alpha=spec["rho"], eps=spec["eps"])
    return torch.optim.SGD(parameters, lr=lr)


@dataclass
class Task:
    """One model with its optimizer and its own training and held-out rows on this rank."""

    name: str
    net: object  # the data-parallel wrapper (the model itself on one rank)
    model: object
    opt: object
    x: object
    y: object
    xv: object
    yv: object


def make_tasks(torch, p: CandleParams, model, features: int, rows: int, lr: float, dp, rank: int, device) -> list:
    """P1B1/P1B2: one task; P3B1: one per reference task, each with its own data set."""
    spec = MODELS[p.model]
    parts = model.items() if p.model == "p3b1" else [(p.model, model)]
    tasks = []
    for i, (name, m) in enumerate(parts):
        classes = spec["tasks"][name] if p.model == "p3b1" else spec.get("classes", 0)
        prototypes = p.seed + 1_000 * i  # same on every rank; the rows differ by rank
        x, y = synthetic(torch, p.model, features, rows, torch.Generator().manual_seed(prototypes),
                         torch.Generator().manual_seed(prototypes + 1 + rank), classes)
        xv, yv = synthetic(torch, p.model, features, p.val_samples_per_rank, torch.Generator().manual_seed(prototypes),
                           torch.Generator().manual_seed(prototypes + 100_003 + rank), classes)
        net, opt = dp.wrap(m, make_optimizer(torch, p.model, m.parameters(), lr))
        tasks.append(Task(name, net, m, opt, x.to(device), y.to(device), xv.to(device), yv.to(device)))
    return tasks


@register
class Candle(Benchmark):
    name = "candle"
    headline = "throughput"
    metric_names = ("throughput", "step_time", "val_loss", "train_loss", "accuracy")
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
        model = build_model(torch, p.model, features, device)
        tasks = make_tasks(torch, p, model, features, rows, lr, dp, world.rank, device)
        fit = Fit(torch, p, tasks, dp, precision.autocast(device), world)
        val_loss_before, acc_before = fit.evaluate(batch)
        losses, step_max = fit.train(rows, batch)
        val_loss, acc = fit.evaluate(batch)
        n_params = sum(w.numel() for w in model.parameters())
        dp.shutdown()
        if not step_max:
            raise ValueError(f"candle: warmup_steps ({p.warmup_steps}) leaves no timed step of {len(losses)}; "
                             "lower warmup_steps or raise samples_per_rank")
        info = {"device": str(device), "backend": backend, "features": features, "batch_size": batch,
                "global_batch": batch * world.size, "parameters": n_params, "steps": len(losses), "lr": lr,
                "accuracy_before": acc_before, "val_loss_before": val_loss_before, "reference": REFERENCE,
                "tasks": [t.name for t in tasks] if p.model == "p3b1" else None, "losses": losses}
        return outcome(p, batch * world.size, len(tasks) * (rows // batch), losses, step_max,
                       (val_loss_before, val_loss), acc, info)


class Fit:
    """The training and held-out evaluation of one pilot's models on one rank, over the shared
    data-parallel layer."""

    def __init__(self, torch, p, tasks: list[Task], dp, autocast, world):
        self.torch, self.p, self.tasks, self.dp = torch, p, tasks, dp
        self.autocast, self.rank, self.world_size = autocast, world.rank, world.size

    def evaluate(self, batch: int) -> tuple[float, list[float]]:
        """(held-out loss: mean over ranks, and over tasks as the release averages them; accuracy
        per task over all ranks' held-out rows). Keras evaluates in batches and averages the batch
        losses; so does this, which keeps P1B2's activity penalty (a sum over a batch) per batch."""
        torch, local, n = self.torch, [], self.p.val_samples_per_rank
        for t in self.tasks:
            t.net.eval()
            loss_sum, correct = 0.0, 0
            with torch.no_grad(), self.autocast:
                for i in range(0, n, batch):
                    loss, c = loss_and_correct(torch, self.p.model, t.net(t.xv[i:i + batch]), t.yv[i:i + batch],
                                               t.model)
                    loss_sum, correct = loss_sum + float(loss) * len(t.yv[i:i + batch]), correct + (c or 0)
            t.net.train()
            local.append((loss_sum / n, correct))
        parts = self.dp.allgather(local)
        losses = [sum(r[i][0] for r in parts) / self.world_size for i in range(len(self.tasks))]
        if self.p.model == "p1b1":
            return losses[0], []
        rows = self.p.val_samples_per_rank * self.world_size
        return sum(losses) / len(losses), [sum(r[i][1] for r in parts) / rows for i in range(len(self.tasks))]

    def train(self, rows: int, batch: int) -> tuple[list[float], list[float]]:
        """(every step's loss on this rank, each timed step's slowest-rank time). Each epoch trains
        the tasks in turn, one pass over each task's rows."""
        torch, p = self.torch, self.p
        cuda = self.tasks[0].x.device.type == "cuda"
        losses, times = [], []
        gen = torch.Generator().manual_seed(p.seed + 7 + self.rank)
        for _ in range(p.epochs):
            for t in self.tasks:
                order = torch.randperm(rows, generator=gen).to(t.x.device)
                for s in range(rows // batch):
                    idx = order[s * batch:(s + 1) * batch]
                    if cuda:
                        torch.cuda.synchronize(t.x.device)
                    t0 = time.perf_counter()
                    t.opt.zero_grad(set_to_none=True)
                    with self.autocast:
                        loss, _ = loss_and_correct(torch, p.model, t.net(t.x[idx]), t.y[idx], t.model)
                    loss.backward()
                    t.opt.step()
                    if cuda:
                        torch.cuda.synchronize(t.x.device)
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
                           higher_is_better=False,
                           description="held-out loss after training, mean over ranks (P3B1: and tasks)"),
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
