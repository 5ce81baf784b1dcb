"""The config contract: schema, one-line errors naming the key, defaults and docs in step."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from batchscope.core.config import (
    RENAMED,
    ConfigError,
    check,
    load_schema,
    parse_override,
    resolve_paths,
    with_overrides,
)
from batchscope.core.workflow_config import with_command_line, yaml_typed

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


def test_the_race_may_not_end_before_its_first_look():
    config = _with("sweep.max_rounds", 3)
    config["measure"] = {"rounds": 4}
    with pytest.raises(ConfigError) as info:
        check(config, SCHEMA)
    assert str(info.value).startswith("config key sweep.max_rounds: 3 is below measure.rounds (4)")
    config["sweep"]["strategy"] = "full"  # no race: measure.rounds rounds, max_rounds unused
    check(config, SCHEMA)
    check(_with("sweep.margin_frac", 0.1), SCHEMA)
    with pytest.raises(ConfigError, match="^config key sweep.margin_frac:"):
        check(_with("sweep.margin_frac", 1.5), SCHEMA)


def test_predict_needs_a_target_and_a_short_run_longer_than_the_warmup():
    config = _with("train.predict", True)
    with pytest.raises(ConfigError) as info:
        check(config, SCHEMA)
    assert str(info.value).startswith("config key train.predict: needs train.target_accuracy")
    config["train"]["target_loss"] = 0.5
    # the default calibration (late_noise) takes B_noise from the calibration runs' noise
    # scale, noise_scale from the short runs'; the fits need none
    for strategy in ("late_noise", "noise_scale"):
        config["train"]["predict_calibration"] = strategy
        with pytest.raises(ConfigError) as info:
            check(config, SCHEMA)
        assert str(info.value).startswith(f"config key train.predict_calibration: {strategy} ta")
    del config["train"]["predict_calibration"]
    with pytest.raises(ConfigError, match="late_noise takes B_noise from the calibration runs'"):
        check(config, SCHEMA)
    for strategy in ("corner", "two_point"):
        check(dict(config, train={**config["train"], "predict_calibration": strategy}), SCHEMA)
    config["train"]["noise_scale_every_steps"] = 3
    check(config, SCHEMA)  # with a target and a noise scale it is fine
    config["train"]["predict_steps"] = 3  # the default measure.warmup_steps is 5
    with pytest.raises(ConfigError, match="train.predict_steps: 3 leaves no step to measure"):
        check(config, SCHEMA)


def test_short_runs_get_rounds_of_their_own_only_without_a_race():
    config = _with("train", {"predict": True, "target_accuracy": 0.5, "predict_rounds": 3,
                             "noise_scale_every_steps": 3})  # fmt: skip
    config["measure"] = {"rounds": 2}
    with pytest.raises(ConfigError, match="train.predict_rounds: 3 is above measure.rounds"):
        check(config, SCHEMA)
    check(dict(config, sweep={"strategy": "full"}), SCHEMA)
    check(dict(config, measure={"rounds": 3}), SCHEMA)  # the race's own rounds cover them


def test_imagefolder_path_must_exist(tmp_path):
    config = _with("dataset", {"name": "imagefolder", "path": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="dataset.path: .* is not a folder"):
        check(config, SCHEMA)
    (tmp_path / "cats").mkdir()
    for i in range(64):
        (tmp_path / "cats" / f"{i}.png").write_bytes(b"")  # listed, not decoded
    config["dataset"]["path"] = str(tmp_path)
    config["batch_sizes"] = [8]
    check(config, SCHEMA)


def test_relative_data_paths_are_found_beside_the_config_before_the_working_directory(tmp_path):
    # the workflow passes the config file's folder, then the working directory (--directory)
    beside, workdir = tmp_path / "examples" / "x", tmp_path / "out"
    for folder in (beside / "jpegs", workdir / "jpegs", workdir / "mirror"):
        folder.mkdir(parents=True)
    dataset = {"name": "imagefolder", "path": "jpegs", "mirrors": ["mirror/", "http://m/", "no/"]}
    config = {"dataset": dataset, "models": ["small_cnn"]}
    resolved = resolve_paths(config, [str(beside), str(workdir)])["dataset"]
    assert resolved["path"] == str(beside / "jpegs")
    assert resolved["mirrors"] == [str(workdir / "mirror"), "http://m/", "no/"]
    assert config["dataset"]["path"] == "jpegs"  # a copy: the config given is left as it was
    absolute = {"name": "imagefolder", "path": str(workdir / "jpegs")}
    assert resolve_paths({"dataset": absolute}, [str(beside)])["dataset"] == absolute


def test_a_relative_image_folder_found_nowhere_says_where_it_was_looked_for(tmp_path):
    config = _with("dataset", {"name": "imagefolder", "path": "missing"})
    config = resolve_paths(config, [str(tmp_path)])
    message = _one_line_error(config)
    assert message.startswith("config key dataset.path: 'missing' is not a folder")
    assert "beside the config file, then in the working directory" in message


def _image_folder(root: Path, counts: dict[str, int], ext: str = ".jpg") -> Path:
    """Class subfolders holding empty files named like images: the check lists, never decodes."""
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            (root / name / f"{i}{ext}").write_bytes(b"")
    return root


def _image_sweep(path: Path, **changes) -> dict:
    config = _with("dataset", {"name": "imagefolder", "path": str(path)})
    config.update(changes)
    return config


def _one_line_error(config) -> str:
    with pytest.raises(ConfigError) as info:
        check(config, SCHEMA)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_an_empty_image_folder_is_one_line_before_any_job(tmp_path):
    folder = tmp_path / "images"
    (folder / "cats").mkdir(parents=True)
    (folder / "cats" / "notes.txt").write_text("not an image")
    message = _one_line_error(_image_sweep(folder))
    assert message.startswith("config key dataset.path: no image (.jpg")
    assert str(folder) in message


def test_a_batch_larger_than_the_image_folder_names_its_size(tmp_path):
    folder = _image_folder(tmp_path / "images", {"a": 100, "b": 100, "c": 100})
    config = _image_sweep(folder, modes=["train"], batch_sizes=[4, 512])
    message = _one_line_error(config)
    # 300 images, 30 held out: 270 train; batch 512 gives 0 steps; 5 warm-up steps by default
    assert message.startswith("config key batch_sizes[1]: train batches of 512 give 0 steps")
    assert "the 270 training images" in message and "warmup_steps=5" in message
    assert message.endswith("the largest that does is 45")  # 270 // 6
    config["batch_sizes"] = [4, 45]
    check(config, SCHEMA)


def test_inference_reads_every_image_of_the_folder(tmp_path):
    folder = _image_folder(tmp_path / "images", {"a": 100, "b": 100, "c": 100})
    check(_image_sweep(folder, modes=["infer"], batch_sizes=[50]), SCHEMA)  # 300 // 50 = 6 > 5
    message = _one_line_error(_image_sweep(folder, modes=["train"], batch_sizes=[50]))
    assert "train batches of 50 give 5 steps over the 270 training images" in message


def test_accumulation_epochs_and_warmup_count_in_the_steps_check():
    config = _with("dataset", {"name": "synthetic", "num_samples": 64})
    config.update(modes=["train"], batch_sizes=[8], measure={"warmup_steps": 3})
    config["train"] = {"accumulation_steps": [1, 4]}
    message = _one_line_error(config)  # 64 // 32 = 2 steps, not more than 3
    assert message.startswith("config key batch_sizes[0]: train batches of 8 x 4 accumulation")
    assert "64 synthetic samples" in message
    config["train"]["epochs"] = 2  # 4 steps over two epochs
    check(config, SCHEMA)


def test_known_datasets_are_checked_against_their_split_sizes():
    message = _one_line_error(_with("batch_sizes", [4096]))  # Fashion-MNIST's 10000 test images
    assert message.startswith("config key batch_sizes[0]: infer batches of 4096 give 2 steps")
    assert "over the 10000 fashion_mnist test samples, not more than" in message
    check(_with("modes", ["train"]) | {"batch_sizes": [4096]}, SCHEMA)  # 60000 // 4096 = 14


@pytest.mark.parametrize(
    ("model", "size", "expected"),
    [
        ("inception_v3", 64, "inception_v3 needs images of at least 75 px, not 64"),
        ("vit_b_16", 256, "vit_b_16 takes images of exactly 224 px, not 256"),
        ("alexnet", None, "alexnet needs images of at least 63 px, not 28 (fashion_mnist's"),
    ],
)
def test_a_model_fed_images_it_cannot_take_stops_the_check(model, size, expected):
    config = _with("models", [model])
    config["dataset"]["image_size"] = size
    message = _one_line_error(config)
    assert message.startswith(f"config key dataset.image_size: {expected}")


def test_models_that_take_the_size_pass():
    config = _with("models", ["inception_v3", "resnet18"])
    config["dataset"]["image_size"] = 75
    check(config, SCHEMA)
    config = _with("models", ["vit_b_32"])
    config["dataset"]["image_size"] = 224
    check(config, SCHEMA)


def test_training_with_nothing_held_out_is_refused_unless_validation_is_off(tmp_path):
    folder = _image_folder(tmp_path / "images", {"a": 40, "b": 40})
    config = _image_sweep(folder, modes=["train"], batch_sizes=[8])
    config["dataset"]["val_fraction"] = 0
    message = _one_line_error(config)
    assert message.startswith("config key dataset.val_fraction: 0 holds out none of the 80")
    config["train"] = {"validate": False}
    check(config, SCHEMA)


def test_a_val_folder_with_a_foreign_class_is_one_line(tmp_path):
    folder = _image_folder(tmp_path / "images", {"a": 20, "b": 20})
    _image_folder(folder / "val", {"a": 2, "zebra": 2})
    message = _one_line_error(_image_sweep(folder, batch_sizes=[4]))
    assert message.startswith("config key dataset.path: ") and message.endswith("lack: zebra")


@pytest.mark.parametrize("key", ["target_accuracy", "eval_every_samples"])
def test_no_validation_refuses_what_needs_validations(key):
    config = _with("train.validate", False)
    config["train"][key] = 0.5 if key == "target_accuracy" else 1000
    message = _one_line_error(config)
    assert message == f"config key train.validate: false, but train.{key} needs validations"


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


def test_train_validate_reaches_the_runs_spec_and_ceilings_never_validate():
    from tests.factories import make_spec

    assert make_spec("train").train.validate is True
    assert make_spec("train", train={"validate": False}).train.validate is False
    fashion = {"name": "fashion_mnist"}  # a ceiling is the twin of real data
    assert make_spec("train", kind="ceiling", dataset=fashion).train.validate is False


def test_a_run_larger_than_a_node_must_take_whole_nodes():
    config = {**copy.deepcopy(DEFAULT), "devices": [1, 12], "slurm": {"gpus_per_node": 8}}
    assert _one_line_error(config) == (
        "config key devices: 12 is more than slurm.gpus_per_node=8 and not a multiple of it"
        " (a run larger than a node takes whole nodes)"
    )
    check({**config, "devices": [1, 8, 16]}, SCHEMA)  # one node, two whole nodes


def _schema_with_default(path: str, value):
    """The schema with the default of ``path`` (``section.key``) changed to ``value``."""
    schema = copy.deepcopy(SCHEMA)
    section, key = path.split(".")
    node = schema["properties"][section]
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    node["properties"][key]["default"] = value
    return schema


@pytest.mark.parametrize(
    ("default", "changed", "given", "message"),
    [
        ("measure.warmup_steps", 20, {"max_steps": 12}, "measure.warmup_steps=20"),
        (
            "train.predict_steps",
            3,
            {"predict": True, "target_accuracy": 0.5},
            "train.predict_steps: 3",
        ),
    ],
)
def test_the_checks_between_keys_read_the_schemas_defaults_not_copies_of_them(
    default, changed, given, message
):
    """Each default lives in the schema only: change it there, and a rule that reads the key
    without the user giving it follows (a copy of the old default in the code would not)."""
    schema = _schema_with_default(default, changed)
    config = copy.deepcopy(DEFAULT)
    config.setdefault("train", {}).update(given)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check(config, schema)


def test_the_sweep_command_leaves_what_it_is_not_given_to_the_schema(tmp_path):
    """`batchscope sweep` without --workers or --mode writes no copy of their defaults into the
    config it saves: the schema's defaults apply, wherever they change."""
    from batchscope.core import sweep

    config = sweep.sweep_config(models=["small_cnn"], data="synthetic", batch_sizes="8")
    assert "num_workers" not in config and "modes" not in config
    given = sweep.sweep_config(
        models=["small_cnn"], data="synthetic", batch_sizes="8", workers="1", mode="infer"
    )
    assert (given["num_workers"], given["modes"]) == ([1], ["infer"])


