"""The TensorFlow/Keras side of exabench.training: precision through Keras mixed-precision
policies, SGD with momentum and LARC with torch's update rule, and one training step
per data-parallel backend (MultiWorkerMirroredStrategy or Horovod) with gradients
averaged over ranks before the optimizer sees them.

TensorFlow is imported at module import: import this module inside a benchmark's run().
"""

from __future__ import annotations

from dataclasses import dataclass

import tensorflow as tf
from tensorflow import keras

from exabench.errors import NotRunnableHere
from exabench.training import distributed_tf


# -- precision ---------------------------------------------------------------
@dataclass
class Precision:
    name: str
    policy: str          # the Keras dtype policy of the layers
    loss_scaling: bool
    note: str


def precision_for(name: str, gpu: bool) -> Precision:
    """Set up `name` (the global Keras policy, TF32 on GPUs); refuses what cannot run."""
    if tf.config.list_physical_devices("GPU"):
        tf.config.experimental.enable_tensor_float_32_execution(name == "tf32")
    if name == "tf32":
        gpus = tf.config.get_visible_devices("GPU")
        capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0)) \
            if gpus else None
        if not gpu or not capability or capability[0] < 8:
            raise NotRunnableHere("precision tf32 needs an NVIDIA GPU of compute capability >= 8.0 (Ampere or "
                                  f"later); this run has {f'a GPU of capability {capability}' if gpu else 'no GPU'}")
        prec = Precision(name, "float32", False, "fp32 storage, TF32 tensor-core matmul and convolution")
    elif name == "fp16":
        note = ("mixed_float16 policy, dynamic loss scaling (LossScaleOptimizer)" if gpu else
                "EMULATED on CPU: mixed_float16 policy through CPU kernels, loss scaling active; not "
                "representative of fp16 hardware")
        prec = Precision(name, "mixed_float16", True, note)
    elif name == "bf16":
        prec = Precision(name, "mixed_bfloat16", False, "mixed_bfloat16 policy, no loss scaling (8-bit exponent)")
    elif name == "fp32":
        prec = Precision(name, "float32", False, "fp32 (tf32 disabled)" if gpu else "fp32")
    else:
        raise ValueError(f"precision {name!r}: valid are fp32, tf32, fp16, bf16")
    keras.mixed_precision.set_global_policy(prec.policy)
    return prec


# -- optimizer ---------------------------------------------------------------
class SGD(keras.optimizers.Optimizer):
    """torch.optim.SGD's rule (buf = momentum x buf + g; w -= lr x buf, L2 decay folded into g),
    optionally with LARC (exabench.training.LARC): per variable,
    local_lr = trust x ||w|| / (||g|| + wd x ||w|| + eps); clip mode scales g + wd x w by
    min(local_lr / lr, 1), scale mode by local_lr; a zero weight or gradient is left unadapted
    and undecayed, as apex's LARC skips it. Keras' own SGD differs (m = momentum x m - lr x g)
    whenever the LR changes, as it does during warmup.

    The gradients reaching `apply` are already averaged over ranks by the training step, so
    the optimizer's own all-reduce under a tf.distribute strategy is switched off."""

    def __init__(self, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0, larc: bool = False,
                 trust_coefficient: float = 0.02, clip: bool = True, eps: float = 1e-8, name: str = "sgd_torch"):
        super().__init__(learning_rate=learning_rate, name=name)
        self.momentum, self.l2, self.larc = momentum, weight_decay, larc
        self.trust_coefficient, self.clip, self.eps = trust_coefficient, clip, eps

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum") if self.momentum else []

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return list(grads_and_vars)  # averaged by the step already (see the class doc)

    def update_step(self, gradient, variable, learning_rate):
        w = variable
        lr = tf.cast(learning_rate, w.dtype)
        g = tf.cast(gradient, w.dtype)
        decayed = g + self.l2 * w if self.l2 else g
        if self.larc:
            w_norm, g_norm = tf.norm(w), tf.norm(g)
            local = self.trust_coefficient * w_norm / (g_norm + self.l2 * w_norm + self.eps)
            if self.clip:
                local = tf.minimum(local / lr, 1.0)
            g = tf.where(tf.logical_and(w_norm > 0, g_norm > 0), decayed * local, g)
        else:
            g = decayed
        if self.momentum:
            buf = self.momentums[self._get_variable_index(variable)]
            self.assign(buf, self.momentum * buf + g)
            g = buf
        self.assign_sub(variable, lr * g)


