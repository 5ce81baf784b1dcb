"""The workflow's config in one place (batchscope.core.workflow_config): what common.smk runs
before any job, so every spec is built from a config no rule file edits again."""

import copy

import pytest

from batchscope.core import workflow_config
from batchscope.core.config import ConfigError
from batchscope.core.model_entries import ModelEntryError
from tests.factories import BASE_CONFIG


def test_checked_reads_the_command_line_as_yaml_and_refuses_in_one_line(tmp_path):
    config = copy.deepcopy(BASE_CONFIG)
    got = workflow_config.checked(config, {"batch_sizes": ["4", "8"]}, [str(tmp_path)])
    assert got["batch_sizes"] == [4, 8]
    assert config["batch_sizes"] == BASE_CONFIG["batch_sizes"]  # the input is not edited
    with pytest.raises(ConfigError, match="batch_sizes"):
        workflow_config.checked(config, {"batch_sizes": "abc"}, [str(tmp_path)])


def test_completed_fills_defaults_and_resolves_files_from_the_config_folder(tmp_path):
    (tmp_path / "net.py").write_text("def build(num_classes):\n    return None\n")
    (tmp_path / "loss.py").write_text("def loss(outputs, targets):\n    return 0\n")
    config = copy.deepcopy(BASE_CONFIG)
    config["models"] = ["small_cnn", {"name": "mine", "factory": "net.py:build"}]
    config["train"] = {"loss": "loss.py:loss"}
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    dirs = [str(tmp_path), str(elsewhere)]
    got = workflow_config.completed(workflow_config.checked(config, {}, dirs), dirs)
    mine = got["models"][1]
    assert mine["factory"] == f"{tmp_path / 'net.py'}:build"  # absolute: every spec finds it
    assert mine["model_id"].startswith("net.py:build@sha256:")  # relative: results travel
    assert got["train"]["loss"] == f"{tmp_path / 'loss.py'}:loss"
    assert got["measure"]["warmup_steps"] is not None  # defaults filled
    assert workflow_config.model_names(got) == ["small_cnn", "mine"]
    # completing is idempotent: the resolved entries read back as themselves
    assert workflow_config.completed(got, dirs) == got


def test_a_missing_model_file_is_one_line(tmp_path):
    config = copy.deepcopy(BASE_CONFIG)
    config["models"] = [{"name": "mine", "factory": "absent.py:build"}]
    checked = workflow_config.checked(config, {}, [str(tmp_path)])
    with pytest.raises(ModelEntryError, match="absent.py") as info:
        workflow_config.completed(checked, [str(tmp_path)])
    assert "\n" not in str(info.value)
