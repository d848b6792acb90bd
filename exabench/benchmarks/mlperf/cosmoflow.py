"""MLPerf-HPC CosmoFlow in PyTorch (and Keras, below): regress 4 cosmological parameters from 3D dark-matter
volumes, trained to a validation MAE target, time-to-train measured as MLPerf does.

Follows the MLCommons reference (Keras): the 5-layer 3D CNN (exabench.models.cosmoflow),
MSE loss, MAE metric, SGD with momentum, LR = base_lr x global batch / base batch with
a linear warmup over epochs from base_lr and absolute decay factors at given epochs,
log(x + 1) on the int16 counts, data sharded over ranks by file. Data come from
`data_dir` (train/ and validation/ with TFRecord or HDF5 files in the reference
layout) or are generated synthetically, untimed, into the run directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exabench.errors import ConfigError
from exabench.benchmarks.registry import register
from exabench.training import devices
from exabench.benchmarks.base import Outcome, param
from exabench.benchmarks.mlperf.base import MLPerfBenchmark, MLPerfParams


def network_settings(p) -> dict:
    """The network's settings from the benchmark's parameters: the PyTorch and Keras CosmoFlow take
    the same ones (exabench.models.cosmoflow, cosmoflow_keras)."""
    return {"conv_size": p.conv_size, "kernel_size": p.kernel_size, "fc1_size": p.fc1_size,
            "fc2_size": p.fc2_size, "dropout": p.dropout}


@dataclass

class CosmoFlowParams(MLPerfParams, seed=42, data_set="CosmoFlow", staging_timed=True):
    sample_size: int = param(128, "edge of the cubic input volume in voxels (4 channels)", minimum=32)
    conv_size: int = param(32, "filters of the first conv layer (doubled per layer; reference 32)", minimum=1)
    kernel_size: int = param(3, "conv kernel edge", minimum=1)
    fc1_size: int = param(128, "units of the first dense layer", minimum=1)
    fc2_size: int = param(64, "units of the second dense layer", minimum=1)
    dropout: float = param(0.5, "dropout after each dense layer", minimum=0.0)
    batch_size: int = param(4, "samples per rank per step (reference 4)", minimum=1)
    base_lr: float = param(0.001, "LR at base_batch; scaled linearly with the global batch", minimum=0.0)
    base_batch: int = param(64, "global batch at which base_lr holds", minimum=1)
    warmup_epochs: int = param(4, "epochs of linear warmup from base_lr to the scaled LR", minimum=0)
    decay_schedule: str = param("32:0.25 64:0.125", "'epoch:factor ...' absolute LR factors from that epoch on")
    momentum: float = param(0.9, "SGD momentum", minimum=0.0)
    weight_decay: float = param(
        0.0,
        "L2 penalty on the two hidden Dense kernels, added to the loss "
        "(the reference's l2: weight_decay x sum of their squared weights)",
        minimum=0.0,
    )
    max_epochs: int = param(128, "stop after this many epochs if the target is not reached", minimum=1)
    target_mae: float = param(0.124, "validation MAE to reach (MLPerf: 0.124)", minimum=0.0)
    data_dir: str = param("", "data set root (train/, validation/); empty: generate a synthetic one")
    data_format: str = param("tfrecord", "file format to read", choices=("tfrecord", "hdf5"))
    n_train: int = param(1024, "training samples to generate (synthetic data only)", minimum=1)
    n_validation: int = param(256, "validation samples to generate (synthetic data only)", minimum=1)


# What the closed division fixes beyond the logged hyper-parameters the checker sees: the
# reference network, SGD's momentum, the quality target and the data set (MLPerf-HPC rules).
CLOSED_PARAMS = {
    "sample_size": 128,
    "conv_size": 32,
    "kernel_size": 3,
    "fc1_size": 128,
    "fc2_size": 64,
    "momentum": 0.9,
    "target_mae": 0.124,
}
CLOSED_SAMPLES = (524288, 65536)  # training, validation samples of the CosmoFlow data set


def closed_rules(p: CosmoFlowParams) -> None:
    from exabench.benchmarks.mlperf.harness import require_closed_rules, split_sizes
    from exabench.data import cosmo

    def list_split(root: Path, split: str) -> list:
        return cosmo.list_samples(root / split, p.data_format, p.sample_size)

    require_closed_rules(p, CLOSED_PARAMS, CLOSED_SAMPLES, split_sizes(list_split, OSError))


def parse_decay(text: str, key: str = "decay_schedule") -> dict[int, float]:
    try:
        return {int(e): float(f) for e, f in (item.split(":") for item in text.split())}
    except ValueError:
        raise ConfigError(
            "(params)", key, text, "space-separated 'epoch:factor' pairs, e.g. '32:0.25 64:0.125'"
        ) from None


def prepare_data(tr, p: CosmoFlowParams) -> Path:
    """The data set (generated untimed when no data_dir is given), staged and sharded over the
    ranks; the root the run reads from."""
    from exabench.data import cosmo

    root = tr.data_root(
        lambda r: cosmo.generate(r, p.n_train, p.n_validation, p.sample_size, seed=p.data_seed, formats=(p.data_format,)),
        "validation",
    )
    tr.begin_init()
    root = tr.stage(root, [str(f) for f in root.rglob("*") if f.is_file() and f.parent.name in cosmo.SPLITS])
    tr.shard(
        cosmo.list_samples(root / "train", p.data_format, p.sample_size),
        cosmo.list_samples(root / "validation", p.data_format, p.sample_size),
    )
    return root


def build_training(tr, p: CosmoFlowParams):
    """The seeded network on the run's device, its DDP wrapper and SGD over it."""
    import torch

    from exabench.models.cosmoflow import CosmoFlow as Net

    torch.manual_seed(p.seed)
    model = Net(p.sample_size, **network_settings(p)).to(tr.device)
    ddp = devices.ddp(model, tr.device)
    opt = torch.optim.SGD(ddp.parameters(), lr=p.base_lr, momentum=p.momentum)
    return model, ddp, opt


