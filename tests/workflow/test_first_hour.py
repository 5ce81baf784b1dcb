"""A newcomer's first hour: problems the data and the models make known stop the workflow
with one line before any job, and ``python -m batchscope sweep`` plans and runs the same DAG as
``snakemake`` on the config it writes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from batchscope.core.config import check, load_schema, with_defaults
from tests.factories import NO_RACE, ONE_ROUND

REPO = Path(__file__).resolve().parents[2]
SCHEMA = load_schema(REPO / "workflow" / "schemas" / "config.schema.yaml")
pytestmark = pytest.mark.e2e


def _env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
    cmd += ["--directory", str(workdir), *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)


def batchscope(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "batchscope", *args]
    env = {**_env(), "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def job_counts(output: str) -> dict[str, int]:
    """The first 'Job stats' table of a dry run as {rule: count}."""
    counts = {}
    for line in output.split("Job stats:")[1].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def image_folder(root: Path, per_class: int, classes=("a", "b", "c")) -> Path:
    from PIL import Image

    for number, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            Image.new("RGB", (10, 10), (20 * number, 3 * i, 90)).save(root / name / f"{i}.png")
    return root


def stops_before_any_job(workdir: Path, config: dict) -> str:
    """The dry run's and the real run's one line; neither made a file."""
    path = workdir / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    lines = []
    for args in (["-n"], ["--cores", "1"]):
        done = snakemake(workdir, "--configfile", str(path), *args)
        assert done.returncode != 0
        ours = [line for line in done.stderr.splitlines() if line.startswith("batchscope:")]
        assert len(ours) == 1, done.stderr[-2000:]
        lines.append(ours[0])
    assert lines[0] == lines[1]
    assert not (workdir / "results").exists() and not (workdir / "resources").exists()
    return lines[0]


def test_an_empty_image_folder_stops_before_any_job(tmp_path):
    empty = tmp_path / "images"
    (empty / "cats").mkdir(parents=True)
    config = {"dataset": {"name": "imagefolder", "path": str(empty)}, "models": ["small_cnn"]}
    line = stops_before_any_job(tmp_path, config)
    assert line.startswith("batchscope: config key dataset.path: no image (") and str(empty) in line


def test_a_batch_too_large_for_the_images_stops_before_any_job_naming_their_number(tmp_path):
    images = image_folder(tmp_path / "images", per_class=100)
    config = {
        "dataset": {"name": "imagefolder", "path": str(images)},
        "models": ["small_cnn"],
        "modes": ["infer"],
        "batch_sizes": [8, 512],
    }
    line = stops_before_any_job(tmp_path, config)
    assert line.startswith("batchscope: config key batch_sizes[1]: infer batches of 512 give 0")
    assert "over the 300 images in" in line and line.endswith("the largest that does is 50")


def test_a_model_too_large_for_the_images_stops_before_any_job(tmp_path):
    config = {"dataset": {"name": "synthetic", "image_size": 64}, "models": ["inception_v3"]}
    line = stops_before_any_job(tmp_path, config)
    assert line == (
        "batchscope: config key dataset.image_size: inception_v3 needs images of at least"
        " 75 px, not 64; set a size it takes"
    )


def test_sweep_writes_a_valid_config_and_plans_the_snakemake_dag(tmp_path):
    images = image_folder(tmp_path / "my images", per_class=20)
    work = tmp_path / "sweep one"
    args = ["sweep", "--model", "resnet18,small_cnn", "--data", str(images)]
    args += ["--batch-sizes", "4,8", "--workers", "0,2", "--mode", "both", "--cores", "2"]
    done = batchscope(*args, "--directory", str(work), "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    saved = work / "batchscope-sweep.yaml"
    config = yaml.safe_load(saved.read_text())
    assert config["dataset"] == {"name": "imagefolder", "path": str(images)}
    assert config["batch_sizes"] == [4, 8] and config["num_workers"] == [0, 2]
    assert config["models"] == ["resnet18", "small_cnn"]
    check(config, SCHEMA)
    jsonschema.validate(with_defaults(config, SCHEMA), SCHEMA)
    assert saved.read_text().split("\n", 2)[2] in done.stdout  # printed as saved
    planned = job_counts(done.stdout)
    # modes x models x batch sizes x workers, one round planned; one ceiling per batch size
    assert planned["bench"] == 2 * 2 * 2 * 2 and planned["ceiling"] == 2 * 2 * 2
    assert not (work / "results").exists()
    cli = snakemake(work, "-n", "--configfile", str(saved), "--cores", "2")
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert job_counts(cli.stdout + cli.stderr) == planned


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--batch-sizes", "8,sixteen"], "--batch-sizes '8,sixteen': expected whole numbers"),
        (["--workers", "-1"], "--workers '-1': every value must be at least 0"),
        (["--data", "no such folder"], "--data 'no such folder': not a folder"),
        (["--model", "resnet1000"], "config key models[0]: 'resnet1000' is not allowed"),
        (["--batch-sizes", "4096"], "config key batch_sizes[0]: train batches of 4096 give 0"),
    ],
)
def test_sweep_bad_arguments_are_one_line_and_write_nothing(tmp_path, args, expected):
    image_folder(tmp_path / "imgs", per_class=10)
    base = {"--model": "small_cnn", "--data": "imgs", "--batch-sizes": "4"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [part for pair in base.items() for part in pair]
    done = batchscope("sweep", *flat, "--directory", "out", "--dry-run", cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"batchscope sweep: error: {expected}")
    assert not (tmp_path / "out").exists()


def test_training_on_an_image_folder_validates_on_held_out_images_only(tmp_path):
    images = image_folder(tmp_path / "images", per_class=8, classes=("a", "b"))
    config = {
        "dataset": {"name": "imagefolder", "path": str(images), "image_size": 8,
                    "val_fraction": 0.25},
        "models": ["small_cnn"],
        "modes": ["train"],
        "batch_sizes": [2],
        "num_workers": [0],
        "measure": {"warmup_steps": 1, "repeats": 1, "min_steps": 1, "ceiling": False,
                    **ONE_ROUND},
        "sweep": NO_RACE,
    }  # fmt: skip
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    done = snakemake(tmp_path, "--configfile", str(path), "--cores", "1",
                     "results/runs/train/small_cnn/bs2_acc1_nw0_seed0_round1.json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(
        (tmp_path / "results/runs/train/small_cnn/bs2_acc1_nw0_seed0_round1.json").read_text()
    )
    assert result["status"] == "ok"
    assert result["val_samples"] == 4  # 2 of each class's 8, not all 16
