"""The workflow's config in one place: from what Snakemake read to what every job's spec is
built from. The Snakefile (``common.smk``) calls :func:`checked`, then Snakemake's own
``validate``, then :func:`completed`, and replaces its config once with the result; no rule
file edits the config after that.

- :func:`checked`: the ``--config`` values read as YAML (``with_command_line``), the data's
  relative paths found (``resolve_paths``), and the one-line check (``check``): a
  :class:`~batchscope.core.config.ConfigError` naming the key.
- :func:`completed`: the schema's defaults filled, every model entry resolved (paths found,
  files hashed, its ``model_id``: ``model_entries``), a ``train.loss`` file found, a ``python``
  dataset's factory found: paths absolute, so every spec built from the config names the same
  files. A :class:`~batchscope.core.model_entries.ModelEntryError` (one line) when one is not
  there.

``dirs`` are where relative paths are looked for: the config file's folder first, then the
working directory (the workflow's ``CONFIG_DIRS``).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from batchscope.core import config as config_module
from batchscope.core import model_entries, spec


def yaml_typed(value: Any) -> Any:
    """``value`` with each string that YAML reads as a number, a bool, null, a list or a map
    replaced by what YAML reads, inside lists and maps too; other strings are kept.

    Snakemake reads ``--config KEY=VALUE`` with its own parser, which leaves the items of
    ``[16,64]`` as the strings ``"16"`` and ``"64"`` and ``{rounds: 5}`` as ``{"rounds": "5"}``;
    this reads them as the same text in the config file would be read."""
    if isinstance(value, Mapping):
        return {key: yaml_typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [yaml_typed(item) for item in value]
    if not isinstance(value, str) or not value.strip():
        return value
    try:
        typed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return typed if isinstance(typed, (bool, int, float, list, dict, type(None))) else value


def with_command_line(config: Mapping[str, Any], command_line: Mapping[str, Any]) -> dict:
    """A copy of ``config`` with the keys given on the command line (``command_line``: the
    ``--config`` values as Snakemake parsed them, ``workflow.config_settings.config``) set to
    their :func:`yaml_typed` values, maps merged key by key as Snakemake merges them."""
    out = copy.deepcopy(dict(config))
    _merge(out, yaml_typed(command_line))
    return out


def _merge(into: dict[str, Any], overlay: Mapping[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def checked(
    config: Mapping[str, Any],
    command_line: Mapping[str, Any],
    dirs: Sequence[str],
    *,
    schema_path: str | os.PathLike = config_module.SCHEMA_PATH,
    folder_listings: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """``config`` with the command line's values typed and its data paths found, checked:
    ConfigError (one line naming the key) when the schema or the rules between keys refuse it.
    ``folder_listings``: where an image folder's listing is kept (``core.folder_index``)."""
    out = with_command_line(config, command_line)
    out = config_module.resolve_paths(out, dirs)
    config_module.check(out, config_module.load_schema(schema_path), folder_listings)
    return out


def completed(
    config: Mapping[str, Any],
    dirs: Sequence[str],
    *,
    schema_path: str | os.PathLike = config_module.SCHEMA_PATH,
) -> dict[str, Any]:
    """A checked config with every default filled (behind ``$ref`` too) and its model entries,
    ``train.loss`` file and ``python`` dataset factory resolved to absolute, hashed paths.
    ModelEntryError (one line) when a file is not there."""
    out = config_module.with_defaults(config, config_module.load_schema(schema_path))
    entries = model_entries.parse_all(out["models"], list(dirs))
    out["models"] = [model_entries.as_entry(entry) for entry in entries]
    out["train"]["loss"] = model_entries.resolve_loss(out["train"]["loss"], list(dirs))
    if out["dataset"]["name"] == "python":
        out["dataset"]["factory"] = spec.python_dataset_spec(out["dataset"], list(dirs)).factory
    return out


def model_names(config: Mapping[str, Any]) -> list[str]:
    """The names of a completed config's model entries, in their order."""
    return [entry["name"] for entry in config["models"]]
