"""End to end: a sweep mixing a torchvision name, a timm name and the user's own factory with
kwargs and a checkpoint; and each mistake in a model entry stopped, in one line naming the
entry, before any benchmark job."""

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from batchscope.core import paths, results
from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import finished_jobs, run_mtimes, snakemake, write_config

pytestmark = pytest.mark.e2e

pytest.importorskip("timm")

MYNET = """
from torch import nn


def build(width=8, in_ch=3, classes=4):
    return nn.Sequential(
        nn.Conv2d(in_ch, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(width, classes),
    )


def not_a_module():
    return [nn.Linear(2, 2)]
"""

MYNET_ENTRY = {
    "name": "mynet",
    "factory": "models/mynet.py:build",
    "kwargs": {"width": 6},
    "weights": "ckpt/mynet.pt",
}

#: A Hugging Face image classifier built from its config (no hub): one tiny ViT layer.
TINY_VIT = {
    "name": "tiny_vit",
    "hf": "vit",
    "task": "image_classification",
    "config": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
               "intermediate_size": 32, "patch_size": 8},
}  # fmt: skip

SWEEP = {
    "dataset": {
        "name": "synthetic",
        "channels": 3,
        "image_size": 32,
        "num_classes": 4,
        "num_samples": 64,
    },
    "models": ["resnet18", "timm:convnext_atto", MYNET_ENTRY, TINY_VIT],
    "modes": ["train", "infer"],
    "batch_sizes": [8],
    "num_workers": [0],
    "seeds": [0],
    "measure": {"warmup_steps": 1, **ONE_ROUND},
    "sweep": NO_RACE,
    "train": {"max_steps": 3},
    "infer": {"max_steps": 3},
}


def _user_files(workdir: Path, width: int = 6) -> Path:
    """The user's model file, beside the config, and a checkpoint of it (under "state_dict")."""
    (workdir / "models").mkdir(exist_ok=True)
    (workdir / "models" / "mynet.py").write_text(MYNET)
    (workdir / "ckpt").mkdir(exist_ok=True)
    namespace: dict = {}
    exec(MYNET, namespace)
    torch.manual_seed(width)
    weights = workdir / "ckpt" / "mynet.pt"
    torch.save({"state_dict": namespace["build"](width=width).state_dict(), "epoch": 3}, weights)
    return weights


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("models")
    weights = _user_files(workdir)
    config = write_config(workdir, **SWEEP)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir, config, weights