def log_optimizer(log, p: CosmoFlowParams, global_batch: int, decay: dict[int, float]) -> float:
    """The optimizer's keys in the MLPerf log; returns the peak LR (base_lr scaled to the global batch)."""
    peak = p.base_lr * global_batch / p.base_batch
    # As the reference logs them: its "base" LR is the scaled one, the warmup factor the scaling.
    for key, value in (
        ("opt_name", "SGD"),
        ("opt_base_learning_rate", peak),
        ("opt_learning_rate_warmup_epochs", p.warmup_epochs),
        ("opt_learning_rate_warmup_factor", global_batch / p.base_batch),
        ("opt_learning_rate_decay_boundary_epochs", sorted(decay)),
        ("opt_learning_rate_decay_factor", max(decay.values()) if decay else 1.0),
        ("dropout", p.dropout),
        ("opt_weight_decay", p.weight_decay),
    ):
        log.event(key, value)
    return peak


def train_to_target(tr, p: CosmoFlowParams, model, ddp, opt, decay: dict[int, float]):
    """Epochs of SGD on the reference's LR schedule, each followed by the validation MAE, until the target."""
    import numpy as np
    import torch

    from exabench.data import cosmo
    from exabench.training.optim import cosmoflow_lr

    def batch(refs):
        xs, ys = zip(*(cosmo.load_sample(r, p.data_format, p.sample_size) for r in refs))
        x = torch.from_numpy(np.stack([cosmo.log_transform(x) for x in xs])).to(tr.device)
        return x, torch.from_numpy(np.stack(ys)).to(tr.device)

    def train_epoch(epoch: int):
        for g in opt.param_groups:  # Keras' LearningRateScheduler counts epochs from 0
            g["lr"] = cosmoflow_lr(epoch - 1, p.base_lr, tr.global_batch, p.base_batch, p.warmup_epochs, decay)
        return tr.train_epoch(epoch, ddp, opt, batch, loss)

    def loss(out, y):  # Keras' mse plus the regularisation losses of the model
        mse = torch.nn.functional.mse_loss(out, y)
        return mse + p.weight_decay * model.l2_penalty() if p.weight_decay else mse

    def evaluate(epoch: int) -> float:  # MAE over samples and the 4 targets, as Keras'
        return tr.evaluate(model, batch, lambda out, y: (float((out - y).abs().sum()), y.numel()))

    return tr.train(p.max_epochs, train_epoch, evaluate, "eval_error", p.target_mae, False)


