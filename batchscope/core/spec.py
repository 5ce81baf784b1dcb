"""The run spec: everything one benchmark process needs to measure one grid point.

A :class:`RunSpec` is built once, by :func:`build`, from the validated config (whose defaults
the schema filled) and the job's grid point; the workflow writes it as JSON and the benchmark
process (``python -m batchscope.bench SPEC.json``) reads it whole. Its sections mirror the
config's (``dataset``, ``measure``, ``compute``, ``loader``, ``train``), and no field has a
default: a setting's default lives in ``workflow/schemas/config.schema.yaml`` only.

Adding a setting means: its schema entry, its field here (and in :func:`build` if it is not in
a section that is copied whole), and the code that uses it.

``batch_size`` is always the micro-batch, the samples of one forward pass;
``effective_batch_size`` is the samples of one optimizer update.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from batchscope.core import datasets, model_entries, paths, results
from batchscope.core.grid import MODES
from batchscope.core.model_entries import ModelSpec

#: What a job measures: a grid point, the compute-only ceiling of one, or one trial of the
#: largest-batch search.
KINDS = ("bench", "ceiling", "trial")

#: Bumped when a field changes meaning; a spec of another version is refused.
SPEC_VERSION = 1


class SpecError(ValueError):
    """A spec file or mapping that does not describe a run; the message is one line."""


@dataclass(frozen=True)
class SyntheticSpec:
    """Deterministic random images (``dataset: synthetic``, and every ceiling run)."""

    channels: int
    image_size: int
    num_classes: int
    num_samples: int


@dataclass(frozen=True)
class ImagePipelineSpec:
    """How an image folder's files become tensors (the config's resize, crop, normalize,
    decoder): what a service does to each image, measured as it does it."""

    #: an int (the shorter side, aspect kept) or [height, width]; None: ``image_size`` square
    resize: int | list[int] | None
    #: a centre crop of this side, after the resize
    crop: int | None
    #: ``imagenet`` or ``{mean, std}`` per channel; None leaves [0, 1]
    normalize: str | dict | None
    #: ``pil`` or ``torchvision`` (:data:`batchscope.core.datasets.DECODERS`)
    decoder: str


@dataclass(frozen=True)
class PythonDatasetSpec:
    """The user's own Datasets (``dataset: python``): the factory that returns them."""

    #: ``file.py:function`` (absolute file) or ``package.module:function``
    factory: str
    kwargs: dict[str, Any]
    #: the factory's file, hashed so that an edit reruns the jobs that read it
    file_sha256: str | None
    #: the models' outputs; targets are 0 .. num_classes - 1
    num_classes: int


@dataclass(frozen=True)
class TokensSpec:
    """Token ids (``dataset: tokens`` or ``text``); each sample is ``RunSpec.sequence_length``
    ids long."""

    #: tokens: samples per split; text: None (the file's length decides)
    num_samples: int | None
    #: tokens: ids are drawn below it; None takes the model's config's ``vocab_size``
    vocab_size: int | None
    #: text: the text file (absolute) and the local tokenizer folder (None: UTF-8 bytes)
    path: str | None
    tokenizer: str | None
    #: text: the file's sha256, so that a changed text reruns the jobs that read it
    sha256: str | None
    #: text: one sha256 over the tokenizer folder's files (None: UTF-8 bytes), likewise
    tokenizer_sha256: str | None


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    #: the prepared folder (``download_dataset``'s output); None for synthetic data
    root: str | None
    #: resize to this side (None keeps the dataset's own)
    image_size: int | None
    synthetic: SyntheticSpec | None
    #: image folders: share of each class held out for validation (a val/ folder overrides it);
    #: None for the other datasets, whose splits are their own (text: its share of sequences)
    val_fraction: float | None
    #: image folders only: the preprocessing and decoder
    pipeline: ImagePipelineSpec | None
    #: ``python`` only: the factory of the Datasets
    python: PythonDatasetSpec | None
    #: token datasets (tokens, text); None for images
    tokens: TokensSpec | None


@dataclass(frozen=True)
class MeasureSpec:
    warmup_steps: int
    repeats: int
    min_steps: int
    min_seconds: float
    peak_tflops: float | None
    diagnostic_steps: int