def test_a_mixed_sweep_runs_to_a_summary_recording_each_models_source(mixed_run):
    workdir, _, weights = mixed_run
    summary = pd.read_csv(workdir / "results" / "summary.csv").set_index(["model", "mode"])
    names = ("resnet18", "timm_convnext_atto", "mynet", "tiny_vit")
    assert set(summary.index) == {(n, m) for n in names for m in ("train", "infer")}
    assert (summary["status"] == "ok").all() and (summary["samples_per_s"] > 0).all()
    rows = summary.xs("infer", level="mode")
    assert dict(rows["model_source"]) == {
        "resnet18": "torchvision",
        "timm_convnext_atto": "timm",
        "mynet": "factory",
        "tiny_vit": "hf",
    }
    assert rows.loc["timm_convnext_atto", "model_id"] == "convnext_atto"
    mynet_sha = hashlib.sha256((workdir / "models" / "mynet.py").read_bytes()).hexdigest()
    assert rows.loc["mynet", "model_id"] == f"models/mynet.py:build@sha256:{mynet_sha[:12]}"
    assert json.loads(rows.loc["mynet", "model_kwargs"]) == {"width": 6}
    assert rows.loc["mynet", "weights_sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert rows[["weights_sha256"]].drop("mynet").isna().all().all()
    # width 6: conv 3*6*9 + 6, linear 6*4 + 4
    assert rows.loc["mynet", "num_parameters"] == 3 * 6 * 9 + 6 + 6 * 4 + 4
    recommendation = (workdir / "results" / "recommendation.md").read_text()
    for name in names:
        assert f"## train / {name} " in recommendation and f"## infer / {name} " in recommendation
    assert (workdir / "results" / "plots" / "throughput.png").stat().st_size > 0


def test_each_model_was_checked_once_and_its_check_says_what_it_found(mixed_run):
    workdir, _, _ = mixed_run
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    for name in ("resnet18", "timm_convnext_atto", "mynet", "tiny_vit"):
        check = json.loads((workdir / "results" / "models" / f"{name}.json").read_text())
        assert check["name"] == name
        assert check["input_shape"] == [3, 32, 32] and check["output_shape"] == [1, 4]
        params = summary.loc[summary["model"] == name, "num_parameters"]
        assert (params == check["num_parameters"]).all()
        assert check["flops_per_sample_infer"] > 0


def test_new_weights_and_a_model_added_rerun_only_those_models_jobs(mixed_run, tmp_path):
    """In a copy of the finished sweep: mynet's weights change and a model is added. The rerun
    (to the runs, not the report) measures mynet's and the new model's points, and leaves every
    other result as it was: a model added must not rerun the finished sweep (snakemake reruns a
    job whose input a job of the same run remade, ancient or not; grid.smk: set_up)."""
    source, _, _ = mixed_run
    workdir = tmp_path / "copy"
    shutil.copytree(source, workdir, symlinks=True)
    weights = _user_files(workdir, width=6)  # same shapes, other values
    torch.save({"model": torch.load(weights)["state_dict"]}, weights)
    added = {"name": "mynet2", "factory": MYNET_ENTRY["factory"], "kwargs": {"width": 5}}
    config = write_config(workdir, **{**SWEEP, "models": [*SWEEP["models"], added]})
    before = run_mtimes(workdir)
    targets = [f"results/runs/{p}" for p in before] + [
        f"results/runs/{mode}/mynet2/bs8_acc1_nw0_seed0_round1.json" for mode in ("train", "infer")
    ]
    done = snakemake(
        workdir, *targets, "--cores", "2", "--configfile", str(config)
    )  # targets first: --configfile takes several
    assert done.returncode == 0, done.stderr[-3000:]
    after = run_mtimes(workdir)
    redone = {p for p, mtime in before.items() if after[p] != mtime}
    assert redone == {f"{mode}/mynet/bs8_acc1_nw0_seed0_round1.json" for mode in ("train", "infer")}
    assert set(after) - set(before) == {t.removeprefix("results/runs/") for t in targets[-2:]}
    ran = finished_jobs(done.stdout + done.stderr)
    assert ran["model_check"] == 2 and ran["model_check_spec"] == 2  # mynet's again, mynet2's
    assert ran["bench"] == 4


MISTAKES = [
    ("file missing", {"factory": "models/nonet.py:build"}, "factory file 'models/nonet.py' not"),
    ("function missing", {"factory": "models/mynet.py:biuld"}, "no function 'biuld' (did you"),
    ("not a module", {"factory": "models/mynet.py:not_a_module", "kwargs": {}, "weights": None},
     "returned a list, not a torch.nn.Module"),
    ("wrong channels", {"kwargs": {"width": 6, "in_ch": 1}, "weights": None},
     "forward pass on one sample of shape (3, 32, 32) (synthetic) raised RuntimeError"),
    ("weight keys", {"kwargs": {"width": 5}}, "do not match the model (shape: 0.weight"),
    ("unknown timm", {"factory": None, "name": None, "timm": "convnext_atoo", "weights": None,
                      "kwargs": {}}, "unknown timm model 'convnext_atoo' (did you mean"),
]  # fmt: skip


def test_the_same_sweep_from_two_checkouts_in_other_folders_gives_rows_that_match(tmp_path):
    """A result names a factory model by its file's path from the config's folder and its hash,
    not by where the checkout lies: the smallest real job (one infer point of the factory
    model), run in a project folder and in a copy of it elsewhere, gives the same identity."""
    first = tmp_path / "one" / "project"
    first.mkdir(parents=True)
    _user_files(first)
    tiny = {**SWEEP["measure"], "warmup_steps": 1}
    write_config(
        first, **{**SWEEP, "models": [MYNET_ENTRY], "modes": ["infer"], "measure": tiny,
                  "infer": {"max_steps": 2}},
    )  # fmt: skip
    second = tmp_path / "two" / "somewhere" / "else"
    shutil.copytree(first, second)
    run = paths.run_stem(mode="infer", model="mynet", batch_size=8, accumulation_steps=1,
                         num_workers=0, seed=0, round=1) + ".json"  # fmt: skip
    rows = []
    for project in (first, second):
        config = str(project / "my config.yaml")
        done = snakemake(project, run, "--cores", "2", "--configfile", config)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads((project / run).read_text())
        rows.append({key: result[key] for key in ("model_id", *results.GRID_KEYS)})
    sha = hashlib.sha256((first / "models" / "mynet.py").read_bytes()).hexdigest()
    assert rows[0]["model_id"] == f"models/mynet.py:build@sha256:{sha[:12]}"
    assert rows[0] == rows[1]


@pytest.mark.parametrize(
    ("change", "says"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_a_mistake_in_a_model_entry_is_one_line_and_no_benchmark_runs(tmp_path, change, says):
    _user_files(tmp_path)
    entry = {k: v for k, v in {**MYNET_ENTRY, **change}.items() if v is not None}
    sweep = {**SWEEP, "models": ["small_cnn", entry], "modes": ["infer"]}
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(write_config(tmp_path, **sweep)))
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("batchscope:")]
    named = entry.get("name") or "timm_convnext_atoo"
    assert len(ours) == 1 and ours[0].startswith(f"batchscope: model entry {named}:"), ours
    assert says in ours[0], ours[0]
    assert not list(tmp_path.glob("results/runs/**/*.json"))
    assert not list(tmp_path.glob("logs/bench/**/*.log"))
    shutil.rmtree(tmp_path / "models")
