"""The dataset catalogue: what the workflow knows of each dataset before any job runs.

No torch: the Snakefile reads it to build the compute-only ceiling's synthetic twin, to cap
the largest-batch search and to check a sweep against its data's size (an image folder's images
are listed, not decoded), and the benchmark process (``batchscope.bench.data``) opens the data
with the same listing and the same held-out split.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

#: ``python``: the user's own ``Dataset``s, from a factory function (``dataset.factory``).
PYTHON = "python"

NAMES = ("fashion_mnist", "cifar10", "imagefolder", "synthetic", PYTHON, "tokens", "text")
#: The datasets whose samples are token ids (a model that reads them; the ``sequence_lengths``
#: axis): ``tokens`` (deterministic random ids) and ``text`` (a local text file, tokenized).
TOKEN_NAMES = ("tokens", "text")

#: The vocabulary of a text file read as bytes (no tokenizer).
BYTE_VOCAB = 256


def is_tokens(name: str) -> bool:
    """Whether dataset ``name`` yields token ids rather than images."""
    return name in TOKEN_NAMES


def text_sequences(num_tokens: int, sequence_length: int) -> int:
    """Samples a text of ``num_tokens`` tokens gives: whole sequences, the remainder dropped."""
    return num_tokens // sequence_length


def text_held_out(num_sequences: int, val_fraction: float) -> list[bool]:
    """Which of a text's sequences are held out: the ``val_fraction`` of them (rounded, never
    all), spread evenly through the text so that both splits sample all of it; deterministic."""
    count = held_out_count(num_sequences, val_fraction)
    if count == 0:
        return [False] * num_sequences
    step = num_sequences / count
    chosen = {min(int(k * step + step / 2), num_sequences - 1) for k in range(count)}
    return [i in chosen for i in range(num_sequences)]


#: Side of the images ``imagefolder`` yields when no ``image_size`` is given.
IMAGEFOLDER_DEFAULT_SIZE = 64

#: Side of the images ``synthetic`` makes when no ``image_size`` is given.
SYNTHETIC_DEFAULT_SIZE = 32

#: Shape of each dataset's images and its classes (imagefolder: its default size and a guess at
#: the classes, for the synthetic twin of the compute-only ceiling).
SHAPES = {
    "fashion_mnist": {"channels": 1, "image_size": 28, "num_classes": 10},
    "cifar10": {"channels": 3, "image_size": 32, "num_classes": 10},
    "imagefolder": {"channels": 3, "image_size": IMAGEFOLDER_DEFAULT_SIZE, "num_classes": 10},
}

#: Samples a ceiling run's synthetic twin has where the split's size is not known beforehand.
UNKNOWN_SPLIT_SAMPLES = 10000

#: Samples in the split each mode reads, where known before any job runs.
SPLIT_SAMPLES = {
    "fashion_mnist": {"train": 60000, "infer": 10000},
    "cifar10": {"train": 50000, "infer": 10000},
}


def native_channels(name: str, synthetic_channels: int | None = None) -> int:
    """Channels a dataset's images have before any expansion (imagefolder is read as RGB)."""
    if name == "synthetic":
        if synthetic_channels is None:
            raise ValueError("synthetic: the channels of its images are needed")
        return int(synthetic_channels)
    return SHAPES[name]["channels"]


# ------------------------------------------------------------------------- image folders


#: File endings an image folder's images have (torchvision's ImageFolder reads the same).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

#: An image folder holding these two subfolders (each of class subfolders) has its own split;
#: a ``val`` folder beside the class folders holds the held-out images, the rest train.
TRAIN_FOLDER, VAL_FOLDER = "train", "val"

#: Seed of the held-out images' choice: part of the data, not of a run (no run seed moves it).
HELD_OUT_SEED = "batchscope-held-out-v1"


class ImageFolderError(ValueError):
    """An image folder that cannot be read as class subfolders; the message is one line."""


@dataclass(frozen=True)
class ImageFolderCounts:
    """How many images an image folder has, per class: what the config check needs of it
    (``batchscope.core.folder_index`` keeps them beside the listing, so a check need not list).

    ``train`` is the images of each class, in label order; ``val`` those of the ``val/``
    subfolder, or None when there is none.
    """

    classes: tuple[str, ...]
    train: tuple[int, ...]
    val: int | None


