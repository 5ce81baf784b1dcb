"""The model check: one job per model, before any benchmark job of it.

    python -m batchscope.bench.model_check specs/models/m.json --output results/models/m.json

Imports the model's library or factory, builds the model once, loads its weights, and runs one
forward pass on one sample of the dataset's shape on the CPU; then writes what it found
(parameters, FLOPs per sample, the input it was fed, its output, dtype). Any mistake in the
model's entry is one line naming it, and exit status 1: the benchmark jobs, which depend on
this file, never start. The spec (:func:`batchscope.core.model_check_spec.check_spec`) is the
model's entry and the input's shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from batchscope.core import results
from batchscope.core.model_entries import HF_IMAGE_TASKS, ModelSpec


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m batchscope.bench.model_check", description=__doc__.split("\n")[0]
    )
    p.add_argument("spec", help="the check's spec (JSON: the model entry and the input)")
    p.add_argument("--output", required=True, help="results/models/<name>.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with open(args.spec, encoding="utf-8") as handle:
        spec = json.load(handle)
    from batchscope.bench.data import DatasetError
    from batchscope.bench.models import ModelError
    from batchscope.core.config import ConfigError

    try:
        found = check(spec)
    except (ModelError, DatasetError, ConfigError) as exc:
        print(f"batchscope: {exc}", file=sys.stderr)
        return 1
    results.write_json(args.output, found)
    print(f"batchscope model check: {json.dumps(found)}", file=sys.stderr)
    return 0


def check(spec: dict[str, Any]) -> dict[str, Any]:
    """Build, load and run the model of ``spec`` once; what a reader of the sweep wants to know
    of it. :class:`~batchscope.bench.models.ModelError` for every mistake."""
    import torch

    from batchscope.bench import models

    entry = ModelSpec(**spec["model"])
    models.import_for(entry)
    if "tokens" in spec:
        return check_tokens(entry, spec["tokens"], spec["train"])
    data = spec["input"]
    if entry.source == "hf" and entry.task not in HF_IMAGE_TASKS:
        raise models.ModelError(
            f"model entry {entry.name}: a Hugging Face {entry.task} model reads token ids, and"
            f" the sweep's dataset {data['dataset']} gives images: use dataset tokens or text"
        )
    facts = {}
    if "python" in data:  # the user's own Datasets: built here once, their first item fed
        sample, facts = python_input(spec)
        data = {**data, "num_classes": data["python"]["num_classes"], "classes_known": True}
        native = sample.shape[0] if sample.dim() == 3 else 3
        channels = models.entry_input_channels(entry, native)
        shape = tuple(sample.shape)
    else:
        channels = models.entry_input_channels(entry, data["channels"])
        shape = (channels, data["image_size"], data["image_size"])
        sample = torch.zeros(shape)

    classes = data["num_classes"]
    if not data["classes_known"] and "num_labels" in entry.kwargs:
        # an image folder's classes are its job's to count (and to hold the override against)
        classes = entry.kwargs["num_labels"]

    def build():
        return models.build(entry, num_classes=classes, in_channels=channels, image_size=shape[-1])

    model = build()
    models.load_weights(model, entry)
    model.eval()
    try:
        with torch.no_grad():
            output = models.logits_of(model(sample.unsqueeze(0)))
    except Exception as exc:
        raise models.ModelError(
            f"model entry {entry.name}: a forward pass on one sample of shape {shape}"
            f" ({data['dataset']}) raised {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    if spec["train"] and data["classes_known"] and (output.dim() != 2 or output.shape[1] < classes):
        raise models.ModelError(
            f"model entry {entry.name}: its output has shape {tuple(output.shape)} for one"
            f" sample; training on {data['dataset']} needs (1, {classes}) logits, one per class"
        )
    return _record(entry, model, build, shape, torch.float32, data["dataset"], output, **facts)


def python_input(spec: dict[str, Any]):
    """Build the user's Datasets once (``batchscope.bench.pydata``: every mistake one line
    naming the dataset), hold their length against the sweep's batch sizes, and return the
    first training input with what a reader wants to know of the data."""
    from batchscope.bench import pydata
    from batchscope.core import config, datasets

    work, val = pydata.open_splits(spec["input"]["python"], "train")
    sweep = spec["sweep"]
    train = sweep["train"]
    needs_val = any(train[k] is not None for k in ("target_accuracy", "target_loss"))
    if val is None and "train" in sweep["modes"] and (needs_val or train["eval_every_samples"]):
        raise pydata.DatasetError(
            f"{pydata.OWNER}: the factory gave no validation Dataset (val is None), and"
            " train.target_accuracy, target_loss or eval_every_samples need one"
        )
    lengths = {"train": len(work.dataset), "val": len(val.dataset) if val else None}
    if sweep["batch_sizes"] != "auto":
        for mode in sweep["modes"]:
            split = datasets.work_split(datasets.PYTHON, mode)
            samples = lengths["train"] + ((lengths["val"] or 0) if split == "all" else 0)
            sets = "train Dataset" if split == "train" or not val else "train and val Datasets"
            what = f"samples in the python dataset's {sets}"
            config.check_steps(sweep, mode, samples, what)
    sample = work.dataset[0][0]
    facts = {"dataset_samples": lengths, "dataset_factory": spec["input"]["python"]["factory"]}
    return sample, facts


def check_tokens(entry: ModelSpec, data: dict[str, Any], train: bool) -> dict[str, Any]:
    """:func:`check` for token data: the sweep's longest sequence fits the model's positions,
    the data's ids its vocabulary, and one sample of the shortest sequence length runs."""
    import torch

    from batchscope.bench import models, tokens

    facts = models.token_facts(entry)
    longest = facts["max_positions"]
    if longest is not None and data["longest"] > longest:
        raise models.ModelError(
            f"model entry {entry.name}: sequence_lengths go up to {data['longest']}, longer than"
            f" its {longest} positions"
        )
    vocab = facts["vocab_size"]
    if data["vocab_size"] and vocab and data["vocab_size"] > vocab:
        raise models.ModelError(
            f"model entry {entry.name}: dataset.vocab_size {data['vocab_size']} is larger than"
            f" its vocabulary of {vocab}"
        )
    from types import SimpleNamespace

    dataset = SimpleNamespace(
        name=data["dataset"],
        tokens=SimpleNamespace(
            **{k: data[k] for k in ("num_samples", "vocab_size", "path")},
            tokenizer=data["tokenizer"],
        ),
        val_fraction=0.0,
    )
    length = data["sequence_length"]
    try:
        split, vocab = tokens.open_split(
            dataset, "all" if data["dataset"] == "text" else "test", length, facts
        )
    except tokens.TokenError as exc:
        raise models.ModelError(f"model entry {entry.name}: {exc}") from exc
    classes = split.num_classes

    def build():
        return models.build(entry, num_classes=classes, in_channels=1)

    model = build()
    models.load_weights(model, entry)
    model.eval()
    ids = split.dataset[0][0].unsqueeze(0)
    try:
        with torch.no_grad():
            output = models.logits_of(model(ids))
    except Exception as exc:
        raise models.ModelError(
            f"model entry {entry.name}: a forward pass on one sequence of {length} token ids"
            f" ({data['dataset']}) raised {type(exc).__name__}: {' '.join(str(exc).split())}"
        ) from exc
    extra = {"vocab_size": vocab, "max_positions": longest}
    return _record(entry, model, build, (length,), torch.long, data["dataset"], output, **extra)


