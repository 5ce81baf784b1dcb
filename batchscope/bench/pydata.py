"""The user's own Datasets (``dataset: {name: python, factory: data.py:build}``).

The factory returns the training and validation Datasets: a pair ``(train, val)`` or a mapping
``{train, val}``; ``val`` may be None (then nothing is validated on). Their items are
``(input, target)`` or mappings holding both (:data:`INPUT_KEYS`, :data:`TARGET_KEYS`). Every
mistake is a :class:`~batchscope.bench.data.DatasetError`, one line naming the dataset.

The Datasets a run reads are wrapped in :class:`FactoryItems`, which DataLoader workers can
unpickle whatever their start method: the factory's file is imported in the worker, under the
name it has here, before the Dataset itself is unpickled.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset, IterableDataset

from batchscope.bench.data import DatasetError, Split, one_line

#: The name the factory's file is imported under (in this process and in every worker).
MODULE_NAME = "batchscope_dataset_factory"

#: Keys of a mapping item, tried in order: the model's input, and its target.
INPUT_KEYS = ("input", "image", "pixel_values", "x")
TARGET_KEYS = ("target", "label", "labels", "y")

OWNER = "dataset python"


def _error(message: str) -> DatasetError:
    return DatasetError(f"{OWNER}: {' '.join(str(message).split())}")


def factory_function(factory: str):
    """The factory's function, its file imported as :data:`MODULE_NAME`."""
    from batchscope.bench.models import import_function

    return import_function(factory, MODULE_NAME, _error)


def _file_of(factory: str) -> str | None:
    where = factory.rpartition(":")[0]
    return where if where.endswith(".py") or "/" in where else None


def _restore(factory: str, payload: bytes) -> FactoryItems:
    """Unpickle a :class:`FactoryItems` in a worker: import the factory's file first."""
    if _file_of(factory) and MODULE_NAME not in sys.modules:
        factory_function(factory)
    dataset, keys = pickle.loads(payload)
    return FactoryItems(dataset, factory, keys)


class FactoryItems(Dataset):
    """One of the factory's Datasets, its items as ``(input, target)``."""

    def __init__(self, dataset, factory: str, keys: tuple[str, str] | None) -> None:
        self.dataset = dataset
        self.factory = factory
        #: a mapping item's input and target keys; None for (input, target) items
        self.keys = keys

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        item = self.dataset[index]
        if self.keys is not None:
            return item[self.keys[0]], item[self.keys[1]]
        return item if isinstance(item, tuple) else tuple(item)

    def __reduce__(self):
        return _restore, (self.factory, pickle.dumps((self.dataset, self.keys)))


def build(spec: Mapping[str, Any]) -> tuple[Any, Any]:
    """Call the factory (``spec``: a :class:`~batchscope.core.spec.PythonDatasetSpec` as a
    mapping) and return its ``(train, val)``, checked to be Datasets."""
    function = factory_function(spec["factory"])
    try:
        made = function(**spec["kwargs"])
    except Exception as exc:
        raise _error(f"the factory {spec['factory']} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(made, Mapping) and "train" in made:
        train, val = made["train"], made.get("val")
    elif isinstance(made, (tuple, list)) and len(made) == 2:
        train, val = made
    else:
        raise _error(
            f"the factory {spec['factory']} returned a {type(made).__name__}; expected"
            " (train, val) or {train: ..., val: ...} Datasets (val may be None)"
        )
    for what, dataset in (("train", train), ("val", val)):
        if what == "val" and dataset is None:
            continue
        if isinstance(dataset, IterableDataset) or not (
            hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")
        ):
            raise _error(
                f"its {what} is a {type(dataset).__name__}, not a Dataset with __len__ and"
                " __getitem__ (an IterableDataset has no length to size batches against)"
            )
        if len(dataset) == 0:
            raise _error(f"its {what} Dataset is empty")
    return train, val


def item_keys(dataset, what: str) -> tuple[str, str] | None:
    """How the items of ``dataset`` hold input and target (None: ``(input, target)``)."""
    try:
        item = dataset[0]
    except Exception as exc:
        raise _error(f"{what}[0] raised {type(exc).__name__}: {one_line(exc)}") from exc
    if isinstance(item, Mapping):
        keys = tuple(
            next((k for k in candidates if k in item), None)
            for candidates in (INPUT_KEYS, TARGET_KEYS)
        )
        if None in keys:
            raise _error(
                f"{what}[0] is a mapping with keys {', '.join(map(str, item))}; it needs an"
                f" input ({', '.join(INPUT_KEYS)}) and a target ({', '.join(TARGET_KEYS)})"
            )
        return keys
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return None
    size = f" of {len(item)}" if isinstance(item, (tuple, list)) else ""
    raise _error(
        f"{what}[0] is a {type(item).__name__}{size}; items must be (input, target) or a"
        " mapping with an input and a target"
    )


def _checked_sample(dataset: FactoryItems, what: str, num_classes: int) -> torch.Tensor:
    x, y = dataset[0]
    if not isinstance(x, torch.Tensor):
        raise _error(f"the input of {what}[0] is a {type(x).__name__}, not a torch.Tensor")
    try:
        target = int(y)
    except (TypeError, ValueError, RuntimeError):
        raise _error(
            f"the target of {what}[0] is a {type(y).__name__}, not a class index"
        ) from None
    if not 0 <= target < num_classes:
        raise _error(
            f"the target of {what}[0] is {target}, outside 0 .. {num_classes - 1}"
            " (dataset.num_classes)"
        )
    return x


def _split(dataset: FactoryItems, sample: torch.Tensor, num_classes: int) -> Split:
    image = sample.dim() == 3
    return Split(
        dataset,
        num_classes,
        int(sample.shape[0]) if image else None,
        int(sample.shape[-1]) if image else None,
        skipped=0,
    )


def open_splits(spec: Mapping[str, Any], split: str) -> tuple[Split, Split | None]:
    """The split a run reads (``train``, or ``all``: train and val together, as inference
    reads them) and the validation split (None when the factory gave none)."""
    train, val = build(spec)
    wrapped = {}
    for what, dataset in (("train", train), ("val", val)):
        if dataset is not None:
            wrapped[what] = FactoryItems(dataset, spec["factory"], item_keys(dataset, what))
    num_classes = spec["num_classes"]
    samples = {what: _checked_sample(d, what, num_classes) for what, d in wrapped.items()}
    if "val" in samples and samples["val"].shape != samples["train"].shape:
        raise _error(
            f"train[0]'s input has shape {tuple(samples['train'].shape)} and val[0]'s"
            f" {tuple(samples['val'].shape)}; a model takes one"
        )
    val_split = _split(wrapped["val"], samples["val"], num_classes) if "val" in wrapped else None
    work = wrapped["train"]
    if split == "all" and "val" in wrapped:
        work = ConcatDataset([wrapped["train"], wrapped["val"]])
    elif split not in ("train", "all"):
        raise _error(f"unknown split {split!r}; expected train or all")
    return _split(work, samples["train"], num_classes), val_split