@dataclass(frozen=True)
class ImageFolderListing:
    """The image files of a folder of class subfolders, before any is decoded.

    ``train`` and ``val`` are (path, label) pairs; ``val`` is None unless the folder has a
    ``val/`` subfolder, whose images are then the held-out split.
    """

    classes: tuple[str, ...]
    train: tuple[tuple[str, int], ...]
    val: tuple[tuple[str, int], ...] | None

    @property
    def counts(self) -> ImageFolderCounts:
        per_class = [0] * len(self.classes)
        for _, label in self.train:
            per_class[label] += 1
        val = None if self.val is None else len(self.val)
        return ImageFolderCounts(self.classes, tuple(per_class), val)


#: A folder's state as its listing saw it: (path, ``os.stat_result``) of every folder read,
#: taken before it was read (``batchscope.core.folder_index`` compares them later).
FolderStats = list[tuple[str, os.stat_result]]


def _read_folder(folder: str, seen: FolderStats | None) -> list[os.DirEntry]:
    """The entries of ``folder``, its stat noted in ``seen`` first (so that a change made while
    it is read moves its mtime past the one noted)."""
    if seen is not None:
        seen.append((folder, os.stat(folder)))
    with os.scandir(folder) as entries:
        return list(entries)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()  # a link to a folder is followed, as os.walk(followlinks=True)
    except OSError:
        return False


def _class_folders(folder: str, seen: FolderStats | None) -> list[str]:
    entries = _read_folder(folder, seen)
    return sorted(e.name for e in entries if _is_dir(e) and not e.name.startswith("."))


def _walk_images(folder: str, label: int, samples: list, seen: FolderStats | None) -> None:
    """Append (path, label) of every image under ``folder``: its own files by name, then each
    subfolder's by name; an unreadable folder adds nothing (as os.walk skips it)."""
    try:
        entries = _read_folder(folder, seen)
    except OSError:
        return
    files = sorted(e.name for e in entries if not _is_dir(e))
    samples += [
        (os.path.join(folder, f), label) for f in files if f.lower().endswith(IMAGE_EXTENSIONS)
    ]
    for name in sorted(e.name for e in entries if _is_dir(e)):
        _walk_images(os.path.join(folder, name), label, samples, seen)


def _images_of(folder: str, classes: Sequence[str], labels: dict[str, int], seen):
    """(path, label) of every image under each class subfolder, in a stable order."""
    samples: list[tuple[str, int]] = []
    for name in classes:
        _walk_images(os.path.join(folder, name), labels[name], samples, seen)
    return samples


def list_image_folder(
    path: str | os.PathLike, seen: FolderStats | None = None
) -> ImageFolderListing:
    """The images under ``path``: ``path/<class>/...``; or ``path/train/<class>/...`` and
    ``path/val/<class>/...``; or class folders beside ``path/val/<class>/...``.

    The held-out images' classes must be training classes. No file is opened; every folder is
    read once, and with ``seen`` given, each folder's stat is appended to it before it is read.
    """
    folder = os.path.abspath(os.fspath(path))
    try:
        top = _class_folders(folder, seen)
        val = None
        if VAL_FOLDER in top:
            train_root = os.path.join(folder, TRAIN_FOLDER)
            if TRAIN_FOLDER in top:
                classes = _class_folders(train_root, seen)
            else:
                train_root, classes = folder, [c for c in top if c != VAL_FOLDER]
            val_root = os.path.join(folder, VAL_FOLDER)
            val_classes = _class_folders(val_root, seen)
            foreign = sorted(set(val_classes) - set(classes))
            if foreign:
                raise ImageFolderError(
                    f"{val_root} has class folders the training images lack: {', '.join(foreign)}"
                )
            labels = {name: label for label, name in enumerate(classes)}
            val = tuple(_images_of(val_root, val_classes, labels, seen))
        else:
            train_root, classes = folder, top
            labels = {name: label for label, name in enumerate(classes)}
        train = tuple(_images_of(train_root, classes, labels, seen))
    except OSError as exc:
        raise ImageFolderError(f"cannot list {folder}: {' '.join(str(exc).split())}") from exc
    return ImageFolderListing(tuple(classes), train, val)