def _record(entry: ModelSpec, model, build, shape, dtype, dataset: str, output, **extra) -> dict:
    """What a model check writes: the entry, the model's parameters and dtypes, its FLOPs per
    sample of ``shape`` and ``dtype`` (None where they cannot be counted: a figure for the
    reader only, the benchmark job counts its own), the input fed and the output it gave."""
    from batchscope.bench import models

    try:
        flops = count_flops(entry, build, tuple(shape), train=False, dtype=dtype).per_sample
    except Exception:
        flops = None
    return {
        "name": entry.name,
        **{k: v for k, v in models.result_fields(entry, model).items() if k != "model_kwargs"},
        "model_kwargs": entry.kwargs,
        "weights": entry.weights,
        "flops_per_sample_infer": flops,
        "input_shape": list(shape),
        "input_dtype": str(dtype).removeprefix("torch."),
        "dataset": dataset,
        "output_shape": list(output.shape),
        "parameter_dtypes": sorted(
            {str(p.dtype).removeprefix("torch.") for p in model.parameters()}
        ),
        **extra,
    }


def count_flops(entry: ModelSpec, build, shape: tuple[int, ...], *, train: bool, dtype=None):
    """FLOPs per sample and the convolutions' share (:func:`batchscope.bench.flops.count_flops`):
    on the meta device, or for the small CNN on a CPU copy (milliseconds, and no torch._dynamo
    to import); a model whose code cannot run on the meta device is counted on a CPU copy."""
    import torch

    from batchscope.bench import flops, models

    options = {"train": train, "dtype": dtype or torch.float32}
    if models.counts_flops_on_cpu(entry):
        return flops.count_flops(build, shape, device="cpu", **options)
    try:
        return flops.count_flops(build, shape, device="meta", **options)
    except Exception:  # noqa: BLE001 - any failure on meta: count on a CPU copy
        return flops.count_flops(build, shape, device="cpu", **options)


if __name__ == "__main__":
    sys.exit(main())
