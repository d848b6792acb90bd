"""Run under mpirun or horovodrun by tests/integration/test_horovod_tensorflow.py: Horovod's TensorFlow
operations on every rank, written as OUTDIR/rank<N>.json for the test to compare.

    mpirun -np 2 python tests/horovod_tf_job.py OUTDIR
    horovodrun --gloo -np 2 -H localhost:2 python tests/horovod_tf_job.py OUTDIR

Each rank: a sum and an average allreduce of tf tensors; a tiny Keras 3 model built from a
rank-dependent seed, made equal by hvd.broadcast_variables; one SGD step through
hvd.DistributedGradientTape on the rank's shard; and the same step computed locally on the
whole batch from the broadcast weights (the reference the averaged gradient must equal).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

LR = 0.1
BATCH = 8  # global batch, split evenly over the ranks


def flat(arrays) -> list[float]:
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays]).tolist()


def main(outdir: Path) -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    out = {"rank": rank, "size": size, "mpi_enabled": bool(hvd.mpi_enabled()),
           "gloo_enabled": bool(hvd.gloo_enabled())}

    out["sum"] = hvd.allreduce(tf.constant([rank + 1.0, 10.0 * (rank + 1)]), op=hvd.Sum).numpy().tolist()
    out["average"] = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Average).numpy().tolist()

    keras.utils.set_random_seed(1000 + rank)  # different initial weights per rank
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    out["before_broadcast"] = flat(model.get_weights())
    # Keras 3 variables are neither tf.Variables nor have .ref(), which Horovod needs (a
    # tf.function turns them into read-only tensors; its tape keys gradients by .ref()): hand
    # Horovod the tf.Variable each one wraps (v.value), and the optimizer the Keras variables.
    hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
    w0 = model.get_weights()
    out["after_broadcast"] = flat(w0)

    rng = np.random.default_rng(0)  # same global batch on every rank
    x = rng.normal(size=(BATCH, 4)).astype(np.float32)
    y = rng.normal(size=(BATCH, 1)).astype(np.float32)
    shard = slice(rank * BATCH // size, (rank + 1) * BATCH // size)

    tf_vars = [v.value for v in model.trainable_variables]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x[shard]) - y[shard]))
    grads = hvd.DistributedGradientTape(tape).gradient(loss, tf_vars)
    keras.optimizers.SGD(LR).apply_gradients(zip(grads, model.trainable_variables))
    out["after_step"] = flat(model.get_weights())

    model.set_weights(w0)  # reference: one step on the whole batch in this process
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    full = tape.gradient(loss, tf_vars)
    out["reference_step"] = flat([w - LR * g.numpy() for w, g in zip(w0, full)])
    (outdir / f"rank{rank}.json").write_text(json.dumps(out))
    hvd.shutdown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
