"""Datasets read through torchvision and PIL: ``fashion_mnist``, ``cifar10``, ``imagefolder``.

Imported by ``batchscope.bench.data.open_split`` only when one of these is opened (and by
``batchscope.bench.fetch``, which prepares them): importing torchvision costs about a second,
which a benchmark on synthetic data does not pay. The classes live at module level so that
DataLoader workers started by ``spawn`` can unpickle them.

- ``fashion_mnist``: ``torchvision.datasets.FashionMNIST`` over the decompressed files
  ``prepare`` verified, normalised with the training set's mean and spread.
- ``cifar10``: torchvision's CIFAR10 over the extracted archive, normalised likewise.
- ``imagefolder``: the images ``<root>/index.json`` lists (the readable ones), decoded on access
  by PIL or torchvision.io (the ``decoder``), then resized, cropped and normalised as the config
  says (``transforms.v2``: PIL images by PIL, torchvision's tensors by torch); its held-out split
  is the ``val/`` folder's images, else a fixed share of each class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.datasets import CIFAR10, FashionMNIST
from torchvision.datasets.folder import pil_loader

from batchscope.bench.data import INDEX_NAME, DatasetError, Split, one_line, read_index
from batchscope.core import datasets

FASHION_MEAN, FASHION_STD = (0.2860,), (0.3530,)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)

#: Exceptions a broken image file raises while PIL decodes it.
DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)


def open_split(
    name: str,
    root: Path,
    split: str,
    channels: int | None,
    image_size: int | None,
    val_fraction: float = 0.0,
    pipeline: Mapping | None = None,
) -> Split:
    """``batchscope.bench.data.open_split`` for the datasets torchvision reads (name checked)."""
    if name == "fashion_mnist":
        return _open_fashion_mnist(root, split, channels, image_size)
    if name == "cifar10":
        return _open_cifar10(root, split, channels, image_size)
    return _open_imagefolder(root, split, channels, image_size, val_fraction, pipeline)


def fashion_raw_folder(root: Path) -> Path:
    """Where ``torchvision.datasets.FashionMNIST(root)`` looks for the decompressed files."""
    return root / FashionMNIST.__name__ / "raw"


class ExpandChannels:
    """Repeat a 1-channel image tensor to ``channels`` channels (a class: workers can pickle it)."""

    def __init__(self, channels: int) -> None:
        self.channels = channels

    def __call__(self, image: torch.Tensor) -> torch.Tensor:
        return image.repeat(self.channels, 1, 1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(channels={self.channels})"


def _image_transform(
    name: str,
    native_channels: int,
    channels: int | None,
    image_size: int | None,
    normalize: tuple[tuple[float, ...], tuple[float, ...]] | None,
) -> transforms.Compose:
    """PIL image -> (resize) -> tensor -> (normalize) -> (1 -> 3 channels)."""
    steps: list[Callable] = []
    if image_size is not None:
        steps.append(transforms.Resize((image_size, image_size)))
    steps.append(transforms.ToTensor())
    if normalize is not None:
        steps.append(transforms.Normalize(*normalize))
    if channels is not None and channels != native_channels:
        if (native_channels, channels) != (1, 3):
            raise DatasetError(
                f"{name}: cannot turn {native_channels}-channel images into {channels} channels"
            )
        steps.append(ExpandChannels(channels))
    return transforms.Compose(steps)


def _open_fashion_mnist(
    root: Path, split: str, channels: int | None, image_size: int | None
) -> Split:
    native = datasets.native_channels("fashion_mnist")
    transform = _image_transform(
        "fashion_mnist", native, channels, image_size, (FASHION_MEAN, FASHION_STD)
    )
    try:
        dataset = FashionMNIST(root, train=split == "train", transform=transform, download=False)
    except RuntimeError as exc:
        raise DatasetError(
            f"fashion_mnist: no prepared copy in {fashion_raw_folder(root)}: {one_line(exc)}"
        ) from exc
    size = image_size or datasets.SHAPES["fashion_mnist"]["image_size"]
    return Split(dataset, len(FashionMNIST.classes), channels or native, size, skipped=0)


class PreparedCIFAR10(CIFAR10):
    """torchvision's CIFAR10 checking only that each batch exists, not its md5.

    ``prepare`` verified the whole archive's md5 before extracting it, so the per-batch md5s
    (which a test archive of the same format cannot match) add nothing.
    """

    train_list = [[name, None] for name, _ in CIFAR10.train_list]
    test_list = [[name, None] for name, _ in CIFAR10.test_list]
    meta = {**CIFAR10.meta, "md5": None}


def _open_cifar10(root: Path, split: str, channels: int | None, image_size: int | None) -> Split:
    native = datasets.native_channels("cifar10")
    transform = _image_transform("cifar10", native, channels, image_size, (CIFAR_MEAN, CIFAR_STD))
    try:
        dataset = PreparedCIFAR10(root, train=split == "train", transform=transform)
    except (RuntimeError, OSError, ValueError) as exc:
        raise DatasetError(
            f"cifar10: no prepared copy in {root / CIFAR10.base_folder}: {one_line(exc)}"
        ) from exc
    size = image_size or datasets.SHAPES["cifar10"]["image_size"]
    return Split(dataset, len(dataset.classes), channels or native, size, skipped=0)


#: The first bytes of every JPEG file (what ``decoder: torchvision`` hands to decode_jpeg).
JPEG_MAGIC = b"\xff\xd8\xff"


def decode(file: str, decoder: str = "pil"):
    """The RGB image in ``file``: a PIL image (``pil``), or a uint8 C x H x W tensor decoded
    from the file's bytes (``torchvision``: decode_jpeg for JPEGs, decode_image otherwise)."""
    if decoder == "pil":
        return pil_loader(file)
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg, read_file

    data = read_file(file)
    if bytes(data[:3].tolist()) == JPEG_MAGIC:
        return decode_jpeg(data, mode=ImageReadMode.RGB)
    return decode_image(data, mode=ImageReadMode.RGB)


