"""End to end: a folder of JPEGs read with a service's pipeline (resize, crop, normalize, the
torchvision decoder), and the user's own Datasets from a factory file beside the config, each a
tiny sweep over the workers axis; and a factory mistake stopped in one line before any
benchmark job."""

import json

import pandas as pd
import pytest
from PIL import Image

from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import job_counts, snakemake, write_config

pytestmark = pytest.mark.e2e

TINY = {
    "models": ["small_cnn"],
    "batch_sizes": [8],
    "num_workers": [0, 2],
    "seeds": [0],
    "measure": {"warmup_steps": 1, **ONE_ROUND},
    "sweep": NO_RACE,
    "train": {"max_steps": 4},
    "infer": {"max_steps": 4},
}


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pipeline")
    for label, colour in (("cats", (200, 40, 40)), ("dogs", (40, 40, 200))):
        (workdir / "photos" / label).mkdir(parents=True)
        for i in range(24):
            Image.new("RGB", (48 + i, 40), colour).save(workdir / "photos" / label / f"{i}.jpg")
    dataset = {
        "name": "imagefolder",
        "path": str(workdir / "photos"),
        "resize": 36,
        "crop": 32,
        "normalize": "imagenet",
        "decoder": "torchvision",
    }
    tiny = {**TINY, "measure": {**TINY["measure"], "ceiling": False}}
    config = write_config(workdir, dataset=dataset, modes=["infer"], **tiny)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir, config


def test_each_result_records_the_decoder_and_the_preprocessing(image_run):
    workdir, _ = image_run
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    assert sorted(summary["num_workers"]) == [0, 2] and (summary["status"] == "ok").all()
    assert (summary["decoder"] == "torchvision").all()
    expected = "resize 36 (shorter side), center crop 32, normalize imagenet"
    assert (summary["preprocessing"] == expected).all()
    assert (summary["image_size"] == 32).all()
    check = json.loads((workdir / "results" / "models" / "small_cnn.json").read_text())
    assert check["input_shape"] == [3, 32, 32]


def test_another_decoder_reruns_the_jobs(image_run):
    workdir, config = image_run
    text = config.read_text()
    try:
        config.write_text(text.replace("decoder: torchvision", "decoder: pil"))
        dry = snakemake(workdir, "-n", "--configfile", str(config))
    finally:
        config.write_text(text)
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout + dry.stderr)
    assert counts["bench"] == 2


DATA = """
import torch
from torch.utils.data import Dataset


class Blobs(Dataset):
    def __init__(self, n, side):
        self.n, self.side = n, side

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": torch.full((3, self.side, self.side), i / self.n), "label": i % 3}


def build(n=48, side=12):
    return Blobs(n, side), Blobs(16, side)


def single(n=48, side=12):
    return Blobs(n, side)
"""


@pytest.fixture(scope="module")
def python_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("pydata")
    (workdir / "mydata").mkdir()
    (workdir / "mydata" / "data.py").write_text(DATA)
    dataset = {
        "name": "python",
        "factory": "mydata/data.py:build",  # beside the config file
        "kwargs": {"n": 40},
        "num_classes": 3,
    }
    config = write_config(workdir, dataset=dataset, modes=["train"], **TINY)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir, config


def test_a_python_dataset_runs_over_the_workers_axis_to_a_recommendation(python_run):
    workdir, _ = python_run
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    assert sorted(summary["num_workers"]) == [0, 2] and (summary["mode"] == "train").all()
    assert (summary["status"] == "ok").all() and (summary["dataset"] == "python").all()
    assert summary["data_wait_frac"].notna().all()
    assert (summary["image_size"] == 12).all() and summary["decoder"].isna().all()
    assert summary["val_samples"].eq(16).all()
    check = json.loads((workdir / "results" / "models" / "small_cnn.json").read_text())
    assert check["dataset_samples"] == {"train": 40, "val": 16}
    assert check["input_shape"] == [3, 12, 12] and check["output_shape"] == [1, 3]
    # the compute-only ceiling computes on the dataset's own first batches
    ceiling = json.loads((workdir / "results/ceiling/train/small_cnn/bs8.json").read_text())
    assert ceiling["status"] == "ok" and ceiling["image_size"] == 12
    assert (workdir / "results" / "recommendation.md").read_text()


def test_an_edited_factory_file_reruns_the_jobs(python_run):
    workdir, config = python_run
    data = workdir / "mydata" / "data.py"
    text = data.read_text()
    try:
        data.write_text(text + "\n# edited\n")
        dry = snakemake(workdir, "-n", "--configfile", str(config))
    finally:
        data.write_text(text)
    assert dry.returncode == 0, dry.stderr[-3000:]
    counts = job_counts(dry.stdout + dry.stderr)
    assert counts["bench"] == 2 and counts["ceiling"] == 1 and counts["model_check"] == 1


def test_a_factory_returning_one_dataset_is_one_line_before_any_benchmark(python_run, tmp_path):
    workdir, _ = python_run
    (tmp_path / "data.py").write_text(DATA)
    dataset = {"name": "python", "factory": "data.py:single", "num_classes": 3}
    config = write_config(tmp_path, dataset=dataset, modes=["infer"], **TINY)
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("batchscope:")]
    assert len(ours) == 1 and ours[0].startswith("batchscope: dataset python: the factory"), ours
    assert "returned a Blobs; expected (train, val)" in ours[0]
    assert not list(tmp_path.glob("results/runs/**/*.json"))
    assert not list(tmp_path.glob("logs/bench/**/*.log"))
