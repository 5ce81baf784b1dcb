"""The config's image pipeline (resize, crop, normalize, decoder) and ``python`` datasets,
before any job: one-line errors, the size the models are checked against, and the run spec
(a changed setting or an edited factory file reruns the jobs)."""

from pathlib import Path

import pytest

from batchscope.core import datasets, model_check_spec
from batchscope.core import model_entries as models
from batchscope.core.config import ConfigError
from tests.factories import make_spec, sweep_config


def _folder(root: Path, count: int = 40) -> Path:
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for i in range(count):
            (root / label / f"{i}.jpg").write_bytes(b"")  # listed, never decoded
    return root


def _images(root: Path, **pipeline) -> dict:
    return {"name": "imagefolder", "path": str(_folder(root)), "image_size": None, **pipeline}


def _error(**changes) -> str:
    with pytest.raises(ConfigError) as info:
        sweep_config(**changes)
    assert "\n" not in str(info.value)
    return str(info.value)


PIPELINE_MISTAKES = [
    ({"resize": 40}, "config key dataset.resize: 40 keeps each image's aspect"),
    ({"resize": [40, 30]}, "config key dataset.resize: [40, 30] is not square"),
    ({"resize": 32, "crop": 40}, "config key dataset.crop: 40 is larger than the resized image"),
    ({"crop": 16, "image_size": 16}, "config key dataset.image_size: give image_size or resize"),
    ({"normalize": {"mean": [0.5], "std": [1, 1, 1]}}, "config key dataset.normalize"),
    ({"decoder": "opencv"}, "config key dataset.decoder"),
]


@pytest.mark.parametrize(("pipeline", "says"), PIPELINE_MISTAKES)
def test_an_image_pipeline_it_cannot_run_is_one_line(tmp_path, pipeline, says):
    assert _error(dataset=_images(tmp_path, **pipeline)).startswith(says)


@pytest.mark.parametrize("key", ["resize", "crop", "normalize", "decoder"])
def test_the_pipeline_is_for_image_folders_only(key):
    value = {"resize": [8, 8], "crop": 8, "normalize": "imagenet", "decoder": "torchvision"}[key]
    message = _error(dataset={"name": "synthetic", key: value})
    assert message.startswith(
        f"config key dataset.{key}: only used when dataset.name is imagefolder"
    )


def test_the_models_input_size_check_takes_the_size_after_the_crop(tmp_path):
    # inception_v3 needs 75 px: a 256 resize cropped to 64 is too small, whatever the resize
    message = _error(
        dataset=_images(tmp_path, resize=256, crop=64), models=["inception_v3"], batch_sizes=[8]
    )
    assert message.startswith("config key dataset.crop: inception_v3 needs images of at least 75")
    sweep_config(
        dataset=_images(tmp_path / "ok", resize=256, crop=80),
        models=["inception_v3"],
        batch_sizes=[8],
    )


def test_the_ceiling_and_the_model_check_see_the_cropped_size(tmp_path):
    config = sweep_config(dataset=_images(tmp_path, resize=48, crop=40), batch_sizes=[8])
    assert (
        make_spec("infer", kind="ceiling", dataset=config["dataset"]).dataset.synthetic.image_size
        == 40
    )
    assert model_check_spec.check_spec(config, "small_cnn")["input"]["image_size"] == 40


def test_each_pipeline_setting_is_in_the_run_spec(tmp_path):
    base = _images(tmp_path, resize=48, crop=40, normalize="imagenet", decoder="pil")
    spec = make_spec("infer", dataset=base)
    assert spec.dataset.pipeline.decoder == "pil" and spec.dataset.pipeline.crop == 40
    digests = {spec.sha256()}
    for change in ({"decoder": "torchvision"}, {"crop": 32}, {"resize": 44}, {"normalize": None}):
        digests.add(make_spec("infer", dataset={**base, **change}).sha256())
    assert len(digests) == 5


def test_the_recorded_preprocessing_says_each_step():
    text = datasets.preprocessing_text(256, 224, "imagenet")
    assert text == "resize 256 (shorter side), center crop 224, normalize imagenet"
    assert datasets.preprocessing_text([32, 32], None, None) == "resize 32x32"
    assert datasets.preprocessing_text(None, None, None) == "none"


# ------------------------------------------------------------------------------------ python


def _python(**changes) -> dict:
    return {"name": "python", "image_size": None, **changes}


def test_a_python_dataset_needs_its_factory_and_no_image_size(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _error(dataset=_python()).startswith(
        "config key dataset.factory: required when dataset.name is python"
    )
    assert _error(dataset=_python(factory="d.py:build", image_size=32)).startswith(
        "config key dataset.image_size: a python dataset's items have their own size"
    )
    assert _error(dataset={"name": "synthetic", "factory": "d.py:build"}).startswith(
        "config key dataset.factory: only used when dataset.name is python"
    )


def test_a_missing_factory_file_is_one_line_naming_the_dataset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(models.ModelEntryError) as info:
        make_spec("infer", dataset=_python(factory="nope.py:build"))
    assert str(info.value).startswith("dataset python: factory file 'nope.py' not found")


def test_an_edited_factory_file_changes_every_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data.py"
    data.write_text("def build(): ...\n")
    dataset = _python(factory="data.py:build", kwargs={"n": 3}, num_classes=5)
    spec = make_spec("infer", dataset=dataset)
    assert spec.dataset.python.factory == f"{data}:build"
    assert spec.dataset.python.kwargs == {"n": 3} and spec.dataset.python.num_classes == 5
    before = {mode: make_spec(mode, dataset=dataset).sha256() for mode in ("train", "infer")}
    data.write_text("def build(n=4): ...\n")
    after = {mode: make_spec(mode, dataset=dataset).sha256() for mode in ("train", "infer")}
    assert all(before[m] != after[m] for m in before)
    assert make_spec("infer", dataset={**dataset, "kwargs": {"n": 4}}).sha256() != after["infer"]


def test_a_python_datasets_ceiling_and_model_check_build_the_dataset_itself(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.py").write_text("")
    config = sweep_config(dataset=_python(factory="data.py:build"), batch_sizes=[4, 16])
    ceiling = make_spec("train", kind="ceiling", dataset=config["dataset"])
    assert ceiling.dataset.python is not None and ceiling.num_workers == 0
    assert ceiling.train.validate is False
    check = model_check_spec.check_spec(config, "small_cnn")
    assert check["input"]["python"]["factory"] == f"{tmp_path / 'data.py'}:build"
    assert check["sweep"]["batch_sizes"] == [4, 16] and check["sweep"]["measure"]["warmup_steps"]