@register
class CosmoFlow(MLPerfBenchmark):  # time_to_train: to the target MAE
    name = "cosmoflow"
    Params = CosmoFlowParams
    presets = {
        # Same code path, laptop scale: 32^3 volumes, narrow convs, a few hundred samples.
        # LR and batch tuned on the synthetic set (SGD reached MAE 0.10 in 6 epochs, one process).
        "tiny": {
            "sample_size": 32,
            "conv_size": 8,
            "dropout": 0.0,
            "n_train": 256,
            "n_validation": 64,
            "batch_size": 2,
            "base_lr": 0.01,
            "base_batch": 4,
            "warmup_epochs": 1,
            "decay_schedule": "8:0.5 12:0.25",
            "max_epochs": 16,
        },
        "small": {
            "sample_size": 64,
            "conv_size": 16,
            "n_train": 1024,
            "n_validation": 256,
            "max_epochs": 32,
            "base_lr": 0.002,
            "base_batch": 16,
            "warmup_epochs": 2,
            "decay_schedule": "16:0.25 24:0.125",
        },
        "full": {"sample_size": 128, "conv_size": 32, "n_train": 524288, "n_validation": 65536},
    }

    def run(self, p: CosmoFlowParams, ctx) -> Outcome:
        from exabench.benchmarks.mlperf.harness import TrainingRun

        decay = parse_decay(p.decay_schedule)
        closed_rules(p)
        with TrainingRun(ctx, "cosmoflow", p) as tr:
            root = prepare_data(tr, p)
            model, ddp, opt = build_training(tr, p)
            peak = log_optimizer(tr.log, p, tr.global_batch, decay)
            result = train_to_target(tr, p, model, ddp, opt, decay)
            return tr.outcome(
                result,
                model,
                "eval_error",
                "MAE",
                p.target_mae,
                False,
                {"peak_lr": peak, "data_dir": str(root), "data_format": p.data_format},
            )


def require_one_tfrecord_process(p: CosmoFlowParams, ctx) -> None:
    """A ConfigError unless the run is what the Keras version can do: one process reading TFRecords in place."""
    if ctx.world.size != 1:
        raise ConfigError(
            "(params)",
            "ranks",
            ctx.world.size,
            "1 (the Keras version runs in one process; use 'cosmoflow' for data-parallel runs)",
        )
    if p.data_format != "tfrecord" or p.stage_dir:
        raise ConfigError(
            "(params)",
            "data_format/stage_dir",
            (p.data_format, p.stage_dir),
            "tfrecord without staging for the Keras version",
        )


