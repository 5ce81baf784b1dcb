"""End to end: each example of ``examples/`` runs, shrunk and offline, to a summary and a
recommendation, from a copy of its folder (its own config.yaml, with only the grid and the
measuring made tiny), so that an example's config, files and relative paths stay runnable as the
code changes. The Hugging Face example has its own test (examples/tiny_gpt2)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import DEBIAN_FMNIST, REPO, job_counts, snakemake

pytestmark = pytest.mark.e2e

EXAMPLES = REPO / "examples"

#: Measuring made tiny; the example's dataset, models and modes are kept.
TINY_MEASURE = {
    "measure": {"warmup_steps": 1, "repeats": 1, "diagnostic_steps": 0, "ceiling": False},
    "train": {"max_steps": 3, "validate": False},  # no pass over the held-out split
    "infer": {"max_steps": 3},
    # these machines run other work beside the tests: no verdict depends on it
    "sweep": {"foreign_cpu_limit_frac": 1.0},
}


def merged(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def copied_example(name: str, where: Path, **grid) -> Path:
    """The example's folder copied to ``where`` (what its prepare step writes left out), its
    config.yaml rewritten shrunk; returns the copy's config path."""
    folder = where / name
    shutil.copytree(EXAMPLES / name, folder, ignore=shutil.ignore_patterns("data", "__pycache__"))
    config = folder / "config.yaml"
    tiny = merged(TINY_MEASURE, {"measure": ONE_ROUND, "sweep": NO_RACE})
    config.write_text(yaml.safe_dump(merged(yaml.safe_load(config.read_text()), {**tiny, **grid})))
    return config


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def answered(results: Path, summary: pd.DataFrame) -> None:
    """The recommendation is complete: an answer for each mode x model measured, naming a
    point of its grid, and the Markdown written."""
    answer = json.loads((results / "recommendation.json").read_text())
    found = {(a["mode"], a["model"]): a["pick"] for a in answer["answers"]}
    assert set(found) == set(zip(summary["mode"], summary["model"], strict=True))
    grid = set(zip(summary["batch_size"], summary["num_workers"], strict=True))
    assert all((p["batch_size"], p["num_workers"]) in grid for p in found.values())
    assert (results / "recommendation.md").read_text().strip()


# ----------------------------------------------------------------- (a) the seeds' story


@pytest.fixture(scope="module")
def seeds_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seeds")
    config = copied_example("seeds_resnet_jpegs", tmp, batch_sizes=[8, 16], num_workers=[0, 1])
    prepared = subprocess.run(
        [sys.executable, str(config.parent / "prepare.py"), "--per-class", "6", "--size", "40",
         "--image-size", "32", "--steps", "1", "--batch-size", "8"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    workdir = tmp / "out"
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return config.parent, workdir / "results", prepared.stdout


def test_seeds_prepare_writes_a_folder_of_jpegs_and_a_checkpoint(seeds_run):
    example, _, _ = seeds_run
    jpegs = sorted((example / "data" / "jpegs").glob("*/*.jpg"))
    assert len(jpegs) == 60 and len({p.parent.name for p in jpegs}) == 10
    assert jpegs[0].read_bytes()[:2] == b"\xff\xd8"  # JPEG, as a service's folder holds


def test_seeds_example_sweeps_its_checkpoint_over_batch_and_workers(seeds_run):
    example, results, _ = seeds_run
    summary = pd.read_csv(results / "summary.csv")
    grid = set(zip(summary["batch_size"], summary["num_workers"], strict=True))
    assert grid == {(8, 0), (8, 1), (16, 0), (16, 1)}
    assert set(summary["mode"]) == {"infer"} and set(summary["model"]) == {"my_resnet18"}
    assert (summary["status"] == "ok").all() and (summary["samples_per_s"] > 0).all()
    # the checkpoint prepare.py trained, found beside the config and loaded
    assert set(summary["weights_sha256"]) == {sha256(example / "data" / "checkpoint.pt")}
    assert set(summary["model_id"]) == {"resnet18"}
    answered(results, summary)


# ------------------------------------------------------------ (b) a module of your own


@pytest.mark.skipif(not DEBIAN_FMNIST.is_dir(), reason="needs Debian's dataset-fashion-mnist")
def test_custom_module_example_trains_and_infers_each_kwargs_variant(tmp_path):
    config = copied_example("custom_module", tmp_path, batch_sizes=[16], num_workers=[0])
    done = snakemake(tmp_path / "out", "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    results = tmp_path / "out" / "results"
    summary = pd.read_csv(results / "summary.csv")
    entries = {e["name"]: e for e in yaml.safe_load(config.read_text())["models"]}
    assert len(entries) == 2
    assert set(zip(summary["model"], summary["mode"], strict=True)) == {
        (name, mode) for name in entries for mode in ("train", "infer")
    }
    assert (summary["status"] == "ok").all() and (summary["samples_per_s"] > 0).all()
    assert set(summary["model_source"]) == {"factory"}
    model_sha = sha256(config.parent / "model.py")[:12]
    assert set(summary["model_id"]) == {f"model.py:build@sha256:{model_sha}"}
    for name, rows in summary.groupby("model"):
        assert {json.dumps(json.loads(k), sort_keys=True) for k in rows["model_kwargs"]} == {
            json.dumps(entries[name]["kwargs"], sort_keys=True)
        }
    # the wider variant has more parameters: each row was built from its own kwargs
    params = summary.groupby("model")["num_parameters"].first()
    assert params["sepnet_wide"] > params["sepnet_narrow"]
    answered(results, summary)


# ---------------------------------------------------------------- the README's command


def test_the_readme_command_plans_an_example_from_the_repo_root(tmp_path):
    """The command examples/README.md gives, run from the repo root as written but with its
    --directory in tmp: the config's relative paths resolve beside it, not in --directory."""
    readme = (EXAMPLES / "README.md").read_text()
    commands = re.findall(r"^snakemake .*--configfile examples/<x>/config\.yaml.*$", readme, re.M)
    assert len(commands) == 1, "the README gives the command to run any example"
    line = commands[0].replace("<x>", "custom_module")
    args = line.split()[1:]
    args[args.index("--directory") + 1] = str(tmp_path / "out")
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", *args, "-n"],
        cwd=REPO, capture_output=True, text=True, timeout=300, env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout)["model_check"] == 2  # both entries of model.py found
