"""Image data for the classification workloads: small learnable synthetic sets, written
in the real on-disk formats (an ImageNet-style folder of JPEG files, CIFAR-10's binary
records), and their readers with decoding and augmentation on CPU DataLoader workers.

A learnable image is its class's fixed random low-frequency pattern plus noise, so a
small network reaches a stated accuracy in a few epochs (the time-to-accuracy mode).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then the R, G and B planes of a 32x32 image
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def learnable_images(n: int, num_classes: int, size: int, seed: int, split: int = 0, noise: float = 48.0):
    """(images uint8 [n, 3, size, size], labels int64 [n]): class pattern + Gaussian noise.

    The patterns depend on `seed` only; the samples on (seed, split), so splits differ."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(0, 255, size=(num_classes, 3, 4, 4))  # one pattern per class, same for every split
    reps = -(-size // 4)
    patterns = np.kron(coarse, np.ones((1, 1, reps, reps)))[:, :, :size, :size]
    rng = np.random.default_rng([seed, split + 1])
    labels = rng.integers(0, num_classes, size=n)
    images = patterns[labels] + rng.normal(0, noise, size=(n, 3, size, size))
    return np.clip(images, 0, 255).astype(np.uint8), labels.astype(np.int64)


# -- writers -----------------------------------------------------------------
def write_cifar10_binary(path: str | Path, n: int, seed: int, num_classes: int = 10, split: int = 0) -> Path:
    """Write `n` learnable 32x32 images as one CIFAR-10 binary batch file (data_batch_1.bin layout)."""
    images, labels = learnable_images(n, num_classes, 32, seed, split)
    records = np.empty((n, CIFAR_RECORD), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = images.reshape(n, -1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(records.tobytes())
    tmp.replace(path)
    return path


def write_imagenet_folder(root: str | Path, n: int, num_classes: int, size: int, seed: int, split: int = 0) -> Path:
    """Write `n` learnable JPEG images as root/<synset>/<synset>_<i>.JPEG (the ImageNet train layout)."""
    from PIL import Image

    images, labels = learnable_images(n, num_classes, size, seed, split)
    root = Path(root)
    for c in range(num_classes):
        (root / f"n{c:08d}").mkdir(parents=True, exist_ok=True)
    for i, (img, label) in enumerate(zip(images, labels)):
        synset = f"n{label:08d}"
        Image.fromarray(img.transpose(1, 2, 0)).save(root / synset / f"{synset}_{i}.JPEG", quality=90)
    return root


# -- readers -----------------------------------------------------------------
class CIFAR10Binary:
    """A map-style data set over CIFAR-10 binary batch files; decoding and augmentation per item."""

    def __init__(self, files: list[str | Path], transform=None):
        chunks = []
        for f in files:
            raw = np.fromfile(f, dtype=np.uint8)
            if raw.size % CIFAR_RECORD:
                raise ValueError(f"{f}: {raw.size} bytes is not a whole number of {CIFAR_RECORD}-byte CIFAR-10 "
                                 "records")
            chunks.append(raw.reshape(-1, CIFAR_RECORD))
        self.records = np.concatenate(chunks)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        from PIL import Image
        rec = self.records[i]
        img = Image.fromarray(rec[1:].reshape(3, 32, 32).transpose(1, 2, 0))
        return (self.transform(img) if self.transform else img), int(rec[0])


def train_transform(kind: str, size: int):
    """Standard augmentation: CIFAR pad-4 random crop + flip; ImageNet random-resized crop + flip."""
    from torchvision import transforms as T
    if kind == "cifar10-binary":
        resize = [T.Resize(size)] if size != 32 else []
        return T.Compose([T.RandomCrop(32, padding=4), *resize, T.RandomHorizontalFlip(), T.ToTensor(),
                          T.Normalize(CIFAR_MEAN, CIFAR_STD)])
    return T.Compose([T.RandomResizedCrop(size, scale=(0.35, 1.0)), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def eval_transform(kind: str, size: int):
    from torchvision import transforms as T
    if kind == "cifar10-binary":
        return T.Compose([T.Resize(size), T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])
    return T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def open_dataset(kind: str, path: str | Path, size: int, train: bool):
    """The reader for `kind` (imagefolder | cifar10-binary) at `path`, with its transforms."""
    path = Path(path)
    tf = train_transform(kind, size) if train else eval_transform(kind, size)
    if kind == "cifar10-binary":
        files = sorted(path.glob("*.bin")) if path.is_dir() else [path]
        if not files:
            raise FileNotFoundError(f"{path}: no CIFAR-10 *.bin batch files")
        return CIFAR10Binary(files, tf)
    if kind == "imagefolder":
        from torchvision.datasets import ImageFolder
        return ImageFolder(str(path), transform=tf)
    raise ValueError(f"data kind {kind!r}: valid are imagefolder, cifar10-binary")


def write_dataset(kind: str, root: str | Path, n_train: int, n_val: int, num_classes: int, size: int,
                  seed: int) -> tuple[Path, Path]:
    """Write a train and a validation split of `kind` under root; returns their paths."""
    root = Path(root)
    if kind == "cifar10-binary":
        return (write_cifar10_binary(root / "data_batch_1.bin", n_train, seed, num_classes),
                write_cifar10_binary(root / "val" / "test_batch.bin", n_val, seed, num_classes, split=1))
    return (write_imagenet_folder(root / "train", n_train, num_classes, size, seed),
            write_imagenet_folder(root / "val", n_val, num_classes, size, seed, split=1))
