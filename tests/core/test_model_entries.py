"""The config's model entries, torch-free: names, sources, paths and the run spec they feed."""

import hashlib

import pytest

from batchscope.core import models
from batchscope.core.models import ModelEntryError
from tests.factories import make_spec


def test_short_forms_name_their_model_and_say_its_source():
    specs = models.parse_all(["small_cnn", "resnet18", "timm:convnext_atto"])
    assert [(s.name, s.source, s.id) for s in specs] == [
        ("small_cnn", "builtin", "small_cnn"),
        ("resnet18", "torchvision", "resnet18"),
        ("timm_convnext_atto", "timm", "convnext_atto"),
    ]


def test_relative_paths_are_found_beside_the_config_before_the_working_directory(tmp_path):
    config_dir, cwd = tmp_path / "conf", tmp_path / "cwd"
    for folder in (config_dir, cwd):
        (folder / "m").mkdir(parents=True)
        (folder / "m" / "net.py").write_text(f"# {folder.name}\n")
    (cwd / "w.pt").write_bytes(b"weights")
    entry = {"name": "net", "factory": "m/net.py:build", "weights": "w.pt", "kwargs": {"a": 1}}
    spec = models.parse(entry, 0, [str(config_dir), str(cwd)])
    assert spec.id == f"{config_dir / 'm' / 'net.py'}:build"
    assert spec.file_sha256 == hashlib.sha256(b"# conf\n").hexdigest()
    assert spec.weights == str(cwd / "w.pt")
    assert spec.weights_sha256 == hashlib.sha256(b"weights").hexdigest()
    assert spec.kwargs == {"a": 1}
    assert models.parse(models.as_entry(spec)) == spec


def test_a_missing_file_is_one_line_naming_the_entry_and_where_it_looked(tmp_path):
    entry = {"name": "net", "factory": "nowhere.py:build"}
    with pytest.raises(ModelEntryError) as info:
        models.parse(entry, 3, [str(tmp_path / "conf"), str(tmp_path)])
    message = str(info.value)
    assert message.startswith("model entry net: factory file 'nowhere.py' not found")
    assert str(tmp_path / "conf") in message and "\n" not in message


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        (["resnet18", {"name": "resnet18", "timm": "resnet18"}], "the name of models[0] too"),
        ([{"name": "g", "hf": "gpt2"}], "`task` is one of causal_lm"),
        ([{"name": "g", "timm": "vit_tiny", "task": "causal_lm"}], "`task` is for hf entries"),
        ([{"factory": "m.py:build"}], "a factory entry needs a `name`"),
        ([{"name": "x", "timm": "a", "model": "resnet18"}], "exactly one of model, timm"),
        ([{"name": "x", "factory": "m.py"}], "is not file.py:function"),
    ],
)
def test_entries_the_workflow_cannot_run_are_refused_in_one_line(entries, says):
    with pytest.raises(ModelEntryError, match=None) as info:
        models.parse_all(entries)
    assert says in str(info.value) and str(info.value).startswith("model entry ")


def test_a_changed_checkpoint_changes_its_models_spec_and_no_other(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text("")
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"one")
    entries = ["small_cnn", {"name": "net", "factory": "net.py:build", "weights": "w.pt"}]

    def digests():
        return [make_spec("infer", model=m, models=entries).sha256() for m in ("small_cnn", "net")]

    before = digests()
    weights.write_bytes(b"two!")  # another size: the remembered hash is not reused
    after = digests()
    assert before[0] == after[0] and before[1] != after[1]
    assert make_spec("infer", model="net", models=entries).model_entry.weights_sha256 == (
        hashlib.sha256(b"two!").hexdigest()
    )


def test_the_check_reads_the_datas_shape_and_whether_it_trains(tmp_path):
    from tests.factories import sweep_config

    config = sweep_config(models=["timm:convnext_atto"], modes=["infer"])
    check = models.check_spec(config, "timm_convnext_atto")
    assert check["model"]["id"] == "convnext_atto" and check["train"] is False
    assert check["input"] == {
        "dataset": "synthetic",
        "channels": 1,
        "image_size": 12,
        "num_classes": 4,
        "classes_known": True,
    }


VIT = {"name": "vit", "hf": "vit", "task": "image_classification", "config": {"hidden_size": 32}}


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ({"num_labels": 10}, "num_labels=10, and the sweep's data gives 4 (classes)"),
        ({"num_channels": 3}, "num_channels=3, and the sweep's data gives 1 (channels)"),
        ({"image_size": 224}, "image_size=224, and the sweep's data gives 12 (px a side)"),
        ({"image_size": [12, 16]}, "image_size=[12, 16], and the sweep's data gives 12"),
    ],
)
def test_an_image_classifiers_override_that_contradicts_the_data_is_refused_at_once(override, says):
    from batchscope.core.config import ConfigError
    from tests.factories import sweep_config

    entry = {**VIT, "config": {**VIT["config"], **override}}
    with pytest.raises(ConfigError) as caught:
        sweep_config(models=["small_cnn", entry])
    message = str(caught.value)
    assert message.startswith(f"model entry vit: its config sets {says}") and "\n" not in message


def test_an_image_classifiers_override_that_agrees_with_the_data_is_taken():
    from tests.factories import sweep_config

    agrees = {"num_labels": 4, "num_channels": 1, "image_size": [12, 12]}
    config = sweep_config(models=[{**VIT, "config": {**VIT["config"], **agrees}}])
    assert models.check_spec(config, "vit")["input"]["image_size"] == 12