@dataclass(frozen=True)
class ComputeSpec:
    precision: str
    channels_last: bool
    compile: bool


@dataclass(frozen=True)
class LoaderSpec:
    pin_memory: bool
    non_blocking: bool
    prefetch_factor: int
    persistent_workers: bool


@dataclass(frozen=True)
class TrainSpec:
    epochs: int
    optimizer: str
    lr: float
    momentum: float
    weight_decay: float
    #: ``auto``, ``cross_entropy``, ``mse``, ``model`` or ``file.py:function`` (absolute file)
    loss: str
    #: a ``file.py:function`` loss's file, hashed so that an edit reruns the jobs that use it
    loss_file_sha256: str | None
    val_batch_size: int
    lr_scaling: str
    base_batch_size: int | None
    lr_warmup_steps: int
    lr_warmup_epochs: float | None
    lr_decay: str
    eval_every_samples: int | None
    target_accuracy: float | None
    target_loss: float | None
    noise_scale_every_steps: int | None
    eval_samples: int | None
    stop_at_target: bool
    #: validate on the held-out split after training (``train.validate``; off for ceiling runs)
    validate: bool


@dataclass(frozen=True)
class RunSpec:
    kind: str
    mode: str
    #: the model's name (paths, tables); ``model_entry`` says what it is and how to build it
    model: str
    model_entry: ModelSpec
    batch_size: int
    accumulation_steps: int
    num_workers: int
    #: data-parallel processes (one device each); batch_size and num_workers are per device
    devices: int
    seed: int
    #: token ids per sample (token datasets); None for images
    sequence_length: int | None
    #: which independent measurement of this grid point (1-based): rounds measure alike; a
    #: throughput run's diagnostic steps and validation come in round 1 only (once_per_point)
    round: int
    device: str
    deterministic: bool
    #: cap on the run's steps, warm-up included (the mode's ``max_steps``)
    max_steps: int | None
    cpu_memory_budget_mb: float | None
    dataset: DatasetSpec
    measure: MeasureSpec
    compute: ComputeSpec
    loader: LoaderSpec
    #: training settings; None for inference
    train: TrainSpec | None
    #: one of train.predict's short runs: at most ``train.predict_steps`` updates, measuring
    #: the throughput (and under ``noise_scale`` the early noise scale), never the target
    short: bool = False
    spec_version: int = field(default=SPEC_VERSION)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError(f"spec kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        if self.mode not in MODES:
            raise SpecError(f"spec mode {self.mode!r}: expected train or infer")
        if (self.train is None) != (self.mode == "infer"):
            raise SpecError("spec train: needed for mode train, and only for it")
        if self.mode == "infer" and self.accumulation_steps != 1:
            raise SpecError("spec accumulation_steps: a training setting, inference runs use 1")
        if min(self.batch_size, self.accumulation_steps, self.round) < 1 or self.num_workers < 0:
            raise SpecError("spec batch_size, accumulation_steps, round must be >= 1, workers >= 0")
        if self.devices < 1 or (self.devices > 1 and self.kind != "bench"):
            raise SpecError("spec devices: >= 1, and more than 1 only for a bench run")

    @property
    def throughput_run(self) -> bool:
        """A run that only measures speed (inference, or training with no target and no
        validation during training): it ends once its time-based windows are full."""
        train = self.train
        if train is None:
            return True
        return (
            train.target_accuracy is None
            and train.target_loss is None
            and train.eval_every_samples is None
        )

    @property
    def once_per_point(self) -> bool:
        """Whether this run also does what its grid point needs once, not in every round:
        after a throughput run's windows, the diagnostic steps (the ``time_*_ms`` breakdown)
        and the validation after training run in round 1 only (of each seed); later rounds
        measure the same steps and end with their windows. A run towards a target, whose
        evaluations are part of what it measures, validates in every round."""
        return self.round == 1 or not self.throughput_run

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer update (and per loader batch): micro-batch × accumulation."""
        return self.batch_size * self.accumulation_steps

    @property
    def global_batch_size(self) -> int:
        """Samples per optimizer update over all devices: the effective batch × devices."""
        return self.effective_batch_size * self.devices

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Canonical JSON (sorted keys): equal specs give equal text, hence equal hashes."""
        return results.canonical_json(self.to_dict())

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        if data.get("spec_version", SPEC_VERSION) != SPEC_VERSION:
            raise SpecError(
                f"spec_version {data.get('spec_version')!r}: this batchscope reads {SPEC_VERSION}"
            )
        return _from_mapping(cls, data, "spec")

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def read(cls, path: str) -> RunSpec:
        try:
            with open(path, encoding="utf-8") as handle:
                return cls.from_json(handle.read())
        except (OSError, json.JSONDecodeError) as exc:
            raise SpecError(f"run spec {path}: {exc}") from None


def _from_mapping(cls: type, data: Mapping[str, Any], where: str):
    """``cls(**data)``, recursing into fields that are specs themselves; a missing or unknown
    key is a one-line :class:`SpecError` naming it."""
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}: unknown key")
    values = {}
    for name, spec_field in fields.items():
        if name not in data:
            if spec_field.default is dataclasses.MISSING:
                raise SpecError(f"{where}.{name}: missing")
            continue
        nested = _spec_class(hints[name])
        value = data[name]
        if nested is not None and value is not None:
            value = _from_mapping(nested, value, f"{where}.{name}")
        values[name] = value
    return cls(**values)


