"""Image data for the classification workloads: small learnable synthetic sets, written
in the real on-disk formats (an ImageNet-style folder of JPEG files, CIFAR-10's binary
records), and their readers with decoding and augmentation on CPU DataLoader workers.

A learnable image is its class's fixed random low-frequency pattern plus noise, so a
small network reaches a stated accuracy in a few epochs (the time-to-accuracy mode).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from exabench.io import atomic_write_text

CIFAR_RECORD = 1 + 3 * 32 * 32  # label byte, then the R, G and B planes of a 32x32 image
# The official binary release (cifar-10-binary.tar.gz) unpacks to cifar-10-batches-bin/: five
# training batches and one test batch of 10,000 records each, and the label names.
CIFAR_FOLDER = "cifar-10-batches-bin"
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
CIFAR_TEST_BATCH = "test_batch.bin"
CIFAR_LABEL_NAMES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
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
    return _write_cifar_records(Path(path), images, labels)


def _write_cifar_records(path: Path, images, labels) -> Path:
    records = np.empty((len(labels), CIFAR_RECORD), dtype=np.uint8)
    records[:, 0] = labels
    records[:, 1:] = images.reshape(len(labels), -1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(records.tobytes())
    tmp.replace(path)
    return path


def write_cifar10_folder(root: str | Path, n_train: int, n_test: int, seed: int, num_classes: int = 10) -> Path:
    """Write a learnable set in the official cifar-10-batches-bin/ layout: the `n_train` training
    images spread over data_batch_1..5.bin, `n_test` others in test_batch.bin."""
    root = Path(root)
    images, labels = learnable_images(n_train, num_classes, 32, seed, split=0)
    for name, part in zip(CIFAR_TRAIN_BATCHES, np.array_split(np.arange(n_train), len(CIFAR_TRAIN_BATCHES))):
        _write_cifar_records(root / name, images[part], labels[part])
    _write_cifar_records(root / CIFAR_TEST_BATCH, *learnable_images(n_test, num_classes, 32, seed, split=1))
    if num_classes == len(CIFAR_LABEL_NAMES):
        atomic_write_text(root / "batches.meta.txt", "\n".join(CIFAR_LABEL_NAMES) + "\n")
    return root


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


def cifar10_batch_files(path: str | Path, train: bool) -> list[Path]:
    """The batch files of one split of an official CIFAR-10 binary folder: data_batch_*.bin train,
    test_batch.bin validates. `path` is cifar-10-batches-bin/ itself or the folder it was unpacked in."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such folder; a CIFAR-10 data_dir is the official {CIFAR_FOLDER}/ "
                                f"(data_batch_1.bin .. data_batch_5.bin, {CIFAR_TEST_BATCH})")
    if not any(path.glob("*.bin")) and (path / CIFAR_FOLDER).is_dir():
        path = path / CIFAR_FOLDER
    if train:
        files = sorted(path.glob("data_batch_*.bin"), key=lambda f: (len(f.name), f.name))
        want = "data_batch_1.bin .. data_batch_5.bin (training batches)"
    else:
        files = [path / CIFAR_TEST_BATCH] if (path / CIFAR_TEST_BATCH).is_file() else []
        want = f"{CIFAR_TEST_BATCH} (the validation batch)"
    if not files:
        found = ", ".join(sorted(f.name for f in path.iterdir())[:8]) or "nothing"
        raise FileNotFoundError(f"{path}: no {want}; a CIFAR-10 data_dir is the official {CIFAR_FOLDER}/ layout "
                                f"(found: {found})")
    return files


def open_dataset(kind: str, path: str | Path, size: int, train: bool):
    """The reader for `kind` (imagefolder | cifar10-binary) at `path`, with its transforms. A
    CIFAR-10 `path` is the whole binary folder: the split picks its files."""
    path = Path(path)
    tf = train_transform(kind, size) if train else eval_transform(kind, size)
    if kind == "cifar10-binary":
        return CIFAR10Binary(cifar10_batch_files(path, train), tf)
    if kind == "imagefolder":
        from torchvision.datasets import ImageFolder
        return ImageFolder(str(path), transform=tf)
    raise ValueError(f"data kind {kind!r}: valid are imagefolder, cifar10-binary")


def write_dataset(kind: str, root: str | Path, n_train: int, n_val: int, num_classes: int, size: int,
                  seed: int) -> tuple[Path, Path]:
    """Write a train and a validation split of `kind` under root; returns their paths (for
    CIFAR-10 both are the one binary folder, as in the official release)."""
    root = Path(root)
    if kind == "cifar10-binary":
        folder = write_cifar10_folder(root, n_train, n_val, seed, num_classes)
        return folder, folder
    return (write_imagenet_folder(root / "train", n_train, num_classes, size, seed),
            write_imagenet_folder(root / "val", n_val, num_classes, size, seed, split=1))
