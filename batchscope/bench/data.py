"""Datasets, opened: ``open_split`` returns a split ready for a ``DataLoader``.

``open_split(name, root, split, ...)`` returns a :class:`Split`: a ``torch`` dataset whose items
are ``(float tensor C x H x W, int label)`` plus the facts a model needs (classes, channels, size).
``root`` is the folder ``batchscope.bench.fetch.prepare`` filled (the catalogue of names, shapes
and channels is ``batchscope.core.datasets``).

This module imports torch and nothing heavier: ``synthetic`` (fixed random tensors, generated in
memory) is opened here, and the datasets read through torchvision and PIL (``fashion_mnist``,
``cifar10``, ``imagefolder``) by ``batchscope.bench.images``, imported only when one of them is
opened. A benchmark on synthetic data thus never loads torchvision, which alone costs about a
second per process (it imports ``torch._dynamo``).

This module knows nothing of Snakemake or config files: callers pass plain arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from batchscope.core import datasets

#: ``all``: every image of an image folder (what inference reads: ``datasets.work_split``).
SPLITS = ("train", "test", "all")

#: Images ``synthetic`` keeps in memory; items beyond it repeat the pool (index modulo its size).
SYNTHETIC_POOL = 256
SYNTHETIC_SEED = 0
SYNTHETIC_KEYS = ("channels", "image_size", "num_classes", "num_samples")

#: The index ``prepare`` writes for ``imagefolder``: ``<root>/index.json``.
INDEX_NAME = "index.json"
INDEX_FORMAT = "batchscope-imagefolder-index"
INDEX_VERSION = 2  # 2: a val/ folder's images apart, as val_samples


class DatasetError(RuntimeError):
    """A dataset cannot be fetched, verified or read; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Split:
    """One split of a dataset, ready for a ``DataLoader``."""

    dataset: Dataset  # items are (float tensor C x H x W, int label)
    num_classes: int
    channels: int  # channels of the tensors it yields
    image_size: int  # H (== W) of the tensors it yields
    skipped: int  # images skipped as unreadable (imagefolder), else 0


def check_name(name: str) -> None:
    """Refuse a dataset name the catalogue does not know, in one line."""
    if name not in datasets.NAMES:
        raise DatasetError(f"unknown dataset {name!r}; expected one of {', '.join(datasets.NAMES)}")


def native_channels(name: str, synthetic: Mapping | None = None) -> int:
    """:func:`batchscope.core.datasets.native_channels` for a name and the ``synthetic`` mapping,
    failing as a :class:`DatasetError`."""
    check_name(name)
    if name == "synthetic" and (not synthetic or "channels" not in synthetic):
        raise DatasetError("synthetic: the mapping `synthetic` needs the key channels")
    return datasets.native_channels(name, synthetic["channels"] if synthetic else None)


def one_line(exc: BaseException) -> str:
    """An exception's message with all whitespace runs (newlines included) made single spaces."""
    return " ".join(str(exc).split())


def read_index(index_path: Path) -> dict[str, Any]:
    """The imagefolder index at ``index_path``; an unreadable or foreign file is an error."""
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"imagefolder: cannot read {index_path}: {one_line(exc)}") from exc
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise DatasetError(f"imagefolder: {index_path} is not a batchscope image index")
    return index


