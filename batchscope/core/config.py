"""Config checking with one-line errors that name the key.

Imports only jsonschema and PyYAML, so the workflow can check a config before any job starts
without importing torch. The JSON Schema (``workflow/schemas/config.schema.yaml``) is the
contract; :func:`check` adds the few rules a schema cannot say, and what can be known of the
data and the models before any job: an image folder's images are listed (not decoded; the
listing is kept while the folder is unchanged: ``folder_index``), so an empty folder, a batch
larger than the data and an image too small for a model stop the sweep before its first job.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match

from batchscope.core import datasets, folder_index, grid, model_inputs
from batchscope.core import model_entries as model_names

#: Keys renamed: the old name's one-line error names the new one (fractions end in _frac).
RENAMED = {
    old: f"{old}_frac"
    for old in (
        "sweep.margin",
        "sweep.foreign_cpu_limit",
        "maxbatch.margin",
        "maxbatch.tolerance",
    )
}

#: The contract: the config's JSON Schema, with every key's default (in this checkout).
SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """A config value the workflow cannot run with; the message is one line naming the key."""


def key_path(path) -> str:
    """``['batch_sizes', 0]`` -> ``batch_sizes[0]``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "anyOf" and isinstance(error.instance, str):
        # a name that is none of the forms (models: a listed name, timm:<name>, a mapping)
        allowed = [v for e in error.context if e.validator == "enum" for v in e.validator_value]
        close = difflib.get_close_matches(error.instance, allowed, n=3, cutoff=0.6)
        if allowed:
            hint = f"did you mean {', '.join(close)}?" if close else "see config/README.md"
            return f"{error.instance!r} is not allowed ({hint})"
    if error.validator == "enum" and len(error.validator_value) > 6:
        shown = ", ".join(map(str, error.validator_value[:6]))
        more = len(error.validator_value) - 6
        return f"{error.instance!r} is not allowed (allowed: {shown}, ... {more} more)"
    if error.validator == "uniqueItems":
        return f"has duplicate values {error.instance!r}"
    if error.validator == "minItems" and error.validator_value == 1:
        return "must not be empty"
    return error.message


def default(key: str, schema: Mapping[str, Any] | None = None) -> Any:
    """The schema's default of a dotted key (``"sweep.level"``), for code that runs outside
    the workflow and must agree with it."""
    schema = schema if schema is not None else load_schema(SCHEMA_PATH)
    node: Mapping[str, Any] = schema
    for part in key.split("."):
        node = _resolve(node["properties"][part], schema)
    return node["default"]


def load_schema(path: str | os.PathLike) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def completed(config: Mapping[str, Any], schema_path: str | os.PathLike = SCHEMA_PATH) -> dict:
    """``config`` checked (:func:`check`: a one-line ConfigError) and with the schema's defaults
    filled in: what a script that builds run specs outside the workflow starts from."""
    schema = load_schema(schema_path)
    check(config, schema)
    return with_defaults(config, schema)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``measure.rounds=2`` -> (["measure", "rounds"], 2): a dotted key and a YAML value."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"{text!r}: expected KEY=VALUE, e.g. measure.rounds=2")
    return key.strip().split("."), yaml.safe_load(value)


