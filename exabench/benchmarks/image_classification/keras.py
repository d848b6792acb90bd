"""The image-classification workload in TensorFlow/Keras: `resnet50-keras` and
`convnet_cifar10-keras`, the same parameters, presets, metrics and checks as `resnet50`
and `convnet_cifar10` (exabench.benchmarks.image_classification), so their records and
tables line up; only `framework` differs.

The networks match the PyTorch ones layer for layer (exabench.models.resnet_keras). The
training step is a custom loop, tf.GradientTape inside tf.function, data-parallel over
MultiWorkerMirroredStrategy (RING or NCCL collectives, TF_CONFIG built from the launcher's
ranks) or Horovod for TensorFlow; mixed precision through Keras policies; SGD and LARC with
torch's update rule; the LR scaled with the global batch and warmed up by the same
functions as the PyTorch version. Measured by the same loop (warmup excluded, slowest
rank per step, global images / max elapsed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from exabench.training.distributed_tf import KERAS_BACKENDS
from exabench.errors import ConfigError
from exabench.benchmarks.registry import get, register
from exabench.benchmarks.base import Outcome, param
from exabench.benchmarks.image_classification.pytorch import (ImageClassification, ImageClassificationParams, _Loop,
                                                              batch_sizes, outcome)

# Parameters of the PyTorch version with no TensorFlow counterpart: only their default is valid.
TORCH_ONLY = {"channels_last": "Keras layers here are NHWC (channels last) always; the switch is torch's memory "
                               "format",
              "compile": "the Keras step is always a tf.function graph; torch.compile has no counterpart here"}


@dataclass
class KerasImageClassificationParams(ImageClassificationParams):
    backend: str = param("auto", "data parallelism: MultiWorkerMirroredStrategy over auto (NCCL collectives on "
                                 "GPUs, RING on CPUs), ring, nccl; or horovod (horovod.tensorflow)",
                         choices=KERAS_BACKENDS)


class KerasImageClassification(ImageClassification):
    framework = "tensorflow"
    Params = KerasImageClassificationParams
    # MultiWorkerMirroredStrategy's (or Horovod's) all-reduce of the gradients: not modelled by the
    # local scaling check, which knows DDP's buckets only.
    communication = {"pattern": "gradient-allreduce"}

    @classmethod
    def resolve_params(cls, preset: str, overrides: dict, file: str, where: str):
        params = super().resolve_params(preset, overrides, file, where)
        defaults = {f.name: f.default for f in dataclasses.fields(cls.Params)}
        for key, why in TORCH_ONLY.items():
            if getattr(params, key) != defaults[key]:
                raise ConfigError(file, f"{where}.{key}", getattr(params, key),
                                  f"{defaults[key]!r} only ({cls.name} is TensorFlow/Keras: {why})")
        if params.compression != "none" and params.backend != "horovod":
            raise ConfigError(file, f"{where}.compression", params.compression,
                              f"'none' with backend {params.backend!r} (gradient compression is Horovod's)")
        return params

    def run(self, p: KerasImageClassificationParams, ctx) -> Outcome:
        world = ctx.world
        local_batch, global_batch = batch_sizes(p, world)
        if world.size > 1:
            ctx.collectives  # noqa: B018 - MPI (mpi4py) initialised before TensorFlow and Horovod start
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(ctx.threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, ctx.threads)))
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:  # one GPU per rank, as the PyTorch version pins cuda:<local rank>
            gpu = gpus[world.local_rank % len(gpus)]
            tf.config.set_visible_devices(gpu, "GPU")
            tf.config.experimental.set_memory_growth(gpu, True)
        from tensorflow import keras

        from exabench.training import lr_rules, keras_loop as training_tf
        from exabench.models.resnet_keras import build_model, parameter_count, training_flops

        dp = training_tf.data_parallel(p, world, ctx.collectives, ctx.run_dir, bool(gpus))
        precision = training_tf.precision_for(p.precision, bool(gpus))
        keras.utils.set_random_seed(p.seed)  # same initial weights on every rank (and broadcast)
        lr = lr_rules.scaled_lr(p.lr, global_batch, p.reference_batch)
        with dp.scope():
            model = build_model(self.model_name, p.num_classes, p.image_size)
            opt = training_tf.make_optimizer(p, lr, precision.loss_scaling)
            opt.build(model.trainable_variables)
        dp.broadcast(model, opt)
        step_fn = dp.train_step(model, opt, precision.loss_scaling, global_batch)
        run = _KerasLoop(p, world, ctx.collectives, model, opt, step_fn, lr, global_batch, local_batch)
        result = run.synthetic() if p.data == "synthetic" else run.epochs(ctx.run_dir)
        checksum = float(sum(tf.reduce_sum(tf.cast(w, tf.float64)) for w in model.trainable_variables))
        sums = ctx.collectives.allgather((checksum, run.grad_sum))

        flops_per_image = training_flops(model)
        info = {"model": self.model_name, "device": "gpu" if gpus else "cpu", "backend": dp.backend,
                "strategy": dp.description, "tensorflow": tf.__version__, "keras": keras.__version__,
                "parameters": parameter_count(model), "training_flops_per_image": flops_per_image,
                "local_batch": local_batch, "global_batch": global_batch, "scaling": p.scaling, "lr": lr,
                "precision_note": precision.note, "losses": result["losses"]}
        return outcome(p, world, int(ctx.layout["nodes"]), result, global_batch, flops_per_image, sums, info)


class _KerasLoop(_Loop):
    """The PyTorch version's measured loops with Keras steps and tf.data input."""

    def __init__(self, p, world, collectives, model, opt, step_fn, lr, global_batch, local_batch):
        import tensorflow as tf
        self.tf = tf
        self.p, self.world, self.dp, self.local_batch = p, world, collectives, local_batch  # max, allgather
        self.model, self.opt, self.step_fn, self.lr = model, opt, step_fn, lr
        self.warmup_start = min(1.0, p.reference_batch / global_batch)
        self.losses: list[float] = []
        self.grad_sum = 0.0
        self.predict = tf.function(lambda x: model(x, training=False))

    def _sync(self):
        pass  # _step reads the loss and the gradient checksum back to the host: the step is done

    def _step(self, step: int, images, labels) -> float:
        from exabench.training.lr_rules import warmup_factor
        self._maybe_fail(step)
        # The LR of this step, as torch's LambdaLR sets it (factor of the steps taken so far).
        self.opt.learning_rate = self.lr * warmup_factor(step, self.p.lr_warmup_steps, self.warmup_start)
        loss, grad_sum = self.step_fn(images, labels)
        value = float(loss)
        self.grad_sum = float(grad_sum)
        self.losses.append(value)
        return value

    def _fixed_batch(self):
        tf, p = self.tf, self.p
        gen = tf.random.Generator.from_seed(p.seed + self.world.rank)
        images = gen.normal([self.local_batch, p.image_size, p.image_size, 3])
        labels = gen.uniform([self.local_batch], 0, p.num_classes, dtype=tf.int64)
        return images, labels

    def _begin_epoch(self, loader, epoch: int) -> None:
        pass  # tf.data reshuffles the shard on every pass

    def _datasets(self, run_dir: Path):
        if self.p.data == "learnable":
            return None, None
        return self._data_paths(run_dir)

    def _loader(self, path, shuffle: bool):
        from exabench.data.images_tf import dataset
        ds, steps = dataset(self.p.data, path, shuffle, self.p, self.world.rank, self.world.size, self.local_batch,
                            split=0 if shuffle else 1)
        if shuffle and steps < 1:
            raise ValueError(f"dataset_size {self.p.dataset_size}: fewer than one batch of {self.local_batch} per "
                             f"rank over {self.world.size} ranks; raise dataset_size or lower batch_size")
        return ds

    def _accuracy(self, loader) -> float:
        tf = self.tf
        correct = seen = 0
        for images, labels in loader:
            pred = tf.argmax(self.predict(images), axis=1)
            correct += int(tf.reduce_sum(tf.cast(pred == labels, tf.int32)))
            seen += int(labels.shape[0])
        counts = self.dp.allgather((correct, seen))
        return sum(c for c, _ in counts) / max(1, sum(s for _, s in counts))


# The names _keras_benchmark registers below, for the registry's index (which reads, not runs, this file).
BENCHMARKS = ("resnet50-keras", "convnet_cifar10-keras")


def _keras_benchmark(torch_name: str, doc: str):
    """The Keras twin of a registered PyTorch benchmark: same presets, `-keras` suffix."""
    torch_cls = get(torch_name)
    name = f"{torch_name}-keras"
    return register(type(name, (KerasImageClassification,), {"__doc__": doc, "name": name,
                                                             "model_name": torch_name, "task": torch_name,
                                                             "presets": torch_cls.presets}))


_keras_benchmark("resnet50", "ResNet-50 v1.5 in Keras, built as torchvision's (25,557,032 parameters at 1000 "
                             "classes).")
_keras_benchmark("convnet_cifar10", "Caffe's cifar10_quick ConvNet in Keras (145,578 parameters).")
