"""The config contract: schema, one-line errors naming the key, defaults and docs in step."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from batchscope.core.config import ConfigError, check, load_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
DEFAULT = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


def test_default_config_is_valid():
    check(DEFAULT, SCHEMA)


def _with(path: str, value):
    config = copy.deepcopy(DEFAULT)
    *parents, last = path.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return config


BAD = [
    ("models", ["resnet1000"], "models[0]"),
    ("batch_sizes", [32, 0], "batch_sizes[1]"),
    ("batch_sizes", [-4], "batch_sizes[0]"),
    ("modes", ["eval"], "modes[0]"),
    ("num_workers", [], "num_workers"),
    ("seeds", [], "seeds"),
    ("batch_sizes", ["64"], "batch_sizes[0]"),
    ("batch_sizes", 64, "batch_sizes"),
    ("num_workers", [0, 0], "num_workers"),
    ("device", "tpu", "device"),
    ("dataset.name", "mnist", "dataset.name"),
    ("train.lr", 0, "train.lr"),
    ("train.epochs", 1.5, "train.epochs"),
    ("train.max_steps", 3, "train.max_steps"),
    ("loader.prefetch_factor", 0, "loader.prefetch_factor"),
    ("deterministic", "yes", "deterministic"),
    ("bogus", 1, "bogus"),
    ("train.bogus", 1, "train.bogus"),
    ("dataset.name", "imagefolder", "dataset.path"),
    ("cpu_memory_budget_mb", 0, "cpu_memory_budget_mb"),
    ("train.accumulation_steps", [1, 0], "train.accumulation_steps[1]"),
    ("train.accumulation_steps", 4, "train.accumulation_steps"),
    ("train.accumulation_steps", [2, 2], "train.accumulation_steps"),
]


@pytest.mark.parametrize(("path", "value", "key"), BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_bad_value_is_one_line_naming_the_key(path, value, key):
    with pytest.raises(ConfigError) as info:
        check(_with(path, value), SCHEMA)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"config key {key}:")


def test_warmup_in_steps_and_in_epochs_is_one_line_naming_the_epochs_key():
    config = _with("train.lr_warmup_steps", 10)
    config["train"]["lr_warmup_epochs"] = 5
    with pytest.raises(ConfigError) as info:
        check(config, SCHEMA)
    assert str(info.value) == (
        "config key train.lr_warmup_epochs: give lr_warmup_steps or lr_warmup_epochs, not both"
    )
    config["train"]["lr_warmup_steps"] = 0
    check(config, SCHEMA)  # epochs alone are fine


def test_imagefolder_path_must_exist(tmp_path):
    config = _with("dataset", {"name": "imagefolder", "path": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="dataset.path: .* is not a folder"):
        check(config, SCHEMA)
    config["dataset"]["path"] = str(tmp_path)
    check(config, SCHEMA)


def test_model_names_are_exactly_what_the_pinned_torchvision_builds():
    from batchscope.bench.models import available_models

    assert SCHEMA["$defs"]["model_name"]["enum"] == available_models()


def _properties(schema, prefix=""):
    for name, sub in schema.get("properties", {}).items():
        yield f"{prefix}{name}", sub
        yield from _properties(sub, f"{prefix}{name}.")


@pytest.mark.parametrize("key", [k for k, _ in _properties(SCHEMA)])
def test_every_key_has_a_description_and_a_default(key):
    sub = dict(_properties(SCHEMA))[key]
    resolved = sub
    if "$ref" in sub:
        resolved = SCHEMA["$defs"][sub["$ref"].rsplit("/", 1)[1]]
    assert resolved.get("description"), f"{key} has no description"
    if key not in SCHEMA.get("required", []) and key not in ("dataset.name", "dataset.path"):
        assert "default" in resolved, f"{key} has no default"


def _schema_keys(node: dict, schema: dict, prefix: str = "") -> dict[str, dict]:
    """Every key of the config schema as ``a.b`` -> its (``$ref``-resolved) schema."""
    keys = {}
    for name, child in node.get("properties", {}).items():
        if "$ref" in child:
            target = schema
            for part in child["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            child = {**target, **child}
        path = f"{prefix}{name}"
        keys[path] = child
        keys.update(_schema_keys(child, schema, f"{path}."))
    return keys


def _readme_rows() -> dict[str, list[str]]:
    """The key tables of config/README.md: `key` -> its cells (escaped pipes kept in cells)."""
    rows = {}
    for line in (ROOT / "config" / "README.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells
    return rows


def test_config_readme_documents_every_schema_key_with_the_schemas_default():
    schema = SCHEMA
    rows = _readme_rows()
    keys = _schema_keys(schema, schema)
    assert sorted(set(keys) - set(rows)) == [], "schema keys without a line in config/README.md"
    assert sorted(set(rows) - set(keys)) == [], "config/README.md documents unknown keys"
    for key, node in keys.items():
        cell = rows[key][2]
        if "default" not in node:
            assert cell == "—", f"{key}: the schema has no default, the README says {cell}"
            continue
        shown = re.match(r"`([^`]*)`", cell)
        assert shown, f"{key}: the README's default cell {cell!r} holds no `value`"
        assert yaml.safe_load(shown[1]) == node["default"], f"{key}: README default differs"