def _spec_class(hint: Any) -> type | None:
    """The spec dataclass inside a type hint such as ``TrainSpec | None``, if any."""
    for candidate in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    return None


# --------------------------------------------------------------------------- from the config


def _section(cls: type, values: Mapping[str, Any], **overrides: Any):
    """A spec section from the config section of the same name (schema defaults filled)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**{name: values.get(name) for name in names if name not in overrides}, **overrides)


def dataset_spec(config: Mapping[str, Any]) -> DatasetSpec:
    """The sweep's data: the prepared folder, or the synthetic images' shape."""
    cfg = config["dataset"]
    name = cfg["name"]
    synthetic = None
    if name == "synthetic":
        synthetic = SyntheticSpec(
            channels=cfg["channels"],
            image_size=cfg.get("image_size") or datasets.SYNTHETIC_DEFAULT_SIZE,
            num_classes=cfg["num_classes"],
            num_samples=cfg["num_samples"],
        )
    tokens = None
    if datasets.is_tokens(name):
        text = name == "text"
        tokenizer = cfg.get("tokenizer") if text else None
        tokens = TokensSpec(
            num_samples=None if text else cfg["num_samples"],
            vocab_size=None if text else cfg.get("vocab_size"),
            path=os.path.abspath(cfg["path"]) if text else None,
            tokenizer=os.path.abspath(tokenizer) if tokenizer else None,
            sha256=model_entries.sha256_of(os.path.abspath(cfg["path"])) if text else None,
            tokenizer_sha256=model_entries.folder_sha256(tokenizer) if tokenizer else None,
        )
    prepared = name not in ("synthetic", datasets.PYTHON) and tokens is None
    root = paths.DATASET_DIR.format(dataset=name) if prepared else None
    val_fraction = cfg["val_fraction"] if name in ("imagefolder", "text") else None
    pipeline = None
    if name == "imagefolder":
        pipeline = ImagePipelineSpec(
            resize=cfg.get("resize"),
            crop=cfg.get("crop"),
            normalize=cfg.get("normalize"),
            decoder=cfg["decoder"],
        )
    return DatasetSpec(
        name=name,
        root=root,
        image_size=None if tokens else cfg.get("image_size"),
        synthetic=synthetic,
        val_fraction=val_fraction,
        pipeline=pipeline,
        python=python_dataset_spec(cfg) if name == datasets.PYTHON else None,
        tokens=tokens,
    )


def python_dataset_spec(cfg: Mapping[str, Any], dirs: list[str] | None = None) -> PythonDatasetSpec:
    """A ``python`` dataset's factory, its file found (``dirs``, else the working directory:
    the workflow makes the path absolute first) and hashed; :class:`model_entries.ModelEntryError`
    names the dataset when it is not there."""
    factory, sha = model_entries.resolve_factory(
        "dataset python", cfg["factory"], dirs or [os.getcwd()]
    )
    return PythonDatasetSpec(
        factory=factory,
        kwargs=dict(cfg.get("kwargs") or {}),
        file_sha256=sha,
        num_classes=cfg["num_classes"],
    )


def synthetic_twin(config: Mapping[str, Any], mode: str) -> DatasetSpec:
    """Synthetic tensors of the sweep's data's shape, as many as the mode's split has (where
    known): what a compute-only ceiling run computes on. A ``python`` dataset's shape is known
    only once it is built: its ceiling computes on its own first samples, put on the device
    before the clock like the twin's."""
    name = config["dataset"]["name"]
    if name == datasets.PYTHON:
        return dataset_spec(config)
    shape = dict(datasets.SHAPES[name])
    cfg = config["dataset"]
    size = datasets.pipeline_image_size(cfg.get("resize"), cfg.get("crop")) or cfg.get("image_size")
    if size:
        shape["image_size"] = size
    samples = datasets.SPLIT_SAMPLES.get(name, {}).get(mode, datasets.UNKNOWN_SPLIT_SAMPLES)
    synthetic = SyntheticSpec(**shape, num_samples=samples)
    return DatasetSpec(
        name="synthetic",
        root=None,
        image_size=None,
        synthetic=synthetic,
        val_fraction=None,
        pipeline=None,
        python=None,
        tokens=None,
    )


