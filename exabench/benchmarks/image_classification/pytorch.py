"""Image-classification training (ResNet-50, AlexNet, GoogLeNet, CaffeNet, ConvNet-CIFAR10):
throughput, time per epoch and time-to-accuracy, data-parallel over torch DDP or Horovod.

Data: `synthetic` is the Horovod synthetic-benchmark convention (one fixed random batch
per rank on the device); `learnable` is a small in-memory set a network can learn;
`imagefolder` and `cifar10-binary` read the real formats through CPU DataLoader workers
(decoding and augmentation), from `data_dir` or a set generated into the run directory.
Measured honestly: every step's time is the slowest rank's, warmup steps are excluded, and
total throughput is global images / max elapsed over ranks, never rank 0 times the world size.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from exabench.benchmarks.registry import register
from exabench.benchmarks.base import Benchmark, Check, Metric, Outcome, param, training_loss_checks
from exabench.data.workers import worker_context
from exabench.energy import timed_region

DATA_KINDS = ("synthetic", "learnable", "imagefolder", "cifar10-binary")


@dataclass
class ImageClassificationParams:
    image_size: int = param(224, "input height and width in pixels", minimum=16)
    batch_size: int = param(32, "images per step: per rank when scaling=weak, global (split over ranks) when "
                                "scaling=strong", minimum=1)
    scaling: str = param("weak", "weak: fixed batch per rank; strong: fixed global batch", choices=("weak", "strong"))
    num_classes: int = param(1000, "classifier outputs (1000 for the ImageNet head, 10 for CIFAR-10)", minimum=2)
    data: str = param("synthetic", "input: synthetic fixed batch, learnable in-memory set, or a real-format "
                                   "input pipeline", choices=DATA_KINDS)
    data_dir: str = param("", "data set path: imagefolder: the folder holding train/ and val/; cifar10-binary: "
                              "the official cifar-10-batches-bin/ (trains on data_batch_*.bin, validates on "
                              "test_batch.bin); empty: generate a small learnable set in the run directory")
    dataset_size: int = param(1024, "training images of a generated or learnable set (validation: a quarter)",
                              minimum=8)
    workers: int = param(2, "DataLoader worker processes per rank (decoding, augmentation)", minimum=0)
    warmup_steps: int = param(10, "steps run before timing starts", minimum=0)
    steps: int = param(100, "timed steps (synthetic data)", minimum=2)
    epochs: int = param(1, "epochs over the data set (non-synthetic data, throughput mode)", minimum=1)
    mode: str = param("throughput", "throughput, or time_to_accuracy: train until the validation accuracy "
                                    "reaches target_accuracy", choices=("throughput", "time_to_accuracy"))
    target_accuracy: float = param(0.9, "validation top-1 accuracy that ends a time_to_accuracy run", minimum=0.0)
    max_epochs: int = param(20, "time_to_accuracy gives up (failed run) after this many epochs", minimum=1)
    precision: str = param("fp32", "arithmetic precision (tf32 needs an Ampere+ GPU; fp16 on CPU is emulated)",
                           choices=("fp32", "tf32", "fp16", "bf16"))
    channels_last: bool = param(False, "use the channels-last memory format")
    compile: bool = param(False, "torch.compile the model")
    cudnn_benchmark: bool = param(True, "on GPUs, let cuDNN time its convolution algorithms for the fixed input "
                                        "shape, as NVIDIA's reference training does; false: its heuristic")
    backend: str = param("auto", "data parallelism: torch DDP over auto (nccl on GPUs, gloo on CPUs), gloo, "
                                 "nccl, mpi; or horovod", choices=("auto", "gloo", "nccl", "mpi", "horovod"))
    fusion_threshold_mb: float = param(64.0, "Horovod tensor fusion buffer (MiB; 0 disables fusion)", minimum=0.0)
    compression: str = param("none", "Horovod gradient compression", choices=("none", "fp16"))
    optimizer: str = param("sgd", "SGD with momentum, or LARC around it", choices=("sgd", "lars"))
    lr: float = param(0.1, "learning rate for reference_batch images; scaled linearly with the global batch",
                      minimum=0.0)
    reference_batch: int = param(256, "global batch at which `lr` applies (Goyal et al.: 0.1 per 256)", minimum=1)
    lr_warmup_steps: int = param(0, "gradual warmup from lr to the scaled lr over these steps (Goyal: 5 epochs)",
                                 minimum=0)
    momentum: float = param(0.9, "SGD momentum", minimum=0.0)
    weight_decay: float = param(0.0, "L2 weight decay", minimum=0.0)
    trust_coefficient: float = param(0.02, "LARS/LARC trust coefficient", minimum=0.0)
    lars_clip: bool = param(True, "LARC clip mode: local lr = min(adaptive, lr); false: LARS scale mode")
    peak_tflops: float = param(0.0, "peak TFLOP/s of one device at this precision (0: unknown, no fraction)",
                               minimum=0.0)
    seed: int = param(42, "seed of the data and the weights")
    fail_at_step: int = param(-1, "raise at this step on the last rank (to test failure handling); -1: never",
                              minimum=-1)


def build_model(name: str, num_classes: int):
    """A model by name: torchvision where it has one, exabench.models otherwise."""
    import torchvision

    from exabench.models.convnets import CaffeNet, ConvNetCIFAR10
    builders = {
        "resnet50": lambda: torchvision.models.resnet50(weights=None, num_classes=num_classes),
        "alexnet": lambda: torchvision.models.alexnet(weights=None, num_classes=num_classes),
        "googlenet": lambda: torchvision.models.googlenet(weights=None, num_classes=num_classes, aux_logits=False,
                                                          init_weights=True),
        "caffenet": lambda: CaffeNet(num_classes),
        "convnet_cifar10": lambda: ConvNetCIFAR10(num_classes),
    }
    return builders[name]()


def training_flops(model, image_size: int, device) -> float:
    """Counted FLOPs of one training sample (forward + backward) on a copy of the model."""
    import copy

    import torch
    from torch.utils.flop_counter import FlopCounterMode
    probe = copy.deepcopy(model).train()
    x = torch.randn(2, 3, image_size, image_size, device=device)  # 2: BatchNorm needs more than one value
    with FlopCounterMode(display=False) as counter:
        probe(x).sum().backward()
    return counter.get_total_flops() / 2


def batch_sizes(p: ImageClassificationParams, world) -> tuple[int, int]:
    """(per-rank batch, global batch) of a run; refuses what cannot run before any work."""
    if p.scaling == "strong" and p.batch_size % world.size:
        raise ValueError(f"batch_size {p.batch_size} (global, scaling=strong) does not split over "
                         f"{world.size} ranks")
    if p.mode == "time_to_accuracy" and p.data == "synthetic":
        raise ValueError("mode time_to_accuracy needs data that can be learned: learnable, imagefolder or "
                         "cifar10-binary (got data=synthetic)")
    local_batch = p.batch_size // world.size if p.scaling == "strong" else p.batch_size
    return local_batch, local_batch * world.size


def train_step(model, optimizer, scaler, precision, dp, device, images, labels):
    """One optimizer step; returns the loss (a device tensor)."""
    import torch.nn.functional as F
    optimizer.zero_grad()  # set_to_none by default in torch 2; Horovod's takes no arguments
    with precision.autocast(device):
        loss = F.cross_entropy(model(images), labels)
    scaler.scale(loss).backward()
    dp.step(optimizer, scaler)
    scaler.update()
    return loss.detach()


class ImageClassification(Benchmark):
    suite = "coral2-dl"
    framework = "pytorch"
    Params = ImageClassificationParams
    id_params = ("precision",)
    model_name: str
    headline = "throughput"
    scaling = "weak"  # the default batch_size is per rank
    # The fp32 gradients all-reduced in DDP's 25 MiB buckets once per step: what the local scaling
    # check models for these runs (Gloo on CPUs).
    communication = {"pattern": "ddp-gradient-buckets", "backend": "gloo", "regime": "large",
                     "timed_metric": "step_time"}
    data_parallel = True

    def run(self, p: ImageClassificationParams, ctx) -> Outcome:
        import torch

        from exabench.training import torch_loop as training

        from exabench.training.devices import torch_device

        world = ctx.world
        device, _ = torch_device(world, ctx.threads)
        local_batch, global_batch = batch_sizes(p, world)
        precision = training.precision_for(p.precision, device)
        if device.type == "cuda":  # a fixed shape every step: the timed algorithm search pays off in warm-up
            torch.backends.cudnn.benchmark = p.cudnn_benchmark
        dp = training.data_parallel(p.backend, world, ctx.run_dir, device, p.fusion_threshold_mb, p.compression)
        # No try/finally: shutdown is a barrier, and on a failing rank it would wait forever for
        # peers still inside a collective; the runner exits and the launcher stops them.
        torch.manual_seed(p.seed)  # same initial weights on every rank (and broadcast by the wrapper)
        memory_format = torch.channels_last if p.channels_last else torch.contiguous_format
        model = build_model(self.model_name, p.num_classes).to(device).to(memory_format=memory_format)
        n_params = sum(x.numel() for x in model.parameters())
        flops_per_image = training_flops(model, p.image_size, device)
        lr = training.scaled_lr(p.lr, global_batch, p.reference_batch)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=p.momentum, weight_decay=p.weight_decay)
        if p.optimizer == "lars":
            opt = training.LARC(opt, p.trust_coefficient, clip=p.lars_clip)
        net, opt = dp.wrap(model, opt)
        if p.compile:
            net = torch.compile(net)
        sched = training.warmup_schedule(opt, p.lr_warmup_steps, start=min(1.0, p.reference_batch / global_batch))
        scaler = precision.grad_scaler(device)
        run = _Loop(p, world, dp, device, memory_format, net, opt, sched, scaler, precision, local_batch)
        result = run.synthetic() if p.data == "synthetic" else run.epochs(ctx.run_dir)
        checksum = float(sum(x.detach().double().sum() for x in model.parameters()))
        grad_sum = float(sum(x.grad.double().sum() for x in model.parameters() if x.grad is not None))
        sums = dp.allgather((checksum, grad_sum))
        dp.shutdown()

        info = {"model": self.model_name, "device": str(device), "backend": dp.backend, "parameters": n_params,
                "training_flops_per_image": flops_per_image, "local_batch": local_batch,
                "global_batch": global_batch, "scaling": p.scaling, "lr": lr, "precision_note": precision.note,
                "losses": result["losses"]}
        return outcome(p, world, int(ctx.layout["nodes"]), result, global_batch, flops_per_image, sums, info)


def outcome(p: ImageClassificationParams, world, nodes: int, result: dict, global_batch: int,
            flops_per_image: float, sums: list[tuple[float, float]], info: dict) -> Outcome:
    """Metrics and checks of a run, the same for every framework: `result` from the measured
    loop (step_times already the slowest rank's), `sums` the (weights, gradients) checksums
    of every rank."""
    step_max = result["step_times"]
    elapsed = sum(step_max)
    total = global_batch * len(step_max) / elapsed
    per_step = [global_batch / s for s in step_max]
    achieved = total * flops_per_image
    prec = p.precision
    metrics = {
        "throughput": Metric(total, "images/s", per_step, prec,
                             description="total images/s over all ranks: global batch x steps / max elapsed"),
        "throughput_per_device": Metric(total / world.size, "images/s", [x / world.size for x in per_step], prec,
                                        description="total throughput / ranks (one device per rank)"),
        "throughput_per_node": Metric(total / nodes, "images/s", [x / nodes for x in per_step], prec),
        "step_time": Metric(elapsed / len(step_max), "s", step_max, prec, higher_is_better=False,
                            description="time of one step, slowest rank, warmup excluded"),
        "achieved_flops": Metric(achieved / 1e12, "TFLOP/s", [x * flops_per_image / 1e12 for x in per_step], prec,
                                 description=f"throughput x counted training FLOPs ({flops_per_image / 1e9:.3g} "
                                             "GFLOP per image)"),
    }
    if p.peak_tflops > 0:
        frac = achieved / 1e12 / (p.peak_tflops * world.size)
        metrics["fraction_of_peak"] = Metric(frac, "1", [], prec, description="achieved / (peak x devices)")
    for key, unit, desc in (("epoch_time", "s", "wall time of one training epoch, slowest rank"),
                            ("input_throughput", "images/s", "input pipeline alone: decoded, augmented images/s "
                                                             "over all ranks"),
                            ("time_to_accuracy", "s", "training time until the validation accuracy reached "
                                                      "the target (evaluation included)"),
                            ("epochs_to_accuracy", "epochs", "epochs until the target accuracy"),
                            ("accuracy", "1", "final validation top-1 accuracy")):
        if key in result:
            value, samples = result[key]
            better = key in ("input_throughput", "accuracy")
            metrics[key] = Metric(value, unit, samples, prec, higher_is_better=better, description=desc)

    weights = [s[0] for s in sums]
    grads = [s[1] for s in sums]
    # finite, bounded and the ranks agree; "the loss falls" is judged only where the run trains
    # to a target (time_to_accuracy), and reported for a throughput run (info "loss_trend")
    checks, info["loss_trend"] = training_loss_checks(result["losses"], p.num_classes,
                                                      convergence=p.mode == "time_to_accuracy")
    checks += [
        Check("weights_in_sync", _spread(weights) <= 1e-6 * max(1.0, abs(weights[0])),
              f"parameter checksum spread over ranks {_spread(weights):.3g}"),
        Check("gradients_in_sync", _spread(grads) <= 1e-6 * max(1.0, abs(grads[0])),
              f"gradient checksum spread over ranks {_spread(grads):.3g} (last step)"),
    ]
    if p.mode == "time_to_accuracy":
        acc = result["accuracy"][0]
        checks.append(Check("reached_target", acc >= p.target_accuracy,
                            f"accuracy {acc:.4f} after {result['epochs_run']} epochs, target {p.target_accuracy}"))
    return Outcome(metrics, checks, info)


def _spread(values: list[float]) -> float:
    return max(values) - min(values)


class _Loop:
    """The measured loops of one run (synthetic steps, or epochs over a data loader)."""

    def __init__(self, p, world, dp, device, memory_format, net, opt, sched, scaler, precision, local_batch):
        self.p, self.world, self.dp, self.device = p, world, dp, device
        self.memory_format, self.net, self.opt, self.sched = memory_format, net, opt, sched
        self.scaler, self.precision, self.local_batch = scaler, precision, local_batch
        self.losses: list[float] = []

    def _sync(self):
        import torch
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _maybe_fail(self, step: int) -> None:
        if step == self.p.fail_at_step and self.world.rank == self.world.size - 1:
            raise RuntimeError(f"injected failure at step {step} (fail_at_step)")

    def _step(self, step: int, images, labels) -> float:
        self._maybe_fail(step)
        images = images.to(self.device, non_blocking=True).contiguous(memory_format=self.memory_format)
        labels = labels.to(self.device, non_blocking=True)
        loss = train_step(self.net, self.opt, self.scaler, self.precision, self.dp, self.device, images, labels)
        self.sched.step()
        value = float(loss)  # a host copy: synchronises the device too
        self.losses.append(value)
        return value

    def _fixed_batch(self):
        """The synthetic data: one random batch of this rank, already on the device."""
        import torch
        p = self.p
        gen = torch.Generator().manual_seed(p.seed + self.world.rank)
        images = torch.randn(self.local_batch, 3, p.image_size, p.image_size, generator=gen).to(self.device)
        labels = torch.randint(0, p.num_classes, (self.local_batch,), generator=gen).to(self.device)
        return images, labels

    def _begin_epoch(self, loader, epoch: int) -> None:
        loader.sampler.set_epoch(epoch)
        self.net.train()

    def synthetic(self) -> dict:
        p = self.p
        images, labels = self._fixed_batch()
        times = []
        for step in range(p.warmup_steps):
            self._step(step, images, labels)
        self._sync()  # the warm-up's work ends before the meter's region starts
        with timed_region():  # the energy meter's timed region: the timed steps only
            for step in range(p.warmup_steps, p.warmup_steps + p.steps):
                self._sync()
                t0 = time.perf_counter()
                self._step(step, images, labels)
                self._sync()
                times.append(time.perf_counter() - t0)
        return {"step_times": self.dp.max(times), "losses": self.losses}

    def epochs(self, run_dir) -> dict:
        p = self.p
        train_set, val_set = self._datasets(Path(run_dir))
        train = self._loader(train_set, shuffle=True)
        val = self._loader(val_set, shuffle=False)
        out = {}
        if p.data != "learnable":
            out["input_throughput"] = self._input_throughput(train)
        tta = p.mode == "time_to_accuracy"
        n_epochs = p.max_epochs if tta else p.epochs
        times, epoch_times, accs = [], [], []
        step, start, reached = 0, time.perf_counter(), None
        for epoch in range(n_epochs):
            self._begin_epoch(train, epoch)
            t_epoch = time.perf_counter()
            t0 = t_epoch
            for images, labels in train:  # the step time includes waiting for the input pipeline
                self._step(step, images, labels)
                self._sync()
                t1 = time.perf_counter()
                if step >= p.warmup_steps:
                    times.append(t1 - t0)
                step, t0 = step + 1, t1
            epoch_times.append(time.perf_counter() - t_epoch)
            if tta or epoch == n_epochs - 1:
                accs.append(self._accuracy(val))
                if tta and accs[-1] >= p.target_accuracy:
                    reached = (time.perf_counter() - start, epoch + 1)
                    break
        if not times:
            raise ValueError(f"warmup_steps {p.warmup_steps} leaves no timed step ({step} steps in all): "
                             "lower warmup_steps or raise dataset_size/epochs")
        step_times = self.dp.max(times)
        epoch_max = self.dp.max(epoch_times)
        out.update({"step_times": step_times, "losses": self.losses, "epoch_time": (statistics.median(epoch_max),
                                                                                    epoch_max),
                    "accuracy": (accs[-1], accs), "epochs_run": len(epoch_times)})
        if reached:
            t = self.dp.max([reached[0]])[0]
            out["time_to_accuracy"] = (t, [t])
            out["epochs_to_accuracy"] = (float(reached[1]), [float(reached[1])])
        return out

    def _datasets(self, run_dir: Path):
        import torch

        from exabench.data import images as imgdata
        p = self.p
        if p.data == "learnable":
            def tensors(n, split):
                x, y = imgdata.learnable_images(n, p.num_classes, p.image_size, p.seed, split)
                x = (torch.from_numpy(x).float() / 255.0 - 0.5) / 0.25
                return torch.utils.data.TensorDataset(x, torch.from_numpy(y))
            return tensors(p.dataset_size, 0), tensors(max(p.dataset_size // 4, self.world.size), 1)
        train_path, val_path = self._data_paths(run_dir)
        return (imgdata.open_dataset(p.data, train_path, p.image_size, train=True),
                imgdata.open_dataset(p.data, val_path, p.image_size, train=False))

    def _data_paths(self, run_dir: Path) -> tuple[Path, Path]:
        """The train and validation paths of a real-format set: `data_dir`, or a learnable set that
        rank 0 generates into the run directory (once) while the others wait."""
        from exabench.data import images as imgdata
        p = self.p
        n_val = max(p.dataset_size // 4, self.world.size)
        generated = run_dir / "data" / (imgdata.CIFAR_FOLDER if p.data == "cifar10-binary" else p.data)
        root = Path(p.data_dir) if p.data_dir else generated
        if not p.data_dir and self.world.rank == 0 and not (root / ".complete").exists():
            imgdata.write_dataset(p.data, root, p.dataset_size, n_val, p.num_classes, p.image_size, p.seed)
            (root / ".complete").touch()
        self.dp.allgather(None)  # a barrier: the generated set is complete before anyone reads it
        if p.data == "cifar10-binary":
            return root, root  # the official folder: data_batch_*.bin train, test_batch.bin validates
        return root / "train", root / "val"

    def _loader(self, dataset, shuffle: bool):
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        p = self.p
        sampler = DistributedSampler(dataset, num_replicas=self.world.size, rank=self.world.rank, shuffle=shuffle,
                                     seed=p.seed, drop_last=shuffle)
        workers = 0 if p.data == "learnable" else p.workers
        return DataLoader(dataset, batch_size=self.local_batch, sampler=sampler, num_workers=workers,
                          drop_last=shuffle, pin_memory=self.device.type == "cuda", persistent_workers=workers > 0,
                          multiprocessing_context=worker_context() if workers else None,
                          generator=torch.Generator().manual_seed(p.seed))

    def _input_throughput(self, loader) -> tuple[float, list[float]]:
        """The input pipeline alone over one epoch; the first batch (worker start-up) is not timed."""
        it = iter(loader)
        next(it)
        n, per_batch, t0 = 0, [], time.perf_counter()
        t_prev = t0
        for images, _ in it:
            n += len(images)
            t = time.perf_counter()
            per_batch.append(len(images) / max(t - t_prev, 1e-9))
            t_prev = t
        elapsed = self.dp.max([time.perf_counter() - t0])[0]
        total = sum(self.dp.allgather(n))
        return total / elapsed if elapsed > 0 else float("nan"), per_batch

    def _accuracy(self, loader) -> float:
        import torch
        self.net.eval()
        correct = seen = 0
        with torch.no_grad(), self.precision.autocast(self.device):
            for images, labels in loader:
                images = images.to(self.device).contiguous(memory_format=self.memory_format)
                pred = self.net(images).argmax(dim=1).cpu()
                correct += int((pred == labels).sum())
                seen += len(labels)
        self.net.train()
        counts = self.dp.allgather((correct, seen))
        return sum(c for c, _ in counts) / max(1, sum(s for _, s in counts))


# The names _model_benchmark registers below, for the registry's index (which reads, not runs, this file).
BENCHMARKS = ("resnet50", "alexnet", "googlenet", "caffenet", "convnet_cifar10")


def _model_benchmark(model: str, doc: str, presets: dict, defaults: dict):
    """One registered benchmark per model: the shared workload with its own presets."""
    base = {"tiny": {"warmup_steps": 2, "steps": 6, "workers": 1, "dataset_size": 64},
            "small": {"warmup_steps": 5, "steps": 20, "dataset_size": 512},
            "full": {"warmup_steps": 10, "steps": 100, "dataset_size": 4096}}
    merged = {k: {**base[k], **defaults, **presets.get(k, {})} for k in base}
    cls = type(model, (ImageClassification,), {"__doc__": doc, "name": model, "model_name": model,
                                                "presets": merged})
    return register(cls)


_model_benchmark("resnet50", "torchvision ResNet-50 (25,557,032 parameters at 1000 classes).", {
    "tiny": {"image_size": 64, "batch_size": 4},
    "small": {"image_size": 128, "batch_size": 16},
    "full": {"image_size": 224, "batch_size": 32}}, {})
_model_benchmark("alexnet", "torchvision AlexNet (one-GPU variant, 61,100,840 parameters).", {
    "tiny": {"image_size": 64, "batch_size": 4, "num_classes": 10},
    "small": {"image_size": 128, "batch_size": 32},
    "full": {"image_size": 224, "batch_size": 128}}, {})
_model_benchmark("googlenet", "torchvision GoogLeNet without auxiliary heads (6,624,904 parameters).", {
    "tiny": {"image_size": 64, "batch_size": 4, "num_classes": 10},
    "small": {"image_size": 128, "batch_size": 16},
    "full": {"image_size": 224, "batch_size": 32}}, {})
_model_benchmark("caffenet", "BVLC reference CaffeNet (60,965,224 parameters).", {
    "tiny": {"image_size": 64, "batch_size": 4, "num_classes": 10},
    "small": {"image_size": 128, "batch_size": 32},
    "full": {"image_size": 227, "batch_size": 256}}, {})
_model_benchmark("convnet_cifar10", "Caffe's cifar10_quick ConvNet on 32x32 CIFAR-10 (145,578 parameters).", {
    # tiny: a rate that learns the small learnable set in a few epochs (time_to_accuracy in CI)
    "tiny": {"batch_size": 16, "dataset_size": 512, "lr": 0.01, "reference_batch": 32, "max_epochs": 8},
    "small": {"batch_size": 100, "dataset_size": 5000},
    "full": {"batch_size": 100, "dataset_size": 50000}},
    {"image_size": 32, "num_classes": 10, "lr": 0.001, "reference_batch": 100, "data": "cifar10-binary"})