def held_out(samples: Sequence[tuple[str, int]], val_fraction: float) -> list[bool]:
    """Which of ``samples`` (path, label) are held out: per class, the ``val_fraction`` of its
    images (rounded, never all of them) whose paths hash lowest.

    Stratified and deterministic: the choice depends only on the files' names within their
    folder (not on the folder's place, the listing's order or any run's seed), and adding an
    image to a class moves at most one other image between the splits.
    """
    if not 0 <= val_fraction < 1:
        raise ValueError(f"val_fraction {val_fraction!r}: expected 0 <= val_fraction < 1")
    by_class: dict[int, list[int]] = {}
    for number, (_, label) in enumerate(samples):
        by_class.setdefault(label, []).append(number)
    chosen = [False] * len(samples)
    for numbers in by_class.values():
        count = held_out_count(len(numbers), val_fraction)
        ranked = sorted(numbers, key=lambda n: _rank(samples[n][0]))
        for number in ranked[:count]:
            chosen[number] = True
    return chosen


def held_out_count(class_images: int, val_fraction: float) -> int:
    """Images of a class of ``class_images`` that :func:`held_out` holds out."""
    return min(math.floor(class_images * val_fraction + 0.5), max(class_images - 1, 0))


def _rank(path: str) -> str:
    parts = os.path.normpath(path).split(os.sep)
    return hashlib.sha256(f"{HELD_OUT_SEED}/{'/'.join(parts[-2:])}".encode()).hexdigest()


@dataclass(frozen=True)
class ImageFolderSizes:
    """How many images each split of an image folder has (before unreadable ones are skipped)."""

    train: int
    held_out: int

    @property
    def total(self) -> int:
        return self.train + self.held_out


def image_folder_sizes(
    folder: ImageFolderListing | ImageFolderCounts, val_fraction: float
) -> ImageFolderSizes:
    """The splits' sizes: the ``val/`` folder's, else those of :func:`held_out`."""
    counts = folder.counts if isinstance(folder, ImageFolderListing) else folder
    train = sum(counts.train)
    if counts.val is not None:
        return ImageFolderSizes(train, counts.val)
    val = sum(held_out_count(n, val_fraction) for n in counts.train)
    return ImageFolderSizes(train - val, val)


def work_split(name: str, mode: str) -> str:
    """The split a mode's runs read: training reads ``train``; inference reads the test split,
    or, for an image folder, a ``python`` dataset or a text file, every sample (``all``: nothing
    is learned, nothing need be held out).
    """
    if mode == "train":
        return "train"
    return "all" if name in ("imagefolder", PYTHON, "text") else "test"


# ------------------------------------------------------------ an image folder's preprocessing

#: ``normalize: imagenet``: the mean and spread of ImageNet's training images, per RGB channel.
IMAGENET_NORMALIZE = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}

#: How an image folder's files are decoded: PIL, or torchvision.io (libjpeg-turbo on the bytes).
DECODERS = ("pil", "torchvision")


def resize_text(resize: int | Sequence[int]) -> str:
    """``256`` (the shorter side, aspect kept) or ``224x240`` (height x width)."""
    return str(resize) if isinstance(resize, int) else "x".join(map(str, resize))


def pipeline_image_size(resize: int | Sequence[int] | None, crop: int | None) -> int | None:
    """The side of the square images an image folder's ``resize`` and ``crop`` give (the
    centre crop's, else a ``[h, w]`` resize's), or None when neither fixes it."""
    if crop is not None:
        return int(crop)
    if resize is not None and not isinstance(resize, int):
        return int(resize[0])
    return None


def normalize_values(normalize: str | dict | None) -> dict | None:
    """``{mean, std}`` of a ``normalize`` setting (``imagenet`` named), or None."""
    return IMAGENET_NORMALIZE if normalize == "imagenet" else normalize


def preprocessing_text(
    resize: int | Sequence[int] | None, crop: int | None, normalize: str | dict | None
) -> str:
    """What is done to each decoded image, in a few words (results' ``preprocessing``)."""
    steps = []
    if resize is not None:
        kept = " (shorter side)" if isinstance(resize, int) else ""
        steps.append(f"resize {resize_text(resize)}{kept}")
    if crop is not None:
        steps.append(f"center crop {crop}")
    if normalize == "imagenet":
        steps.append("normalize imagenet")
    elif normalize:
        steps.append(f"normalize mean {normalize['mean']} std {normalize['std']}")
    return ", ".join(steps) or "none"