def test_overrides_set_dotted_keys_on_a_copy():
    config = {"measure": {"rounds": 3}, "modes": ["train", "infer"]}
    out = with_overrides(
        config, ["measure.rounds=2", "batch_sizes=[32, 64]", "sweep.strategy=full"]
    )
    assert out == {
        "measure": {"rounds": 2},
        "modes": ["train", "infer"],
        "batch_sizes": [32, 64],
        "sweep": {"strategy": "full"},
    }
    assert config["measure"]["rounds"] == 3  # a copy
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("rounds")


def test_command_line_values_are_read_as_the_config_file_reads_them():
    from snakemake.cli import parse_config  # what `snakemake --config ...` hands the workflow

    args = ["batch_sizes=[16,64]", "seeds=[0,1]", "measure={rounds: 5}", "train={max_steps: null}"]
    command_line = parse_config(args)
    assert command_line["batch_sizes"] == ["16", "64"]  # what the schema refused
    in_file = {**DEFAULT, "measure": {"rounds": 3, "warmup_steps": 4}, "train": {"lr": 0.1}}
    out = with_command_line(in_file, command_line)
    assert out["batch_sizes"] == [16, 64] and out["seeds"] == [0, 1]
    # a map merges key by key, as Snakemake merges it: the file's other keys stay
    assert out["measure"] == {"rounds": 5, "warmup_steps": 4}
    assert out["train"] == {"lr": 0.1, "max_steps": None}
    assert out["dataset"] == DEFAULT["dataset"] and in_file["measure"]["rounds"] == 3  # a copy
    check(out, SCHEMA)


def test_only_strings_yaml_reads_as_something_else_are_retyped():
    assert yaml_typed({"a": ["1", "2.5", "true", "null"], "b": "{x: [1]}"}) == {
        "a": [1, 2.5, True, None],
        "b": {"x": [1]},
    }
    # a word, a date, an empty string, a string that is not YAML, and non-strings stay as given
    kept = ["abc", "2024-01-01", "", "a: b: c", 3, 1e3, False]
    assert yaml_typed(kept) == kept
    with pytest.raises(ConfigError, match="batch_sizes"):
        check(with_command_line(DEFAULT, {"batch_sizes": "abc"}), SCHEMA)


@pytest.mark.parametrize("old", sorted(RENAMED))
def test_a_renamed_key_names_its_new_name(old):
    with pytest.raises(ConfigError, match=f"^config key {old}: renamed {old}_frac"):
        check(_with(old, 0.1), SCHEMA)
    check(_with(f"{old}_frac", 0.1), SCHEMA)  # the new name is the schema's
