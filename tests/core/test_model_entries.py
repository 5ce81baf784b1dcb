"""The config's model entries, torch-free: names, sources, paths and the run spec they feed."""

import hashlib

import pytest

from batchscope.core import model_check_spec
from batchscope.core import model_entries as models
from batchscope.core.model_entries import ModelEntryError
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


def _short_sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[: models.MODEL_ID_SHA_HEX]


def test_a_factory_files_model_id_is_its_path_from_where_it_was_found_and_its_hash(tmp_path):
    config_dir, cwd = tmp_path / "repo" / "config", tmp_path / "repo"
    (config_dir / "m").mkdir(parents=True)
    (cwd / "shared").mkdir()
    (config_dir / "m" / "net.py").write_bytes(b"# beside the config")
    (cwd / "shared" / "net.py").write_bytes(b"# in the working directory")
    dirs = [str(config_dir), str(cwd)]
    beside = models.parse({"name": "a", "factory": "m/net.py:build"}, 0, dirs)
    assert beside.model_id == f"m/net.py:build@sha256:{_short_sha(b'# beside the config')}"
    # found in the working directory, or from the config's folder up into it: from there
    sha = _short_sha(b"# in the working directory")
    for written in ("shared/net.py:build", "../shared/net.py:make"):
        spec = models.parse({"name": "b", "factory": written}, 0, dirs)
        assert spec.model_id == f"shared/net.py:{written.rpartition(':')[2]}@sha256:{sha}"
        assert spec.id.startswith(str(cwd / "shared" / "net.py"))  # the job still finds it


def test_a_file_outside_the_configs_folder_and_the_working_directory_keeps_its_basename(tmp_path):
    outside = tmp_path / "elsewhere" / "deep" / "net.py"
    outside.parent.mkdir(parents=True)
    outside.write_bytes(b"# kept elsewhere")
    (tmp_path / "repo").mkdir()
    spec = models.parse({"name": "a", "factory": f"{outside}:build"}, 0, [str(tmp_path / "repo")])
    assert spec.model_id == f"net.py:build@sha256:{_short_sha(b'# kept elsewhere')}"
    assert models.travelling_path(str(tmp_path / "..x" / "f.py"), [str(tmp_path)]) == "..x/f.py"


def test_a_model_id_is_the_same_from_two_checkouts_and_another_when_the_file_changes(tmp_path):
    def model_id(checkout):
        (checkout / "config").mkdir(parents=True, exist_ok=True)
        entry = {"name": "net", "factory": "models/net.py:build"}
        return models.parse(entry, 0, [str(checkout / "config"), str(checkout)]).model_id

    for checkout in (tmp_path / "one", tmp_path / "two" / "deeper"):
        (checkout / "models").mkdir(parents=True)
        (checkout / "models" / "net.py").write_bytes(b"width = 8")
    assert model_id(tmp_path / "one") == model_id(tmp_path / "two" / "deeper")
    (tmp_path / "one" / "models" / "net.py").write_bytes(b"width = 16")
    assert model_id(tmp_path / "one") != model_id(tmp_path / "two" / "deeper")
    assert model_id(tmp_path / "one").endswith(f"@sha256:{_short_sha(b'width = 16')}")


def test_the_model_id_found_from_the_configs_folder_survives_the_absolute_entry(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "net.py").write_text("")
    spec = models.parse({"name": "n", "factory": "net.py:build"}, 0, [str(tmp_path / "conf")])
    # the workflow turns the entries absolute, then builds each job's spec from anywhere
    again = models.parse(models.as_entry(spec), 0, [str(tmp_path / "elsewhere")])
    assert again.model_id == spec.model_id == f"net.py:build@sha256:{_short_sha(b'')}"


def test_a_hugging_face_folders_model_id_is_its_path_and_its_files_hash(tmp_path):
    (tmp_path / "hf" / "tiny").mkdir(parents=True)
    (tmp_path / "hf" / "tiny" / "config.json").write_text("{}")
    entry = {"name": "t", "hf": "hf/tiny", "task": "causal_lm"}
    spec = models.parse(entry, 0, [str(tmp_path)])
    sha = models.folder_sha256(str(tmp_path / "hf" / "tiny"))[: models.MODEL_ID_SHA_HEX]
    assert spec.id == str(tmp_path / "hf" / "tiny") and spec.model_id == f"hf/tiny@sha256:{sha}"
    # names that are not files are their own model_id
    named = models.parse_all(["resnet18", {"name": "g", "hf": "gpt2", "task": "causal_lm"}])
    assert [s.model_id for s in named] == ["resnet18", "gpt2"]


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
    check = model_check_spec.check_spec(config, "timm_convnext_atto")
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
    assert model_check_spec.check_spec(config, "vit")["input"]["image_size"] == 12