def start_tensorflow(threads: int, seed: int):
    """TensorFlow on `threads` threads, seeded; the module."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    except RuntimeError:  # TensorFlow already started in this process: its thread pool stays
        pass
    tf.keras.utils.set_random_seed(seed)
    return tf


def keras_train_to_target(log, p: CosmoFlowParams, model, opt, train_files: list[str], val_files: list[str],
                          decay: dict[int, float]):
    """Keras epochs over the tf.data pipelines on the reference's LR schedule until the target
    MAE: (the run's result, the loss of each epoch)."""
    import time

    import tensorflow as tf

    from exabench.benchmarks.mlperf import harness as mlperf
    from exabench.models.cosmoflow_keras import tfrecord_dataset
    from exabench.training.optim import cosmoflow_lr

    steps = len(train_files) // p.batch_size
    train_ds = tfrecord_dataset(train_files, p.sample_size, p.batch_size, shuffle_seed=p.seed).repeat()
    # A known length (one sample per file) lets Keras evaluate the whole set every epoch.
    val_ds = tfrecord_dataset(val_files, p.sample_size, p.batch_size).apply(
        tf.data.experimental.assert_cardinality(-(-len(val_files) // p.batch_size))
    )
    losses: list[float] = []

    def train_epoch(epoch: int):
        opt.learning_rate.assign(
            cosmoflow_lr(epoch - 1, p.base_lr, p.batch_size, p.base_batch, p.warmup_epochs, decay)
        )
        t0 = time.perf_counter()
        history = model.fit(train_ds, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
        seconds = time.perf_counter() - t0
        losses.append(float(history.history["loss"][-1]))
        return seconds, steps * p.batch_size, losses[-1]

    def evaluate(epoch: int) -> float:
        return float(model.evaluate(val_ds, verbose=0, return_dict=True)["mae"])

    log.end("init_stop")
    result = mlperf.run_to_target(
        log,
        p.max_epochs,
        train_epoch,
        evaluate,
        "eval_error",
        p.target_mae,
        higher_is_better=False,
        barrier=lambda: None,
    )
    return result, losses


@register
class CosmoFlowKeras(CosmoFlow):
    """The same workload and config in TensorFlow/Keras, the reference's framework: Keras
    Sequential model, tf.data TFRecord pipeline, Keras SGD, MSE and MAE. One process only
    (the reference scales with Horovod, which is not installed here): ConfigError otherwise."""

    name = "cosmoflow-keras"
    framework = "tensorflow"
    task = "cosmoflow"
    communication = {"pattern": "none"}  # one process (see above)

    def run(self, p: CosmoFlowParams, ctx) -> Outcome:
        from exabench.benchmarks.mlperf import harness as mlperf
        from exabench.data import cosmo
        from exabench.models.cosmoflow_keras import build_model

        require_one_tfrecord_process(p, ctx)
        closed_rules(p)
        tf = start_tensorflow(ctx.threads, p.seed)
        decay = parse_decay(p.decay_schedule)
        root = Path(p.data_dir) if p.data_dir else Path(ctx.run_dir) / "data"
        if not p.data_dir and not (root / "validation").exists():
            cosmo.generate(root, p.n_train, p.n_validation, p.sample_size, seed=p.data_seed, formats=("tfrecord",))
        log = mlperf.MLPerfLog(
            Path(ctx.run_dir) / "mlperf.log", 0, "cosmoflow", division=p.division, platform=mlperf.mlperf_platform(ctx)
        )
        log.start("init_start")
        log.event("cache_clear", True)
        mlperf.log_common(log, ctx, p.batch_size, p.seed)
        train_files = [str(f) for f in cosmo.list_files(root / "train")]
        val_files = [str(f) for f in cosmo.list_files(root / "validation")]
        log.event("train_samples", len(train_files))
        log.event("eval_samples", len(val_files))
        model = build_model(p.sample_size, **network_settings(p), l2=p.weight_decay)
        opt = tf.keras.optimizers.SGD(learning_rate=p.base_lr, momentum=p.momentum)
        model.compile(optimizer=opt, loss="mse", metrics=["mae"])
        peak = log_optimizer(log, p, p.batch_size, decay)
        result, losses = keras_train_to_target(log, p, model, opt, train_files, val_files, decay)
        return mlperf.train_outcome(
            result,
            losses,
            log,
            0,
            "eval_error",
            "MAE",
            p.target_mae,
            False,
            {
                "parameters": int(model.count_params()),
                "global_batch": p.batch_size,
                "peak_lr": peak,
                "data_dir": str(root),
                "ranks": 1,
                "tensorflow": tf.__version__,
            },
        )
