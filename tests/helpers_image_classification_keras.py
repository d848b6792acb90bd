"""TensorFlow checks for tests/integration/test_image_classification_keras.py, run in child processes
(never import TensorFlow in the pytest process): each prints one JSON object.

    python helpers_image_classification_keras.py counts
    python helpers_image_classification_keras.py larc '{"clip": true, ...}'
    python helpers_image_classification_keras.py shards <data kind> <path> <ranks>
    mpirun -np 2 python helpers_image_classification_keras.py mwms_step <out.json>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace


def counts() -> dict:
    import tensorflow as tf

    from exabench.models.resnet_keras import build_model, parameter_count, training_flops
    resnet = build_model("resnet50", 1000, 224)
    application = tf.keras.applications.ResNet50(weights=None)
    convnet = build_model("convnet_cifar10", 10, 32)
    return {"resnet50": parameter_count(resnet), "resnet50_with_bn_statistics": resnet.count_params(),
            "application": parameter_count(application), "application_total": application.count_params(),
            "application_conv_biases": sum(int(layer.bias.shape[0]) for layer in application.layers
                                           if isinstance(layer, tf.keras.layers.Conv2D)),
            "convnet_cifar10": parameter_count(convnet),
            "flops_resnet50_64": training_flops(build_model("resnet50", 1000, 64)),
            "flops_convnet_cifar10_32": training_flops(convnet)}


def larc(args: dict) -> dict:
    """`steps` updates of exabench.training.keras_loop.SGD on w with the given gradients."""
    import tensorflow as tf

    from exabench.training.keras_loop import SGD
    w = tf.Variable(args["w"], dtype=tf.float32)
    opt = SGD(args["lr"], momentum=args["momentum"], weight_decay=args["wd"], larc=args["larc"],
              trust_coefficient=args["trust"], clip=args["clip"], eps=0.0)
    for g in args["grads"]:
        opt.apply([tf.constant(g, dtype=tf.float32)], [w])
    return {"w": w.numpy().tolist()}


def shards(kind: str, path: str, ranks: int) -> dict:
    """Every rank's training and validation batches of a data set (labels, shapes, pixel sums)."""
    from exabench.data.images_tf import dataset
    p = SimpleNamespace(dataset_size=24, num_classes=3, image_size=32, seed=5, workers=2)
    out = {}
    for rank in range(ranks):
        train, steps = dataset(kind, path, True, p, rank, ranks, 4)
        # CIFAR-10: one folder, the split picks its files
        val, _ = dataset(kind, path.replace("train", "val") if kind == "imagefolder" else path, False, p,
                         rank, ranks, 4)
        batches = [(x.shape.as_list(), y.numpy().tolist()) for x, y in train]
        val_labels = [label for _, y in val for label in y.numpy().tolist()]
        out[rank] = {"steps": steps, "train": batches, "val_images": len(val_labels), "val_labels": val_labels}
    return out


def mwms_step(out_path: str) -> None:
    """One SGD step of ConvNet-CIFAR10 on 2 ranks x 4 images over MultiWorkerMirroredStrategy,
    against one process's step on all 8 (no BatchNorm: the averaged gradient is exact)."""
    import numpy as np
    import tensorflow as tf

    from exabench.training.distributed import Collectives, detect_world
    from exabench.models.resnet_keras import convnet_cifar10
    from exabench.training.keras_loop import SGD, MirroredWorkers, _loss

    world = detect_world()
    collectives = Collectives(world)
    dp = MirroredWorkers("ring", world, collectives, Path(out_path).parent, False, 0.0)
    tf.keras.utils.set_random_seed(0)
    with dp.scope():
        model = convnet_cifar10()
        opt = SGD(0.5, momentum=0.0)
        opt.build(model.trainable_variables)
    initial = [w.numpy() for w in model.trainable_variables]
    rng = np.random.default_rng(1)
    images = rng.normal(size=(4 * world.size, 32, 32, 3)).astype(np.float32)
    labels = rng.integers(0, 10, size=4 * world.size)
    mine = slice(4 * world.rank, 4 * (world.rank + 1))
    step = dp.train_step(model, opt, False, 4 * world.size)
    _, grad_sum = step(tf.constant(images[mine]), tf.constant(labels[mine]))
    after = [w.numpy() for w in model.trainable_variables]
    gathered = collectives.allgather(after)
    grad_sums = collectives.allgather(float(grad_sum))
    if world.rank != 0:
        return
    single = convnet_cifar10()
    for w, v in zip(single.trainable_variables, initial):
        w.assign(v)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(_loss(single, tf.constant(images), tf.constant(labels)))
    grads = tape.gradient(loss, single.trainable_variables)
    reference = [v - 0.5 * g.numpy() for v, g in zip(initial, grads)]
    diff = lambda xs, ys: max(float(np.abs(x - y).max()) for x, y in zip(xs, ys))  # noqa: E731
    Path(out_path).write_text(json.dumps({
        "size": world.size, "moved": diff(after, initial), "diff_ranks": diff(gathered[0], gathered[1]),
        "diff_single": diff(after, reference), "grad_sums": grad_sums,
        "grad_sum_single": float(sum(float(tf.reduce_sum(g)) for g in grads))}))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "counts":
        print(json.dumps(counts()))
    elif what == "larc":
        print(json.dumps(larc(json.loads(sys.argv[2]))))
    elif what == "shards":
        print(json.dumps(shards(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif what == "mwms_step":
        mwms_step(sys.argv[2])
    else:
        sys.exit(f"unknown check {what!r}: valid are counts, larc, shards, mwms_step")
