"""Models: a small built-in CNN, a torchvision or timm model by name, the user's own factory, or
a Hugging Face transformer (the config's ``models`` entries, :mod:`batchscope.core.model_entries`).

torchvision, timm and transformers are imported only to build one of their models: the small
CNN needs torch alone. Nothing is downloaded: weights come only from local files. Every mistake
in an entry is a :class:`ModelError`, one line naming the entry.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
from typing import Any

import torch
from torch import nn

from batchscope.core.model_entries import SMALL_CNN, ModelSpec, hf_image_conflict


class ModelError(ValueError):
    """A model entry that cannot be built, loaded or fed; one line naming the entry."""


class SmallCNN(nn.Module):
    """Two conv blocks and a linear head: cheap enough to sweep on a laptop CPU.

    Works for any channel count and any image size of at least 4 pixels (adaptive pooling).
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, kernel_size=3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(4),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * width * 16, 128),
            nn.ReLU(inplace=True),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def available_models() -> list[str]:
    """Every name :func:`build_model` accepts."""
    import torchvision

    return [SMALL_CNN, *torchvision.models.list_models(module=torchvision.models)]


def needs_torchvision(name: str) -> bool:
    """Whether building model ``name`` imports torchvision (every model but the small CNN)."""
    return name != SMALL_CNN


def input_channels(model_name: str, dataset_channels: int) -> int:
    """Channels the model expects: the small CNN takes the data as it is, torchvision models RGB."""
    return dataset_channels if model_name == SMALL_CNN else 3


def build_model(name: str, *, num_classes: int, in_channels: int) -> nn.Module:
    """Build an untrained model: no weights are downloaded, the numbers measure speed."""
    if name == SMALL_CNN:
        return SmallCNN(in_channels=in_channels, num_classes=num_classes)
    import torchvision

    known = torchvision.models.list_models(module=torchvision.models)
    if name not in known:
        raise ValueError(f"unknown model {name!r}: use {SMALL_CNN!r} or a torchvision name")
    if in_channels != 3:
        raise ValueError(f"torchvision model {name!r} takes 3 input channels, not {in_channels}")
    return torchvision.models.get_model(name, weights=None, num_classes=num_classes)