def make_optimizer(p, lr: float, loss_scaling: bool):
    opt = SGD(lr, momentum=p.momentum, weight_decay=p.weight_decay, larc=p.optimizer == "lars",
              trust_coefficient=p.trust_coefficient, clip=p.lars_clip)
    return keras.optimizers.LossScaleOptimizer(opt) if loss_scaling else opt


def _loss(model, images, labels):
    logits = tf.cast(model(images, training=True), tf.float32)  # the loss in fp32, as torch's autocast does
    return keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def _apply(opt, model, grads, loss_scaling: bool):
    """Apply averaged gradients; returns their checksum (unscaled), the same on every rank."""
    opt.apply(grads, model.trainable_variables)  # LossScaleOptimizer unscales and skips non-finite steps
    total = tf.add_n([tf.reduce_sum(tf.cast(g, tf.float64)) for g in grads])
    return total / tf.cast(opt.dynamic_scale, tf.float64) if loss_scaling else total


# -- data parallelism --------------------------------------------------------
class MirroredWorkers:
    """MultiWorkerMirroredStrategy: one replica per rank, gradients summed by the strategy's
    collectives (RING over gRPC on CPUs, NCCL on GPUs) of the loss divided by the global batch."""

    def __init__(self, backend: str, world, collectives, run_dir, gpu: bool, fusion_threshold_mb: float):
        implementation = {"auto": "NCCL" if gpu else "RING", "ring": "RING", "nccl": "NCCL"}[backend]
        self.strategy, self.options = distributed_tf.mirrored_strategy(world, collectives, run_dir, implementation,
                                                                       fusion_threshold_mb)
        self.backend = implementation.lower()
        self.description = f"tf.distribute.MultiWorkerMirroredStrategy({implementation})"

    def scope(self):
        return self.strategy.scope()

    def broadcast(self, model, opt) -> None:
        pass  # the strategy gives variables created in its scope rank 0's initial values

    def train_step(self, model, opt, loss_scaling: bool, global_batch: int):
        strategy, options = self.strategy, self.options

        def replica(images, labels):
            with tf.GradientTape() as tape:
                per_example = _loss(model, images, labels)
                loss = tf.reduce_sum(per_example) / global_batch  # summed over ranks: the global mean
                scaled = opt.scale_loss(loss) if loss_scaling else loss
            grads = tape.gradient(scaled, model.trainable_variables)
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads, options)
            return tf.reduce_mean(per_example), _apply(opt, model, grads, loss_scaling)

        @tf.function(autograph=False)  # no tensor-dependent Python control flow: tracing without conversion is faster
        def step(images, labels):
            loss, grad_sum = strategy.run(replica, args=(images, labels))
            return strategy.experimental_local_results(loss)[0], strategy.experimental_local_results(grad_sum)[0]
        return step


class HorovodTF:
    """Horovod for TensorFlow: DistributedGradientTape averages (with tensor fusion and optional
    fp16 compression) before the optimizer applies; initial variables broadcast from rank 0."""

    def __init__(self, world, collectives, fusion_threshold_mb: float, compression: str):
        self.hvd = distributed_tf.init_horovod(world, collectives, fusion_threshold_mb)
        self.compression = self.hvd.Compression.fp16 if compression == "fp16" else self.hvd.Compression.none
        import horovod
        self.backend, self.description = "horovod", f"horovod.tensorflow {horovod.__version__}"

    def scope(self):
        return tf.distribute.get_strategy().scope()  # the default strategy: plain variables

    def broadcast(self, model, opt) -> None:
        # The tf.Variables behind Keras 3's variables (Horovod assigns them directly).
        variables = [v.value for v in [*model.variables, *opt.variables]]
        self.hvd.broadcast_variables(variables, root_rank=0)

    def train_step(self, model, opt, loss_scaling: bool, global_batch: int):
        hvd, compression = self.hvd, self.compression

        @tf.function(autograph=False)  # no tensor-dependent Python control flow: tracing without conversion is faster
        def step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(_loss(model, images, labels))
                scaled = opt.scale_loss(loss) if loss_scaling else loss
            tape = hvd.DistributedGradientTape(tape, compression=compression)
            # Horovod needs the tf.Variables behind Keras 3's variables (those have no .ref()).
            grads = tape.gradient(scaled, [v.value for v in model.trainable_variables])
            return loss, _apply(opt, model, grads, loss_scaling)
        return step


def data_parallel(p, world, collectives, run_dir, gpu: bool):
    """The data-parallel layer for p.backend (auto: MWMS over NCCL on GPUs, RING on CPUs)."""
    if p.backend == "horovod":
        return HorovodTF(world, collectives, p.fusion_threshold_mb, p.compression)
    return MirroredWorkers(p.backend, world, collectives, run_dir, gpu, p.fusion_threshold_mb)