def build(
    config: Mapping[str, Any],
    *,
    kind: str = "bench",
    mode: str,
    model: str,
    batch_size: int,
    accumulation_steps: int = 1,
    num_workers: int,
    seed: int,
    round: int = 1,
    short: bool = False,
    devices: int = 1,
    sequence_length: int | None = None,
) -> RunSpec:
    """The spec of one job, from the validated config (defaults filled) and its grid point.

    A ``ceiling`` run computes on synthetic tensors of the data's shape with no workers, no
    validation and none of the convergence machinery; a ``trial`` (``batch_sizes: auto``) is
    the sweep's own workload, which the largest-batch search shortens per trial. A ``short``
    training run (``train.predict``) trains at most ``train.predict_steps`` updates: under the
    ``noise_scale`` calibration all of them, with no validation until the one after training,
    measuring the throughput and the noise scale early on; under the others it measures the
    throughput only (``SHORT_THROUGHPUT_OFF``) and ends once its windows are full.
    Token data needs its ``sequence_length`` (one of ``sequence_lengths``); images take None.
    """
    tokens = datasets.is_tokens(config["dataset"]["name"])
    if tokens != (sequence_length is not None):
        raise SpecError("spec sequence_length: needed for token datasets, and only for them")
    train = None
    if mode == "train":
        validate = kind != "ceiling" and config["train"]["validate"]
        train = _section(
            TrainSpec,
            config["train"],
            validate=validate,
            loss_file_sha256=model_entries.loss_file_sha256(config["train"]["loss"]),
        )
        if kind == "ceiling":
            train = replace(train, **CEILING_TRAIN_OFF)
    max_steps = config[mode]["max_steps"]
    measure = _section(MeasureSpec, config["measure"])
    if short and train is not None:
        # here, not at the top: reading a spec (every benchmark process) imports no numpy
        from batchscope.core import prediction

        steps = config["train"]["predict_steps"]
        max_steps = steps if max_steps is None else min(max_steps, steps)
        if prediction.short_runs_measure_noise(config["train"]["predict_calibration"]):
            train = replace(train, eval_every_samples=None, stop_at_target=False)
        else:
            train = replace(train, **SHORT_THROUGHPUT_OFF)
            measure = replace(measure, diagnostic_steps=0)
    return RunSpec(
        kind=kind,
        mode=mode,
        model=model,
        model_entry=model_entries.find(config["models"], model),
        batch_size=int(batch_size),
        accumulation_steps=int(accumulation_steps),
        num_workers=int(num_workers),
        devices=int(devices),
        seed=int(seed),
        sequence_length=None if sequence_length is None else int(sequence_length),
        round=int(round),
        device=config["device"],
        deterministic=config["deterministic"],
        max_steps=max_steps,
        cpu_memory_budget_mb=None if kind == "ceiling" else config["cpu_memory_budget_mb"],
        dataset=synthetic_twin(config, mode) if kind == "ceiling" else dataset_spec(config),
        measure=measure,
        compute=_section(ComputeSpec, config["compute"]),
        loader=_section(LoaderSpec, config["loader"]),
        train=train,
        short=bool(short and train is not None),
    )