class IndexedImages(Dataset):
    """Images listed in an imagefolder index, decoded on access (by ``decoder``: pil or
    torchvision); a file that fails raises."""

    def __init__(
        self, samples: Sequence[tuple[str, int]], transform: Callable, decoder: str = "pil"
    ) -> None:
        self.samples = [(str(file), int(label)) for file, label in samples]
        self.transform = transform
        self.decoder = decoder

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        file, label = self.samples[index]
        try:
            image = decode(file, self.decoder)
        except (*DECODE_ERRORS, RuntimeError) as exc:
            raise DatasetError(f"imagefolder: cannot decode {file}: {one_line(exc)}") from exc
        return self.transform(image), label


def pipeline_transform(
    image_size: int, pipeline: Mapping | None = None, channels: int | None = None
) -> Callable:
    """A decoded image (PIL, or a uint8 tensor) -> resize -> centre crop -> float tensor in
    [0, 1] -> normalize, with ``transforms.v2`` (which resizes a PIL image with PIL and a tensor
    with torch, antialiased). Without ``resize`` or ``crop``, a square of ``image_size``."""
    from torchvision.transforms import v2

    pipeline = pipeline or {}
    resize, crop = pipeline.get("resize"), pipeline.get("crop")
    native = datasets.native_channels("imagefolder")
    if channels is not None and channels != native:
        raise DatasetError(f"imagefolder: cannot turn {native}-channel images into {channels}")
    if resize is None and crop is None:
        resize = [image_size, image_size]
    steps: list[Callable] = []
    if resize is not None:
        steps.append(v2.Resize(resize if isinstance(resize, int) else list(resize)))
    if crop is not None:
        steps.append(v2.CenterCrop(crop))
    steps += [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
    normalize = datasets.normalize_values(pipeline.get("normalize"))
    if normalize:
        steps.append(v2.Normalize(mean=list(normalize["mean"]), std=list(normalize["std"])))
    steps.append(v2.ToPureTensor())
    return v2.Compose(steps)


def _open_imagefolder(
    root: Path,
    split: str,
    channels: int | None,
    image_size: int | None,
    val_fraction: float,
    pipeline: Mapping | None = None,
) -> Split:
    index_path = root / INDEX_NAME
    if not index_path.is_file():
        raise DatasetError(f"imagefolder: no index at {index_path}; run prepare first")
    index = read_index(index_path)
    samples = index["samples"]
    if "val_samples" in index:  # the folder's own val/ split
        train, test = samples, index["val_samples"]
    else:
        try:
            chosen = datasets.held_out(samples, val_fraction)
        except ValueError as exc:
            raise DatasetError(f"imagefolder: {exc}") from exc
        train = [s for s, out in zip(samples, chosen, strict=True) if not out]
        test = [s for s, out in zip(samples, chosen, strict=True) if out]
    picked = {"train": train, "test": test, "all": [*train, *test]}[split]
    if not picked:
        raise DatasetError(
            f"imagefolder: no {split} images in {index_path} (val_fraction {val_fraction}: "
            "raise it, or add a val/ folder)"
        )
    pipeline = pipeline or {}
    piped = datasets.pipeline_image_size(pipeline.get("resize"), pipeline.get("crop"))
    size = piped or image_size or datasets.IMAGEFOLDER_DEFAULT_SIZE
    native = datasets.native_channels("imagefolder")  # read as RGB
    transform = pipeline_transform(size, pipeline, channels)
    dataset = IndexedImages(picked, transform, pipeline.get("decoder") or "pil")
    return Split(dataset, len(index["classes"]), native, size, skipped=len(index["skipped"]))
