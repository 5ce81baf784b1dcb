"""The model check's spec: what ``python -m batchscope.bench.model_check`` reads for one model
entry (the resolved entry, and what one sample of the sweep's data looks like), built from the
completed config. Apart from ``model_entries`` (which resolves the entries) and ``spec`` (which
builds the runs' specs) so that neither imports the other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from batchscope.core import results, spec
from batchscope.core.model_entries import find


def check_spec(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """What the model check of ``name`` reads (``python -m batchscope.bench.model_check``): the
    resolved entry, and the shape of one sample of the sweep's data (the data's own channels;
    the check feeds the model what a benchmark job would)."""
    dataset = spec.dataset_spec(config)
    if dataset.python is not None:
        return _python_check_spec(config, name, dataset)
    model = dataclasses.asdict(find(config["models"], name))
    train = "train" in config["modes"]
    if dataset.tokens is not None:
        return {
            "model": model,
            "tokens": {
                "dataset": dataset.name,
                **dataclasses.asdict(dataset.tokens),
                # one sample of the shortest length; the longest must fit the model's positions
                "sequence_length": min(config["sequence_lengths"]),
                "longest": max(config["sequence_lengths"]),
            },
            "train": train,
        }
    shape = dataset.synthetic or spec.synthetic_twin(config, "infer").synthetic
    return {
        "model": model,
        "input": {
            "dataset": dataset.name,
            "channels": shape.channels,
            "image_size": shape.image_size,
            "num_classes": shape.num_classes,
            # imagefolder's classes are its subfolders, not known before a job opens it
            "classes_known": dataset.name != "imagefolder",
        },
        "train": train,
    }


def _python_check_spec(config: Mapping[str, Any], name: str, dataset) -> dict[str, Any]:
    """:func:`check_spec` for the user's own Datasets, whose shape and length only a job that
    builds them can know: the check builds them, feeds the model their first item, and holds
    their length against the sweep's batch sizes (``sweep``: the settings that takes)."""
    train = config["train"]
    return {
        "model": dataclasses.asdict(find(config["models"], name)),
        "input": {"dataset": dataset.name, "python": dataclasses.asdict(dataset.python)},
        "train": "train" in config["modes"],
        "sweep": {
            "modes": list(config["modes"]),
            "batch_sizes": config["batch_sizes"],
            "measure": {"warmup_steps": config["measure"]["warmup_steps"]},
            "train": {
                key: train[key]
                for key in (
                    "epochs",
                    "accumulation_steps",
                    "target_accuracy",
                    "target_loss",
                    "eval_every_samples",
                )
            },
        },
    }


def check_spec_text(config: Mapping[str, Any], name: str) -> str:
    """:func:`check_spec` as the canonical JSON the check job reads."""
    return results.canonical_json(check_spec(config, name))