#: The convergence machinery a throughput-only training run leaves out: no target, no
#: validation during training, no noise scale (``RunSpec.throughput_run``).
NO_CONVERGENCE = {
    "eval_every_samples": None,
    "target_accuracy": None,
    "target_loss": None,
    "noise_scale_every_steps": None,
    "eval_samples": None,
    "stop_at_target": False,
}

#: What a short run of train.predict leaves out when it measures the throughput only (every
#: calibration but noise_scale, whose short runs measure the noise scale early in training):
#: the convergence machinery and the validation after training, so it ends once its windows
#: are full, or at predict_steps updates if that comes first.
SHORT_THROUGHPUT_OFF = {**NO_CONVERGENCE, "validate": False}

#: What a ceiling run leaves out of training: it measures the model's compute alone.
CEILING_TRAIN_OFF = {
    "lr_scaling": "none",
    "base_batch_size": None,
    "lr_warmup_steps": 0,
    "lr_warmup_epochs": None,
    "lr_decay": "constant",
    **NO_CONVERGENCE,
}


@dataclass(frozen=True)
class SearchSpec:
    """The largest-batch search of one mode × model: the trial's workload and the search's
    own settings (the config's ``maxbatch`` section)."""

    run: RunSpec
    margin: float
    cap: int
    start: int
    tolerance: float
    capacity_mb: float | None

    def to_json(self) -> str:
        return results.canonical_json(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSpec:
        return _from_mapping(cls, data, "search")

    @classmethod
    def read(cls, path: str) -> SearchSpec:
        try:
            with open(path, encoding="utf-8") as handle:
                return cls.from_dict(json.load(handle))
        except (OSError, json.JSONDecodeError) as exc:
            raise SpecError(f"search spec {path}: {exc}") from None


def build_search(config: Mapping[str, Any], *, mode: str, model: str) -> SearchSpec:
    """The search of ``batch_sizes: auto``: trials run the sweep's workload with its largest
    worker count, its largest accumulation (the whole loader batch, ``accumulation_steps``
    micro-batches, goes to the device at once) and the first seed, capped so that the sweep's
    own run of the found size still has a step to measure after its warm-up."""
    run = build(
        config,
        kind="trial",
        mode=mode,
        model=model,
        batch_size=config["maxbatch"]["start"],
        accumulation_steps=_largest_accumulation(config, mode),
        num_workers=max(config["num_workers"]),
        seed=0,
        # the longest sequences: the batch found fits every sequence length of the sweep
        sequence_length=max(config["sequence_lengths"]) if _tokens(config) else None,
    )
    search = config["maxbatch"]
    return SearchSpec(
        run=run,
        margin=search["margin_frac"],
        cap=search_cap(config, mode),
        start=search["start"],
        tolerance=search["tolerance_frac"],
        capacity_mb=search["capacity_mb"],
    )


def _tokens(config: Mapping[str, Any]) -> bool:
    return datasets.is_tokens(config["dataset"]["name"])


def _largest_accumulation(config: Mapping[str, Any], mode: str) -> int:
    return max(config["train"]["accumulation_steps"]) if mode == "train" else 1


def search_cap(config: Mapping[str, Any], mode: str) -> int:
    """The configured cap, and no batch so large that the sweep's run of that size, at its
    largest accumulation (a loader batch of ``batch_size x accumulation_steps``), would have no
    step left to measure after its warm-up."""
    cap = config["maxbatch"]["cap"]
    name = config["dataset"]["name"]
    if name in ("synthetic", "tokens"):
        samples = config["dataset"]["num_samples"]
    else:
        samples = datasets.SPLIT_SAMPLES.get(name, {}).get(mode)
    if samples is not None:
        steps = config["measure"]["warmup_steps"] + 1
        cap = min(cap, samples // (steps * _largest_accumulation(config, mode)))
    return max(cap, 1)