def logits_of(output) -> torch.Tensor:
    """The logits of a forward pass; inception-style models return a tuple in train mode."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output[0]


# --------------------------------------------------------------------------- model entries


def _error(entry: ModelSpec, message: str) -> ModelError:
    return ModelError(f"model entry {entry.name}: {' '.join(str(message).split())}")


def import_for(entry: ModelSpec) -> None:
    """Import the library that builds ``entry`` (before a job's clock starts)."""
    if entry.source == "torchvision":
        import torchvision.models  # noqa: F401
    elif entry.source == "timm":
        _optional(entry, "timm")
    elif entry.source == "hf":
        _optional(entry, "transformers")


def _optional(entry: ModelSpec, package: str):
    """An optional dependency (the `models` extra), or a one-line error saying how to get it."""
    if package == "transformers":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is ever downloaded
    try:
        return importlib.import_module(package)
    except ImportError:
        raise _error(
            entry, f"{package} is not installed: pip install 'batchscope[models]'"
        ) from None


def entry_input_channels(entry: ModelSpec, dataset_channels: int) -> int:
    """Channels the model is fed: torchvision models take RGB (1-channel data is repeated to
    3), every other model the data as it is (timm models are built for its channels)."""
    return 3 if entry.source == "torchvision" else dataset_channels


def counts_flops_on_cpu(entry: ModelSpec) -> bool:
    """Whether FLOPs are counted on a CPU copy (the small CNN: milliseconds, no imports) rather
    than on the meta device (no memory, whatever the model's size)."""
    return entry.source == "builtin"


def build(
    entry: ModelSpec, *, num_classes: int, in_channels: int, image_size: int | None = None
) -> nn.Module:
    """Build an entry's model, untrained (its weights are loaded by :func:`load_weights`).
    ``image_size`` (the side of the square images fed) sizes a Hugging Face image model."""
    if entry.source == "builtin":
        return SmallCNN(in_channels=in_channels, num_classes=num_classes, **entry.kwargs)
    if entry.source == "torchvision":
        if entry.kwargs:
            import torchvision

            kwargs = {"num_classes": num_classes, **entry.kwargs}
            return _call(entry, torchvision.models.get_model, entry.id, weights=None, **kwargs)
        return build_model(entry.id, num_classes=num_classes, in_channels=in_channels)
    if entry.source == "timm":
        return _timm(entry, num_classes, in_channels)
    if entry.source == "factory":
        return _checked_module(entry, _call(entry, _factory_function(entry), **entry.kwargs))
    if entry.source == "hf":
        return _hf(entry, num_classes, in_channels, image_size)
    raise _error(entry, f"unknown source {entry.source!r}")


def _call(entry: ModelSpec, function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except Exception as exc:
        raise _error(entry, f"building it raised {type(exc).__name__}: {exc}") from exc


def _checked_module(entry: ModelSpec, model: Any) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise _error(entry, f"the factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _factory_function(entry: ModelSpec):
    """The function of the entry's ``file.py:function`` or ``package.module:function``."""
    return import_function(
        entry.id, f"batchscope_factory_{entry.name}", lambda message: _error(entry, message)
    )


def import_function(text: str, module_name: str, error):
    """The function of ``file.py:function`` (the file's folder importable beside it, the file
    imported as ``module_name`` and registered under it, so that pickle finds its classes) or of
    ``package.module:function`` (importable from the working directory or installed).
    ``error(message)`` is the exception each mistake raises."""
    where, _, function = text.rpartition(":")
    if where.endswith(".py") or os.sep in where:
        if not os.path.isfile(where):
            raise error(f"factory file {where} not found")
        folder = os.path.dirname(where)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(module_name, where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise error(f"importing {where} raised {type(exc).__name__}: {exc}") from exc
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise error(f"factory module {where!r} not found ({exc})") from exc
        except Exception as exc:
            raise error(f"importing {where} raised {type(exc).__name__}: {exc}") from exc
    found = getattr(module, function, None)
    if not callable(found):
        names = [n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n])]
        close = difflib.get_close_matches(function, names, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise error(f"{where} has no function {function!r}{hint}")
    return found


def _timm(entry: ModelSpec, num_classes: int, in_channels: int) -> nn.Module:
    timm = _optional(entry, "timm")
    if not timm.is_model(entry.id):
        close = difflib.get_close_matches(entry.id, timm.list_models(), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise _error(entry, f"unknown timm model {entry.id!r}{hint}")
    kwargs = {"num_classes": num_classes, "in_chans": in_channels, **entry.kwargs}
    return _call(entry, timm.create_model, entry.id, pretrained=False, **kwargs)


def _hf_config(entry: ModelSpec):
    """The entry's Hugging Face config, its ``config`` overrides applied (nothing downloaded)."""
    transformers = _optional(entry, "transformers")
    folder = os.path.isdir(entry.id)
    try:
        if folder:
            config = transformers.AutoConfig.from_pretrained(
                entry.id, local_files_only=True, **entry.kwargs
            )
        else:
            config = transformers.AutoConfig.for_model(entry.id, **entry.kwargs)
    except (ValueError, OSError) as exc:
        known = list(transformers.CONFIG_MAPPING.keys())
        close = difflib.get_close_matches(entry.id, known, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close and not folder else ""
        raise _error(entry, f"no Hugging Face config for {entry.id!r}{hint}: {exc}") from exc
    return config


#: Keys of a Hugging Face config that give its longest sequence (the first one present).
MAX_POSITION_KEYS = ("n_positions", "max_position_embeddings", "n_ctx")


def token_facts(entry: ModelSpec) -> dict[str, Any]:
    """What token data needs of a model: ``task``, and from a Hugging Face config its
    ``vocab_size``, ``num_labels`` and ``max_positions`` (None where it has none); other models
    have no config (the dataset's ``vocab_size`` is their vocabulary)."""
    if entry.source != "hf":
        return {"task": None, "vocab_size": None, "num_labels": None, "max_positions": None}
    config = _hf_config(entry)
    longest = next((getattr(config, k) for k in MAX_POSITION_KEYS if hasattr(config, k)), None)
    return {
        "task": entry.task,
        "vocab_size": getattr(config, "vocab_size", None),
        "num_labels": config.num_labels if entry.task == "sequence_classification" else None,
        "max_positions": longest,
    }


def _hf_image_config(entry: ModelSpec, config, data: dict[str, int | None]) -> None:
    """Size an image classifier's config to the data (``data``:
    :data:`~batchscope.core.model_entries.HF_IMAGE_KEYS` to their values, None where not known): its
    ``num_labels``, and ``num_channels`` and ``image_size`` where the config has them (a side
    the config keeps as a list stays a list); an override in the entry's ``config`` that
    contradicts the data is an error naming the entry."""
    problem = hf_image_conflict(entry.kwargs, data)
    if problem:
        raise _error(entry, problem)
    for key, value in data.items():
        if value is None or (key != "num_labels" and not hasattr(config, key)):
            continue
        current = getattr(config, key, None)
        setattr(config, key, [value] * len(current) if isinstance(current, list | tuple) else value)


def _hf(entry: ModelSpec, num_classes: int, in_channels: int, image_size: int | None) -> nn.Module:
    transformers = _optional(entry, "transformers")
    folder = os.path.isdir(entry.id)
    config = _hf_config(entry)
    if entry.task == "image_classification":
        data = {"num_labels": num_classes, "num_channels": in_channels, "image_size": image_size}
        _hf_image_config(entry, config, data)
        auto = transformers.AutoModelForImageClassification
    elif entry.task == "sequence_classification":
        config.num_labels = num_classes
        if getattr(config, "pad_token_id", 0) is None:
            # a batch of more than one needs it (to find each sequence's end); token data has
            # no padding, so any id does
            config.pad_token_id = 0
        auto = transformers.AutoModelForSequenceClassification
    else:
        auto = transformers.AutoModelForCausalLM
    has_weights = folder and any(
        os.path.exists(os.path.join(entry.id, name))
        for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    )
    if has_weights:
        return _call(entry, auto.from_pretrained, entry.id, config=config, local_files_only=True)
    return _call(entry, auto.from_config, config)


def load_weights(model: nn.Module, entry: ModelSpec) -> None:
    """Load the entry's weights file, strictly: a state_dict, or a checkpoint holding one under
    ``state_dict`` or ``model``. A mismatch names the missing and unexpected keys."""
    if not entry.weights:
        return
    try:
        loaded = torch.load(entry.weights, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise _error(entry, f"cannot read weights {entry.weights}: {exc}") from exc
    state = state_dict_of(loaded)
    if state is None:
        raise _error(
            entry,
            f"weights {entry.weights} hold no state_dict (a mapping of tensors, or a checkpoint"
            " with one under 'state_dict' or 'model')",
        )
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}"
        for k, v in expected.items()
        if k in state and isinstance(state[k], torch.Tensor) and state[k].shape != v.shape
    ]
    if missing or unexpected or shapes:
        parts = []
        for what, keys in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)):
            if keys:
                more = f", ... {len(keys) - 5} more" if len(keys) > 5 else ""
                parts.append(f"{what}: {', '.join(keys[:5])}{more}")
        raise _error(entry, f"weights {entry.weights} do not match the model ({'; '.join(parts)})")
    model.load_state_dict(state, strict=True)


def state_dict_of(loaded: Any) -> dict | None:
    """The state_dict in what ``torch.load`` returned, or None."""
    if isinstance(loaded, dict):
        for key in ("state_dict", "model"):
            if isinstance(loaded.get(key), dict):
                loaded = loaded[key]
                break
        if loaded and all(isinstance(v, torch.Tensor) for v in loaded.values()):
            return loaded
    return None


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def result_fields(entry: ModelSpec, model: nn.Module) -> dict[str, Any]:
    """What a result records of the model (the result format: docs/results.md)."""
    import json

    return {
        "model_source": entry.source,
        "model_id": entry.model_id,
        "model_kwargs": json.dumps(entry.kwargs, sort_keys=True),
        "weights_sha256": entry.weights_sha256,
        "num_parameters": parameter_count(model),
    }