def open_split(
    name: str,
    root: str | Path | None,
    split: str,
    *,
    channels: int | None = None,
    image_size: int | None = None,
    synthetic: Mapping | None = None,
    val_fraction: float = 0.0,
    pipeline: Mapping | None = None,
) -> Split:
    """Open split ``"train"`` or ``"test"`` of a prepared dataset (``"all"``: image folders).

    ``channels=3`` expands a 1-channel dataset to 3 (torchvision models need 3); other changes
    of channel count are refused. ``image_size`` resizes to a square of that side.
    ``imagefolder``: ``"test"`` is its ``val/`` folder's images if it had one, else the
    ``val_fraction`` of each class that ``batchscope.core.datasets.held_out`` chooses, and
    ``"train"`` the others; ``"all"`` is every image. ``synthetic`` needs the mapping
    ``synthetic`` with keys ``channels``, ``image_size``, ``num_classes``, ``num_samples``;
    ``channels`` and ``image_size`` given here override it, ``root`` may be None, and every
    split is the same images. ``pipeline`` (imagefolder): its resize, crop, normalize and
    decoder (:class:`batchscope.core.spec.ImagePipelineSpec` as a mapping). The ``python``
    datasets are opened by ``batchscope.bench.pydata``.
    """
    check_name(name)
    if split not in SPLITS:
        raise DatasetError(f"{name}: unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if name == "synthetic":
        return _open_synthetic(synthetic, channels, image_size)
    if split == "all" and name != "imagefolder":
        raise DatasetError(f"{name}: split 'all' is for image folders; use train or test")
    if root is None:
        raise DatasetError(f"{name}: open_split needs the root prepare() filled")
    from batchscope.bench import images  # torchvision and PIL: only for the data that needs them

    return images.open_split(name, Path(root), split, channels, image_size, val_fraction, pipeline)


def needs_torchvision(name: str) -> bool:
    """Whether opening dataset ``name`` imports torchvision (all but ``synthetic``, ``python``)."""
    return name not in ("synthetic", datasets.PYTHON)


class SyntheticImages(Dataset):
    """Fixed random images and labels, the same every run (own generator, seed 0).

    A pool of ``min(num_samples, SYNTHETIC_POOL)`` items is generated once; item ``i`` is pool
    item ``i % pool``, so an item costs an index, not a generation. Items are views into the
    pool: do not modify them in place.
    """

    def __init__(self, num_samples: int, channels: int, image_size: int, num_classes: int) -> None:
        generator = torch.Generator().manual_seed(SYNTHETIC_SEED)
        pool = min(num_samples, SYNTHETIC_POOL)
        shape = (pool, channels, image_size, image_size)
        self.num_samples = num_samples
        self.images = torch.randn(shape, generator=generator)
        self.labels = torch.randint(num_classes, (pool,), generator=generator).tolist()

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not -self.num_samples <= index < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        slot = index % len(self.labels)
        return self.images[slot], self.labels[slot]


def _open_synthetic(
    synthetic: Mapping | None, channels: int | None, image_size: int | None
) -> Split:
    if synthetic is None:
        raise DatasetError(f"synthetic: open_split needs synthetic={{{', '.join(SYNTHETIC_KEYS)}}}")
    missing = [key for key in SYNTHETIC_KEYS if key not in synthetic]
    if missing:
        raise DatasetError(f"synthetic: mapping lacks {', '.join(missing)}")
    settings = {key: synthetic[key] for key in SYNTHETIC_KEYS}
    if channels is not None:
        settings["channels"] = channels
    if image_size is not None:
        settings["image_size"] = image_size
    bad = [k for k, v in settings.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if bad:
        raise DatasetError(f"synthetic: {', '.join(bad)} must be positive integers")
    dataset = SyntheticImages(
        settings["num_samples"],
        settings["channels"],
        settings["image_size"],
        settings["num_classes"],
    )
    return Split(
        dataset, settings["num_classes"], settings["channels"], settings["image_size"], skipped=0
    )


# --- the compute-only ceiling's input -------------------------------------------------------

#: Distinct batches the compute-only ceiling cycles through: the one computed on and the next,
#: as many as a real loader has on the device, so the ceiling holds no more device memory.
CEILING_BATCHES = 2


class DeviceBatches:
    """Batches built once, before the clock, and cycled: the compute-only ceiling's input.

    ``place(x, y)`` puts a collated batch where the model computes (the device, in the run's
    memory format). A pass yields ``len(dataset) // batch_size`` batches, as a ``DataLoader``
    with ``drop_last`` would, cycling through ``distinct`` of them built from the dataset's
    first samples: no sample is indexed, no batch collated and nothing copied to the device
    while the steps run, so the ceiling measures the model's compute and not the main process
    feeding it.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int,
        place,
        distinct: int = CEILING_BATCHES,
    ) -> None:
        from torch.utils.data import default_collate

        self.batch_size = batch_size
        self.steps = len(dataset) // batch_size
        self.batches = []
        for k in range(min(distinct, self.steps)):
            first = k * batch_size
            items = [dataset[i] for i in range(first, first + batch_size)]
            self.batches.append(place(*default_collate(items)))

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for step in range(self.steps):
            yield self.batches[step % len(self.batches)]
