"""Config checking with one-line errors that name the key.

Imports only jsonschema and PyYAML, so the workflow can check a config before any job starts
without importing torch. The JSON Schema (``workflow/schemas/config.schema.yaml``) is the
contract; :func:`check` adds the few rules a schema cannot say.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from jsonschema.exceptions import best_match

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


def check(config: Mapping[str, Any], schema: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the most relevant problem in ``config``, if any."""
    validator = jsonschema.Draft202012Validator(schema)
    error = best_match(validator.iter_errors(config))
    if error is not None:
        path = list(error.absolute_path)
        if error.validator == "additionalProperties":
            allowed = error.schema.get("properties", {})
            unknown = sorted(k for k in error.instance if k not in allowed)
            raise ConfigError(
                f"config key {key_path([*path, unknown[0]])}: unknown key"
                f" (allowed here: {', '.join(allowed)})"
            )
        raise ConfigError(f"config key {key_path(path)}: {_message(error)}")
    _check_semantics(config)


def _check_semantics(config: Mapping[str, Any]) -> None:
    dataset = config.get("dataset", {})
    if dataset.get("name") == "imagefolder":
        path = dataset.get("path")
        if not path:
            raise ConfigError("config key dataset.path: required when dataset.name is imagefolder")
        if not os.path.isdir(path):
            raise ConfigError(f"config key dataset.path: {path!r} is not a folder")
    elif "path" in dataset:
        raise ConfigError("config key dataset.path: only used when dataset.name is imagefolder")
    train = config.get("train", {})
    if train.get("lr_scaling", "none") != "none" and train.get("base_batch_size") is None:
        raise ConfigError("config key train.base_batch_size: required when train.lr_scaling is set")
    if train.get("lr_warmup_epochs") is not None and train.get("lr_warmup_steps"):
        raise ConfigError(
            "config key train.lr_warmup_epochs: give lr_warmup_steps or lr_warmup_epochs, not both"
        )
    if train.get("target_accuracy") is not None and train.get("target_loss") is not None:
        raise ConfigError(
            "config key train.target_loss: give target_accuracy or target_loss, not both"
        )
    warmup = config.get("measure", {}).get("warmup_steps", 5)
    for mode in ("train", "infer"):
        cap = config.get(mode, {}).get("max_steps")
        if cap is not None and cap <= warmup:
            raise ConfigError(
                f"config key {mode}.max_steps: {cap} leaves no step to measure after "
                f"measure.warmup_steps={warmup}"
            )
