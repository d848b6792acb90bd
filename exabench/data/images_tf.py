"""tf.data readers of the image formats that exabench.data.images writes (and the real
data sets use): ImageNet-style JPEG folders, CIFAR-10 binary records
(FixedLengthRecordDataset), and the in-memory learnable set, with the same decoding,
augmentation and normalisation as the PyTorch readers, in NHWC.

Each rank reads its own shard: the records are split round-robin over ranks and cut to
the same count on every rank, so all ranks run the same number of steps (a rank with
one more step would wait forever in a collective). Training shuffles within the shard,
differently every epoch, deterministically from the seed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from exabench.data.images import (CIFAR_MEAN, CIFAR_RECORD, CIFAR_STD, IMAGENET_MEAN, IMAGENET_STD,
                                  cifar10_batch_files, learnable_images)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")  # torchvision's


def _normalise(image, mean, std):
    return (tf.cast(image, tf.float32) / 255.0 - mean) / std


# -- decoding and augmentation -----------------------------------------------
def _cifar_record(train: bool, size: int):
    def parse(record):
        raw = tf.io.decode_raw(record, tf.uint8)
        label = tf.cast(raw[0], tf.int64)
        image = tf.transpose(tf.reshape(raw[1:], [3, 32, 32]), [1, 2, 0])
        if train:  # pad 4 + random 32x32 crop, flip (the standard CIFAR augmentation)
            image = tf.image.random_crop(tf.pad(image, [[4, 4], [4, 4], [0, 0]]), [32, 32, 3])
            image = tf.image.random_flip_left_right(image)
        if size != 32:
            image = tf.image.resize(image, [size, size])
        return _normalise(image, CIFAR_MEAN, CIFAR_STD), label
    return parse


def _jpeg_file(train: bool, size: int):
    def parse(path, label):
        data = tf.io.read_file(path)
        if train:  # random-resized crop (area 0.35-1, aspect 3/4-4/3), flip
            box = tf.image.sample_distorted_bounding_box(
                tf.image.extract_jpeg_shape(data), tf.zeros([0, 0, 4]), min_object_covered=0.0,
                aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.35, 1.0), use_image_if_no_bounding_boxes=True)
            begin, crop, _ = box
            window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
            image = tf.image.decode_and_crop_jpeg(data, window, channels=3)
            image = tf.image.random_flip_left_right(tf.image.resize(image, [size, size]))
        else:  # shorter side to `size`, centre crop
            image = tf.image.decode_jpeg(data, channels=3)
            shape = tf.cast(tf.shape(image)[:2], tf.float32)
            scale = size / tf.reduce_min(shape)
            image = tf.image.resize(image, tf.cast(tf.math.ceil(shape * scale), tf.int32))
            image = tf.image.resize_with_crop_or_pad(image, size, size)
        return _normalise(image, IMAGENET_MEAN, IMAGENET_STD), label
    return parse


# -- sources -----------------------------------------------------------------
def cifar10_files(path: str | Path, train: bool) -> tuple[list[str], int]:
    """(files, records) of one split of an official CIFAR-10 binary folder (see cifar10_batch_files)."""
    files, n = cifar10_batch_files(path, train), 0
    for f in files:
        size = f.stat().st_size
        if size % CIFAR_RECORD:
            raise ValueError(f"{f}: {size} bytes is not a whole number of {CIFAR_RECORD}-byte CIFAR-10 records")
        n += size // CIFAR_RECORD
    return [str(f) for f in files], n


def image_folder(path: str | Path) -> tuple[list[str], list[int]]:
    """(files, labels) as torchvision's ImageFolder lists them: classes and files sorted."""
    root = Path(path)
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise FileNotFoundError(f"{root}: no class directories (ImageNet layout root/<class>/<image>)")
    files, labels = [], []
    for index, cls in enumerate(classes):
        for f in sorted((root / cls).rglob("*")):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                files.append(str(f))
                labels.append(index)
    return files, labels


def dataset(kind: str, path, train: bool, p, rank: int, ranks: int, local_batch: int, split: int = 0):
    """The batched tf.data pipeline of this rank's shard; returns (dataset, steps per epoch)."""
    if kind == "learnable":
        n = p.dataset_size if train else max(p.dataset_size // 4, ranks)
        x, y = learnable_images(n, p.num_classes, p.image_size, p.seed, split)
        x = ((x.transpose(0, 2, 3, 1).astype(np.float32) / 255.0 - 0.5) / 0.25)
        source, parse = tf.data.Dataset.from_tensor_slices((x, y)), None
    elif kind == "cifar10-binary":
        files, n = cifar10_files(path, train)
        source, parse = tf.data.FixedLengthRecordDataset(files, CIFAR_RECORD), _cifar_record(train, p.image_size)
    elif kind == "imagefolder":
        files, labels = image_folder(path)
        n = len(files)
        source = tf.data.Dataset.from_tensor_slices((files, np.asarray(labels, dtype=np.int64)))
        parse = _jpeg_file(train, p.image_size)
    else:
        raise ValueError(f"data kind {kind!r}: valid are learnable, imagefolder, cifar10-binary")
    per_rank = n // ranks if train else -(-n // ranks)
    ds = source.shard(ranks, rank).take(per_rank)
    if train:
        ds = ds.shuffle(per_rank, seed=p.seed + rank, reshuffle_each_iteration=True)
    if parse is not None:
        ds = ds.map(parse, num_parallel_calls=p.workers or None, deterministic=True)
    ds = ds.batch(local_batch, drop_remainder=train)
    if kind != "learnable" and p.workers:
        ds = ds.prefetch(p.workers)  # what DataLoader workers do: decode ahead of the step
    steps = per_rank // local_batch if train else -(-per_rank // local_batch)
    return ds, steps