def with_overrides(config: Mapping[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """A deep copy of ``config`` with each ``KEY=VALUE`` set (dotted keys make nested maps)."""
    out = copy.deepcopy(dict(config))
    for text in overrides:
        keys, value = parse_override(text)
        node = out
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = value
    return out


def with_defaults(config: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with every key it leaves out set to the schema's default, nested
    sections included (as Snakemake's ``validate`` fills them in the workflow)."""
    return _fill(copy.deepcopy(dict(config)), schema, schema)


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    """``node``, or what its local ``$ref`` (``#/$defs/...``) points to, merged under it."""
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**_resolve(target, root), **{k: v for k, v in node.items() if k != "$ref"}}


def _fill(value: Any, node: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    node = _resolve(node, root)
    if not isinstance(value, dict):
        return value
    for name, child in node.get("properties", {}).items():
        child = _resolve(child, root)
        if name not in value and "default" in child:
            value[name] = copy.deepcopy(child["default"])
        if name in value:
            value[name] = _fill(value[name], child, root)
    return value


def resolve_paths(config: Mapping[str, Any], base_dirs: Sequence[str]) -> dict[str, Any]:
    """A copy of ``config`` with its relative data paths (``dataset.path``, ``dataset.mirrors``
    that are plain folders) absolute: under the first of ``base_dirs`` that has them (the
    workflow passes the config file's folder, then the working directory, as for the paths of
    model entries: :mod:`batchscope.core.model_entries`). A path found in none is left as
    written, for :func:`check` to name."""
    resolved = copy.deepcopy(dict(config))
    dataset = resolved.get("dataset")
    if not isinstance(dataset, dict):
        return resolved
    if isinstance(dataset.get("path"), str):
        dataset["path"] = _found(dataset["path"], base_dirs)
    if isinstance(dataset.get("mirrors"), list):
        dataset["mirrors"] = [
            m if not isinstance(m, str) or "://" in m else _found(m, base_dirs)
            for m in dataset["mirrors"]
        ]
    return resolved


def _found(path: str, base_dirs: Sequence[str]) -> str:
    expanded = os.path.expanduser(path)
    if os.path.isabs(expanded):
        return path
    for folder in base_dirs:
        candidate = os.path.join(folder, expanded)
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    return path


def check(
    config: Mapping[str, Any],
    schema: Mapping[str, Any],
    folder_listings: str | os.PathLike | None = None,
) -> None:
    """Raise :class:`ConfigError` for the most relevant problem in ``config``, if any.

    ``folder_listings``: where an image folder's listing is kept between checks
    (:mod:`batchscope.core.folder_index`; the workflow's ``paths.FOLDER_LISTINGS``); without it,
    the folder is listed. The listing is kept only when the config passes."""
    validator = jsonschema.Draft202012Validator(schema)
    error = best_match(validator.iter_errors(config))
    if error is not None:
        path = list(error.absolute_path)
        if error.validator == "additionalProperties":
            allowed = error.schema.get("properties", {})
            unknown = sorted(k for k in error.instance if k not in allowed)
            renamed = RENAMED.get(key_path([*path, unknown[0]]))
            if renamed is not None:
                raise ConfigError(
                    f"config key {key_path([*path, unknown[0]])}: renamed {renamed} (a fraction)"
                )
            raise ConfigError(
                f"config key {key_path([*path, unknown[0]])}: unknown key"
                f" (allowed here: {', '.join(allowed)})"
            )
        raise ConfigError(f"config key {key_path(path)}: {_message(error)}")
    full = with_defaults(config, schema)
    _check_semantics(full)
    _check_devices(full)
    sizes, keep_listing = None, None
    if full["dataset"]["name"] == "imagefolder":
        sizes, keep_listing = _image_folder_sizes(full, folder_listings)
    _check_against_data(full, sizes)
    if keep_listing is not None:
        keep_listing()


def _check_semantics(config: Mapping[str, Any]) -> None:
    """Rules between keys (``config`` has its defaults, so none is restated here)."""
    dataset = config["dataset"]
    name = dataset.get("name")
    if name in ("imagefolder", "text"):
        path = dataset.get("path")
        if not path:
            raise ConfigError(f"config key dataset.path: required when dataset.name is {name}")
        where = (
            ""
            if os.path.isabs(path)
            else " (a relative path is looked for beside the config file, then in the"
            " working directory)"
        )
        if name == "imagefolder" and not os.path.isdir(path):
            raise ConfigError(f"config key dataset.path: {path!r} is not a folder{where}")
        if name == "text" and not os.path.isfile(path):
            raise ConfigError(f"config key dataset.path: {path!r} is not a file{where}")
    elif "path" in dataset:
        raise ConfigError(
            "config key dataset.path: only used when dataset.name is imagefolder or text"
        )
    for key, owner in (("vocab_size", "tokens"), ("tokenizer", "text")):
        if dataset.get(key) is not None and name != owner:
            raise ConfigError(f"config key dataset.{key}: only used when dataset.name is {owner}")
    tokenizer = dataset.get("tokenizer")
    if tokenizer is not None and not os.path.isdir(tokenizer):
        raise ConfigError(
            f"config key dataset.tokenizer: {tokenizer!r} is not a folder (a local tokenizer,"
            " as AutoTokenizer.save_pretrained writes it; nothing is downloaded)"
        )
    _check_pipeline(dataset)
    _check_python(config)
    _check_token_models(config)
    _check_warmup(config)
    _check_rounds(config)
    _check_train(config["train"], config["measure"]["warmup_steps"])


def _check_rounds(config: Mapping[str, Any]) -> None:
    """The race's most rounds are at least the rounds every point gets; short runs get rounds
    of their own only where no race decides them."""
    sweep, rounds = config["sweep"], config["measure"]["rounds"]
    if sweep["strategy"] == "race" and sweep["max_rounds"] < rounds:
        raise ConfigError(
            f"config key sweep.max_rounds: {sweep['max_rounds']} is below measure.rounds"
            f" ({rounds}), the rounds every point is measured in before the race's first look"
        )
    train = config["train"]
    if train["predict"] and sweep["strategy"] == "race" and train["predict_rounds"] > rounds:
        raise ConfigError(
            f"config key train.predict_rounds: {train['predict_rounds']} is above measure.rounds"
            f" ({rounds}), which sweep.strategy race needs (the race decides the later rounds):"
            " use sweep.strategy full"
        )


def _check_warmup(config: Mapping[str, Any]) -> None:
    """Every run keeps a step to measure after its warm-up."""
    warmup = config["measure"]["warmup_steps"]
    for mode in grid.MODES:
        cap = config.get(mode, {}).get("max_steps")
        if cap is not None and cap <= warmup:
            raise ConfigError(
                f"config key {mode}.max_steps: {cap} leaves no step to measure after "
                f"measure.warmup_steps={warmup}"
            )


def _check_train(train: Mapping[str, Any], warmup: int) -> None:
    """Rules between the training keys (schedule, target, prediction, validation)."""
    if train["lr_scaling"] != "none" and train.get("base_batch_size") is None:
        raise ConfigError("config key train.base_batch_size: required when train.lr_scaling is set")
    if train.get("lr_warmup_epochs") is not None and train.get("lr_warmup_steps"):
        raise ConfigError(
            "config key train.lr_warmup_epochs: give lr_warmup_steps or lr_warmup_epochs, not both"
        )
    if train.get("target_accuracy") is not None and train.get("target_loss") is not None:
        raise ConfigError(
            "config key train.target_loss: give target_accuracy or target_loss, not both"
        )
    if (
        train.get("predict")
        and train.get("target_accuracy") is None
        and (train.get("target_loss") is None)
    ):
        raise ConfigError(
            "config key train.predict: needs train.target_accuracy or train.target_loss (it "
            "predicts the steps to a target)"
        )
    if train["predict"] and train["predict_steps"] <= warmup:
        raise ConfigError(
            f"config key train.predict_steps: {train['predict_steps']} leaves no step "
            f"to measure after measure.warmup_steps={warmup}"
        )
    from batchscope.core.prediction import NOISE_FROM  # numpy: only when a config is checked

    strategy = train["predict_calibration"]
    if train["predict"] and strategy in NOISE_FROM and train.get("noise_scale_every_steps") is None:
        runs = "short runs'" if NOISE_FROM[strategy] == "early" else "calibration runs'"
        raise ConfigError(
            f"config key train.predict_calibration: {strategy} takes B_noise from the {runs} "
            "noise scale: set train.noise_scale_every_steps (or use corner)"
        )
    if train["validate"] is False:
        for key in ("target_accuracy", "target_loss", "eval_every_samples"):
            if train.get(key) is not None:
                raise ConfigError(
                    f"config key train.validate: false, but train.{key} needs validations"
                )


def _check_devices(config: Mapping[str, Any]) -> None:
    """A run larger than a node takes whole nodes: its devices a multiple of a node's."""
    per_node = config["slurm"]["gpus_per_node"]
    for n in config["devices"]:
        if n > per_node and n % per_node:
            raise ConfigError(
                f"config key devices: {n} is more than slurm.gpus_per_node={per_node} and not"
                " a multiple of it (a run larger than a node takes whole nodes)"
            )


def _check_pipeline(dataset: Mapping[str, Any]) -> None:
    """An image folder's preprocessing (resize, crop, normalize, decoder): for image folders
    only, giving square images of one size."""
    given = [k for k in ("resize", "crop", "normalize") if dataset.get(k) is not None]
    if dataset["decoder"] != "pil":
        given.append("decoder")
    if not given:
        return
    if dataset.get("name") != "imagefolder":
        raise ConfigError(
            f"config key dataset.{given[0]}: only used when dataset.name is imagefolder"
        )
    resize, crop = dataset.get("resize"), dataset.get("crop")
    if dataset.get("image_size") is not None and (resize is not None or crop is not None):
        raise ConfigError("config key dataset.image_size: give image_size or resize/crop, not both")
    if isinstance(resize, int) and crop is None:
        raise ConfigError(
            f"config key dataset.resize: {resize} keeps each image's aspect, so images differ"
            " in size: add dataset.crop, or give resize: [height, width]"
        )
    if isinstance(resize, list) and crop is None and resize[0] != resize[1]:
        raise ConfigError(
            f"config key dataset.resize: {resize} is not square; the sweep's images are:"
            " add a square dataset.crop, or give equal sides"
        )
    least = min(resize) if isinstance(resize, list) else resize
    if crop is not None and least is not None and crop > least:
        raise ConfigError(
            f"config key dataset.crop: {crop} is larger than the resized image"
            f" ({datasets.resize_text(resize)})"
        )


def _check_python(config: Mapping[str, Any]) -> None:
    """A ``python`` dataset names its factory; its own Datasets fix their images' size (the
    model-check job builds them once and checks their items and length)."""
    dataset = config.get("dataset", {})
    if dataset.get("name") != datasets.PYTHON:
        for key in ("factory", "kwargs"):
            if dataset.get(key):
                raise ConfigError(
                    f"config key dataset.{key}: only used when dataset.name is python"
                )
        return
    if not dataset.get("factory"):
        raise ConfigError("config key dataset.factory: required when dataset.name is python")
    if dataset.get("image_size") is not None:
        raise ConfigError(
            "config key dataset.image_size: a python dataset's items have their own size"
        )


#: Keys of a Hugging Face config that give its longest sequence (the first one present).
MAX_POSITION_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")


def _check_token_models(config: Mapping[str, Any]) -> None:
    """Token data for models that read token ids, images for the others: a Hugging Face model
    of a token task reads token ids; a built-in, torchvision, timm or Hugging Face
    image_classification model images (a factory may read either); and no sequence longer than
    an entry's config allows (the rest is the model check's)."""
    name = config["dataset"]["name"]
    tokens = datasets.is_tokens(name)
    for index, entry in enumerate(config.get("models", [])):
        hf = isinstance(entry, Mapping) and bool(entry.get("hf"))
        factory = isinstance(entry, Mapping) and bool(entry.get("factory"))
        reads_ids = model_names.reads_token_ids(entry)
        label = model_names.name_of(entry, index)
        if reads_ids and not tokens:
            raise ConfigError(
                f"config key dataset.name: {name} gives images, and model {label} (hf, task"
                f" {entry['task']}) reads token ids: use dataset tokens or text, or task"
                " image_classification"
            )
        if tokens and not reads_ids and not factory:
            what = f"(hf, task {entry.get('task')}) " if hf else ""
            raise ConfigError(
                f"config key dataset.name: {name} gives token ids, and model {label} {what}reads"
                " images: use an hf model of task causal_lm or sequence_classification (or a"
                " factory that reads token ids)"
            )
        if tokens and factory and name == "tokens" and not config["dataset"].get("vocab_size"):
            raise ConfigError(
                f"config key dataset.vocab_size: model {label} (a factory) has no config to"
                " take the vocabulary from: give dataset.vocab_size"
            )
        overrides = (entry.get("config") or {}) if hf else {}
        longest = next((overrides[k] for k in MAX_POSITION_KEYS if k in overrides), None)
        lengths = config.get("sequence_lengths", [])
        if tokens and isinstance(longest, int) and lengths and max(lengths) > longest:
            raise ConfigError(
                f"config key sequence_lengths: {max(lengths)} is longer than model {label}"
                f" takes ({longest} positions in its config)"
            )


def _check_against_data(config: Mapping[str, Any], sizes: datasets.ImageFolderSizes | None) -> None:
    """What the data's size (``sizes``: an image folder's) and the models' input sizes allow
    (``config`` has its defaults)."""
    dataset = config["dataset"]
    name = dataset["name"]
    if config["batch_sizes"] != "auto":
        for mode in config["modes"]:
            _check_steps(config, mode, sizes)
    if name == datasets.PYTHON:
        return  # its length and items' shape: the model-check job, which builds the Datasets
    if datasets.is_tokens(name):
        return  # no image size; the model check feeds the model one sequence
    native = datasets.SHAPES.get(name, {}).get("image_size", datasets.SYNTHETIC_DEFAULT_SIZE)
    piped = datasets.pipeline_image_size(dataset.get("resize"), dataset.get("crop"))
    size = piped or dataset["image_size"] or native
    _check_hf_images(config, size)
    for entry in config["models"]:
        # a plain name, or a mapping's `model:` (say, a checkpoint of a torchvision model);
        # timm, factory and hf models are checked by their model-check job
        model = entry.get("model") if isinstance(entry, Mapping) else entry
        if not isinstance(model, str) or model.startswith("timm:"):
            continue
        problem = model_inputs.input_size_problem(model, size)
        if problem:
            key = "crop" if dataset.get("crop") else "resize" if piped else "image_size"
            given = "" if piped or dataset["image_size"] else f" ({name}'s own size)"
            raise ConfigError(f"config key dataset.{key}: {problem}{given}; set a size it takes")


def _check_hf_images(config: Mapping[str, Any], size: int) -> None:
    """A Hugging Face image classifier's ``config`` overrides agree with the data (its classes,
    channels and image side are set from it); an image folder's classes are its job's to
    count."""
    dataset = config["dataset"]
    shape = dataset if dataset["name"] == "synthetic" else datasets.SHAPES[dataset["name"]]
    data = {
        "num_labels": None if dataset["name"] == "imagefolder" else shape["num_classes"],
        "num_channels": shape["channels"],
        "image_size": size,
    }
    for index, entry in enumerate(config["models"]):
        if (
            isinstance(entry, Mapping)
            and entry.get("hf")
            and not model_names.reads_token_ids(entry)
        ):
            problem = model_names.hf_image_conflict(entry.get("config") or {}, data)
            if problem:
                raise ConfigError(f"model entry {model_names.name_of(entry, index)}: {problem}")


def _image_folder_sizes(
    config: Mapping[str, Any], folder_listings: str | os.PathLike | None
) -> tuple[datasets.ImageFolderSizes, Callable[[], None]]:
    """The image folder's split sizes (its kept listing's counts while the folder is unchanged)
    and what keeps its listing; an empty folder, or no held-out image when training validates,
    is an error."""
    dataset = config["dataset"]
    path = dataset["path"]
    try:
        counts, keep = folder_index.image_folder_counts(path, folder_listings)
    except datasets.ImageFolderError as exc:
        raise ConfigError(f"config key dataset.path: {exc}") from exc
    sizes = datasets.image_folder_sizes(counts, dataset["val_fraction"])
    if not sum(counts.train):
        kinds = ", ".join(datasets.IMAGE_EXTENSIONS)
        where = "class subfolders" if counts.val is None else "training class subfolders"
        raise ConfigError(f"config key dataset.path: no image ({kinds}) in {where} of {path!r}")
    if "train" in config["modes"] and config["train"]["validate"] and not sizes.held_out:
        if counts.val is not None:
            raise ConfigError(
                f"config key dataset.path: {path!r} has a {datasets.VAL_FOLDER}/ folder with"
                " no image to validate on"
            )
        raise ConfigError(
            f"config key dataset.val_fraction: {dataset['val_fraction']} holds out none of"
            f" the {sizes.total} images in {path!r}: raise it, add a {datasets.VAL_FOLDER}/"
            " folder, or set train.validate: false"
        )
    return sizes, keep


def _text_samples(config: Mapping[str, Any], mode: str) -> tuple[int | None, str]:
    """The sequences of the split ``mode`` reads of a text read as bytes, at the longest
    sequence length (the fewest); None with a tokenizer (its count is the job's to know)."""
    dataset = config["dataset"]
    if dataset["tokenizer"] is not None:
        return None, ""
    length = max(config["sequence_lengths"])
    total = datasets.text_sequences(os.path.getsize(dataset["path"]), length)
    held = sum(datasets.text_held_out(total, dataset["val_fraction"]))
    samples = total - held if mode == "train" else total
    what = f"sequences of {length} bytes in {dataset['path']!r}"
    return samples, what


def _check_steps(
    config: Mapping[str, Any], mode: str, sizes: datasets.ImageFolderSizes | None
) -> None:
    """Every batch size of ``mode`` leaves a step to measure after the warm-up, where the split
    it reads has a size known now."""
    dataset = config["dataset"]
    name = dataset["name"]
    if name in ("synthetic", "tokens"):
        samples, what = dataset["num_samples"], f"{name} samples (dataset.num_samples)"
    elif name == "text":
        samples, what = _text_samples(config, mode)
        if samples is None:
            return
    elif sizes is not None:
        if mode == "train":
            samples, what = sizes.train, f"training images in {dataset['path']!r}"
        else:
            samples, what = sizes.total, f"images in {dataset['path']!r}"
    else:
        samples = datasets.SPLIT_SAMPLES.get(name, {}).get(mode)
        what = f"{name} {datasets.work_split(name, mode)} samples"
        if samples is None:
            return
    check_steps(config, mode, samples, what)


def check_steps(config: Mapping[str, Any], mode: str, samples: int, what: str) -> None:
    """Every batch size of ``mode`` leaves a step to measure after the warm-up over ``samples``
    (``what`` they are, for the message); ``config`` has its defaults. The model-check job
    calls it for data whose size only a job can know (a ``python`` dataset)."""
    warmup = config["measure"]["warmup_steps"]
    epochs = config["train"]["epochs"] if mode == "train" else 1
    accumulation = config["train"]["accumulation_steps"] if mode == "train" else [1]
    per_epoch = -(-(warmup + 1) // epochs)  # steps each epoch must give
    for number, batch in enumerate(config["batch_sizes"]):
        for steps in accumulation:
            if (samples // (batch * steps)) * epochs > warmup:
                continue
            per_step = f"{batch} x {steps} accumulation steps" if steps > 1 else f"{batch}"
            largest = samples // (steps * per_epoch)
            hint = f"the largest that does is {largest}" if largest else "no batch size does"
            raise ConfigError(
                f"config key batch_sizes[{number}]: {mode} batches of {per_step} give"
                f" {samples // (batch * steps) * epochs} steps over the {samples} {what}"
                f"{f' ({epochs} epochs)' if epochs > 1 else ''}, not more than the"
                f" measure.warmup_steps={warmup}: nothing would be measured; {hint}"
            )
