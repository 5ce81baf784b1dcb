"""The config's ``models`` entries: what each one names, and the :class:`ModelSpec` a run carries.

No torch: the workflow reads every entry before any job starts, so that a path that does not
exist or a name used twice is one line naming the entry; building the model is the benchmark
floor's (``batchscope.bench.models``). An entry is one of

- a plain name: ``small_cnn`` or a torchvision classification model (``resnet18``);
- ``timm:<name>``: a timm model, built with ``pretrained=False`` (named ``timm_<name>``);
- a mapping with a ``name`` and one source: ``model`` (a plain name), ``timm``, ``factory``
  (``file.py:function`` or ``package.module:function``, returning an ``nn.Module``) or ``hf``
  (a transformers model type, or a local folder with ``config.json``), plus ``kwargs``,
  ``weights`` (a local state_dict or checkpoint), and for ``hf`` its ``task`` and ``config``.

Relative paths are looked up in the config file's folder, then the working directory. Nothing
here reads more of a file than its bytes for a hash: the weights' sha256 (and the factory
file's) are in the spec, so a changed checkpoint or model file reruns the jobs it feeds. A model
built from a file or folder is identified in results (``model_id``) by its path relative to
where it was found plus the start of its hash (:func:`file_model_id`), not by its absolute path,
so that the same sweep run from two checkouts gives rows that match.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SMALL_CNN = "small_cnn"

#: Where a model comes from (``model_source`` in a result).
SOURCES = ("builtin", "torchvision", "timm", "factory", "hf")

#: What a Hugging Face model is built for: the tasks that read token ids, and those that read
#: images (``pixel_values``, N x C x H x W).
HF_TOKEN_TASKS = ("causal_lm", "sequence_classification")
HF_IMAGE_TASKS = ("image_classification",)
HF_TASKS = HF_TOKEN_TASKS + HF_IMAGE_TASKS


def reads_token_ids(entry: Any) -> bool:
    """Whether a config entry's model reads token ids: a Hugging Face model of a token task (a
    factory may read either; the model check finds out)."""
    return (
        isinstance(entry, Mapping)
        and bool(entry.get("hf"))
        and (entry.get("task") in HF_TOKEN_TASKS)
    )


#: What a Hugging Face image classifier's config takes from the data: ``num_labels`` always,
#: ``num_channels`` and ``image_size`` where the model's config has them; what each counts.
HF_IMAGE_KEYS = {"num_labels": "classes", "num_channels": "channels", "image_size": "px a side"}


def hf_image_conflict(overrides: Mapping[str, Any], data: Mapping[str, int | None]) -> str | None:
    """The first of an image classifier's ``config`` overrides that contradicts the data
    (``data``: each of :data:`HF_IMAGE_KEYS` to the data's value, None where not known), in a
    few words; None when none does. A square ``image_size`` may be given as ``[side, side]``."""
    for key, unit in HF_IMAGE_KEYS.items():
        asked, value = overrides.get(key), data.get(key)
        if asked is None or value is None:
            continue
        square = key == "image_size" and isinstance(asked, list | tuple) and set(asked) == {value}
        if asked != value and not square:
            return (
                f"its config sets {key}={asked}, and the sweep's data gives {value} ({unit})"
                f" (leave {key} out: it is taken from the data)"
            )
    return None


#: A model's name, as paths, plots and tables use it.
NAME = re.compile(r"[A-Za-z0-9_]+")

#: The keys of a mapping entry that say where the model comes from (one of them).
SOURCE_KEYS = {"model": None, "timm": "timm", "factory": "factory", "hf": "hf"}


class ModelEntryError(ValueError):
    """A ``models`` entry the workflow cannot run; the message is one line naming the entry."""


@dataclass(frozen=True)
class ModelSpec:
    """One model of the sweep, resolved: what a benchmark process builds, and how."""

    #: the name in paths, plots and tables
    name: str
    #: one of :data:`SOURCES`
    source: str
    #: the built-in or torchvision name, the timm name, ``file.py:function`` (absolute file)
    #: or ``package.module:function``, the Hugging Face model type or local folder (absolute):
    #: what the job builds; a result records ``model_id``
    id: str
    #: keyword arguments for the builder; for ``hf``, the overrides of the model's config
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: a local state_dict or checkpoint to load (absolute path), or None
    weights: str | None = None
    weights_sha256: str | None = None
    #: the factory's file (``file.py:function`` form), hashed so that an edit reruns its jobs
    file_sha256: str | None = None
    #: ``hf`` only: one of :data:`HF_TASKS`
    task: str | None = None
    #: what a result records (``model_id``): ``id``, but for a factory file or a Hugging Face
    #: folder its travelling form (:func:`file_model_id`); left out, ``id``
    model_id: str = ""

    def __post_init__(self) -> None:
        if not self.model_id:
            object.__setattr__(self, "model_id", self.id)


def derived_name(text: str) -> str:
    """The name of a short form: ``timm:convnext_atto`` -> ``timm_convnext_atto``."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def name_of(entry: Any, index: int = 0) -> str:
    """The name an entry gives its model (no file is read)."""
    if isinstance(entry, str):
        return derived_name(entry)
    if isinstance(entry, Mapping):
        if entry.get("name"):
            return str(entry["name"])
        if entry.get("model"):
            return derived_name(str(entry["model"]))
        if entry.get("timm"):
            return derived_name(f"timm:{entry['timm']}")
    return f"models[{index}]"


def names(entries: Iterable[Any]) -> list[str]:
    return [name_of(entry, i) for i, entry in enumerate(entries)]


def parse_all(entries: Sequence[Any], base_dirs: Sequence[str] | None = None) -> list[ModelSpec]:
    """Every entry resolved (paths found, files hashed), names unique."""
    specs = [parse(entry, i, base_dirs) for i, entry in enumerate(entries)]
    seen: dict[str, int] = {}
    for i, spec in enumerate(specs):
        if spec.name in seen:
            raise ModelEntryError(
                f"model entry {spec.name}: the name of models[{seen[spec.name]}] too;"
                " give each entry its own `name`"
            )
        seen[spec.name] = i
    return specs


def find(entries: Sequence[Any], name: str, base_dirs: Sequence[str] | None = None) -> ModelSpec:
    """The resolved entry called ``name``; a plain name no entry has stands for itself."""
    for i, entry in enumerate(entries):
        if name_of(entry, i) == name:
            return parse(entry, i, base_dirs)
    return parse(name)


def parse(entry: Any, index: int = 0, base_dirs: Sequence[str] | None = None) -> ModelSpec:
    """One entry as a :class:`ModelSpec`; :class:`ModelEntryError` names the entry."""
    label = name_of(entry, index)
    dirs = list(base_dirs) if base_dirs else [os.getcwd()]
    if isinstance(entry, str):
        if entry.startswith("timm:"):
            return ModelSpec(name=label, source="timm", id=entry.removeprefix("timm:"))
        return ModelSpec(name=label, source=_plain_source(entry), id=entry)
    if not isinstance(entry, Mapping):
        raise ModelEntryError(f"model entry {label}: a name or a mapping, not {entry!r}")
    given = [key for key in SOURCE_KEYS if entry.get(key)]
    if len(given) != 1:
        raise ModelEntryError(
            f"model entry {label}: give exactly one of model, timm, factory, hf"
            + (f" (has {', '.join(given)})" if given else "")
        )
    key = given[0]
    if key in ("factory", "hf") and not entry.get("name"):
        raise ModelEntryError(f"model entry {label}: a {key} entry needs a `name`")
    if not NAME.fullmatch(label):
        raise ModelEntryError(f"model entry {label}: a name is letters, digits and _ only")
    if key == "hf":
        if entry.get("task") not in HF_TASKS:
            raise ModelEntryError(
                f"model entry {label}: `task` is one of {', '.join(HF_TASKS)}"
                f" (got {entry.get('task')!r})"
            )
        if entry.get("kwargs"):
            raise ModelEntryError(f"model entry {label}: an hf entry takes `config`, not `kwargs`")
    else:
        for only_hf in ("task", "config"):
            if only_hf in entry:
                raise ModelEntryError(f"model entry {label}: `{only_hf}` is for hf entries only")
    source = SOURCE_KEYS[key] or _plain_source(str(entry[key]))
    built, file_sha, model_id = _resolved_source(label, key, str(entry[key]), dirs)
    kwargs = dict(entry.get("config" if key == "hf" else "kwargs") or {})
    weights = entry.get("weights")
    if weights:
        weights = _existing(f"model entry {label}", "weights file", str(weights), dirs)
        if not os.path.isfile(weights):
            raise ModelEntryError(f"model entry {label}: weights {weights!r} is not a file")
    return ModelSpec(
        name=label,
        source=source,
        id=built,
        kwargs=kwargs,
        weights=weights or None,
        weights_sha256=sha256_of(weights) if weights else None,
        file_sha256=file_sha,
        task=entry.get("task"),
        # as_entry's entries carry the model_id found from the config's folder: kept
        model_id=entry.get("model_id") or model_id,
    )


def _resolved_source(
    label: str, key: str, text: str, dirs: Sequence[str]
) -> tuple[str, str | None, str]:
    """What a mapping entry's source key gives: the id to build (files found, absolute), the
    factory file's sha256, and the ``model_id`` a result records ("" when it is the id)."""
    if key == "factory":
        built, file_sha = resolve_factory(f"model entry {label}", text, dirs)
        if file_sha is None:  # package.module:function
            return built, None, ""
        where, _, function = built.rpartition(":")
        return built, file_sha, file_model_id(where, dirs, file_sha, function)
    if key == "hf" and _looks_like_path(text):
        folder = _existing(f"model entry {label}", "hf folder", text, dirs)
        return folder, None, file_model_id(folder, dirs, folder_sha256(folder))
    return text, None, ""


#: The training losses the config names (``train.loss``); else ``file.py:function``.
LOSSES = ("auto", "cross_entropy", "mse", "model")


def resolve_loss(loss: str, base_dirs: Sequence[str] | None = None) -> str:
    """``train.loss`` with a ``file.py:function``'s file found (absolute); the named losses as
    they are. :class:`ModelEntryError` when the file is not there."""
    if loss in LOSSES:
        return loss
    where, _, function = loss.rpartition(":")
    dirs = list(base_dirs) if base_dirs else [os.getcwd()]
    try:
        return f"{_existing('train.loss', 'file', where, dirs)}:{function}"
    except ModelEntryError as exc:
        message = str(exc).replace("model entry train.loss", "config key train.loss")
        raise ModelEntryError(message) from None


def loss_file_sha256(loss: str) -> str | None:
    """The sha256 of a resolved ``file.py:function`` loss's file (None for the named losses and
    ``package.module:function``), so that an edit reruns the training jobs that use it."""
    where = loss.rpartition(":")[0]
    return sha256_of(where) if loss not in LOSSES and os.path.isfile(where) else None


def folder_sha256(folder: str) -> str:
    """One sha256 over a folder's files (their paths relative to it, and their bytes), so that a
    changed tokenizer reruns the jobs that read it."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode() + b"\0")
            digest.update(sha256_of(path).encode())
    return digest.hexdigest()


#: Hex digits of a file's sha256 that a ``model_id`` keeps: enough to tell two versions apart.
MODEL_ID_SHA_HEX = 12


def travelling_path(path: str, dirs: Sequence[str]) -> str:
    """An absolute ``path`` as it reads from any checkout: relative to the first of ``dirs`` (the
    config file's folder, then the working directory) that holds it, with ``/``; its basename
    when none does (a file kept elsewhere, the same in every checkout)."""
    for folder in dirs:
        relative = os.path.relpath(path, os.path.abspath(folder))
        if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
            return relative.replace(os.sep, "/")
    return os.path.basename(os.path.normpath(path))


def file_model_id(path: str, dirs: Sequence[str], sha256: str, function: str | None = None) -> str:
    """The ``model_id`` of a model built from a file or folder (``path``, absolute, whose hash is
    ``sha256``): its :func:`travelling_path`, the factory's ``function``, and the first
    :data:`MODEL_ID_SHA_HEX` hex digits of the hash (``models/net.py:build@sha256:1a2b3c4d5e6f``):
    the same from two checkouts in different folders, and another when the file changes."""
    named = travelling_path(path, dirs) + (f":{function}" if function else "")
    return f"{named}@sha256:{sha256[:MODEL_ID_SHA_HEX]}"


def _plain_source(name: str) -> str:
    return "builtin" if name == SMALL_CNN else "torchvision"


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.startswith(".") or text.endswith(".py")


def resolve_factory(owner: str, text: str, dirs: Sequence[str]) -> tuple[str, str | None]:
    """``file.py:function`` with the file found (absolute) and hashed, or
    ``package.module:function`` as it is (imported by the job). ``owner`` starts the one-line
    error (``model entry mynet``, ``dataset python``)."""
    where, sep, function = text.rpartition(":")
    if not sep or not where or not function.isidentifier():
        raise ModelEntryError(
            f"{owner}: factory {text!r} is not file.py:function or package.module:function"
        )
    if not _looks_like_path(where):
        return text, None
    path = _existing(owner, "factory file", where, dirs)
    return f"{path}:{function}", sha256_of(path)


def _existing(owner: str, what: str, path: str, dirs: Sequence[str]) -> str:
    """``path`` (absolute, or relative to the first of ``dirs`` that has it), absolute."""
    path = os.path.expanduser(path)
    candidates = [path] if os.path.isabs(path) else [os.path.join(d, path) for d in dirs]
    for candidate in candidates:
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    looked = ", ".join(dict.fromkeys(os.path.dirname(os.path.abspath(c)) for c in candidates))
    raise ModelEntryError(f"{owner}: {what} {path!r} not found (looked in {looked})")


_HASHES: dict[tuple[str, int, int], str] = {}


def sha256_of(path: str) -> str:
    """The file's sha256, remembered per size and modification time (the workflow builds one
    spec per job from the same entries)."""
    stat = os.stat(path)
    key = (path, stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def as_entry(spec: ModelSpec) -> dict[str, Any]:
    """The mapping entry that :func:`parse` turns back into ``spec`` (paths absolute, and the
    ``model_id`` they were given from the config's folder, which parse keeps)."""
    key = {"builtin": "model", "torchvision": "model"}.get(spec.source, spec.source)
    entry: dict[str, Any] = {"name": spec.name, key: spec.id}
    if spec.model_id != spec.id:
        entry["model_id"] = spec.model_id
    if spec.kwargs:
        entry["config" if spec.source == "hf" else "kwargs"] = dict(spec.kwargs)
    if spec.weights:
        entry["weights"] = spec.weights
    if spec.task:
        entry["task"] = spec.task
    return entry
