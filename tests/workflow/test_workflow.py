"""End to end: the Snakemake workflow on tiny configs, run from a temporary working directory
(``-s <repo>/Snakefile --directory <tmp>``), checking what the outputs say."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import (
    TINY,
    finished_jobs,
    is_png,
    job_counts,
    needs_fmnist,
    run_mtimes,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.e2e


def test_dry_run_lists_exactly_one_job_per_grid_point(tmp_path):
    config = write_config(tmp_path, **{**TINY, "seeds": [0, 1], "batch_sizes": [7, 50, 64]})
    done = snakemake(tmp_path, "-n", "--configfile", str(config))
    assert done.returncode == 0, done.stderr
    counts = job_counts(done.stdout + done.stderr)
    assert counts == {
        "all": 1,
        "aggregate": 1,
        "bench": 2 * 1 * 3 * 2 * 2,
        "run_spec": 2 * 1 * 3 * 2 * 2,  # each job's run spec, written by the workflow itself
        "ceiling": 2 * 1 * 3,  # one compute-only run per mode x model x batch size
        "ceiling_spec": 2 * 1 * 3,
        "model_check": 1,  # one per model, before any benchmark job
        "model_check_spec": 1,
        "models_checked": 1,  # the checkpoint every benchmark job waits for
        "capture_environment": 1,
        "download_dataset": 1,
        "plots": 1,
        "answer": 1,
        "recommend": 1,
        "total": 2 * (2 * 3 * 2 * 2 + 2 * 3) + 10,
    }


def test_accumulation_multiplies_the_training_grid_only(tmp_path):
    train = {**TINY["train"], "accumulation_steps": [1, 4]}
    config = write_config(tmp_path, **{**TINY, "train": train})
    done = snakemake(tmp_path, "-n", "--configfile", str(config))
    assert done.returncode == 0, done.stderr
    counts = job_counts(done.stdout + done.stderr)
    assert counts["bench"] == 2 * 2 * 2 + 2 * 2  # train: batch x accumulation x workers; infer
    outputs = [line.split("output: ")[1] for line in done.stdout.splitlines() if "output: " in line]
    runs = {o.split(",")[0] for o in outputs if o.startswith("results/runs/")}
    assert "results/runs/train/small_cnn/bs50_acc4_nw1_seed0_round1.json" in runs
    assert {r for r in runs if "_acc4_" in r and "/infer/" in r} == set()
    # the wildcard reaches the job: its spec (written by the workflow, no job environment)
    spec_path = "specs/runs/train/small_cnn/bs50_acc4_nw1_seed0_round1.json"
    written = snakemake(tmp_path, spec_path, "--cores", "1", "--configfile", str(config))
    assert written.returncode == 0, written.stderr
    spec = json.loads((tmp_path / spec_path).read_text())
    assert (spec["batch_size"], spec["accumulation_steps"], spec["num_workers"]) == (50, 4, 1)
    assert spec["train"]["lr"] == 0.02 and spec["measure"]["warmup_steps"] == 2


BAD = [
    ("models", ["resnet1000"], "models[0]"),
    ("batch_sizes", [0], "batch_sizes[0]"),
    ("modes", ["evaluate"], "modes[0]"),
    ("num_workers", [], "num_workers"),
    ("seeds", "zero", "seeds"),
]


@pytest.mark.parametrize(("key", "value", "named"), BAD, ids=[b[0] for b in BAD])
def test_malformed_config_stops_before_any_job_with_one_line(tmp_path, key, value, named):
    config = write_config(tmp_path, **{**TINY, key: value})
    done = snakemake(tmp_path, "--cores", "1", "--configfile", str(config))
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("batchscope:")]
    assert len(ours) == 1 and ours[0].startswith(f"batchscope: config key {named}:")
    assert not (tmp_path / "results").exists() and not (tmp_path / "resources").exists()


def test_config_on_the_command_line_is_read_as_yaml(tmp_path):
    config = write_config(tmp_path, **TINY)
    done = snakemake(tmp_path, "-n", "--configfile", str(config), "--config", "batch_sizes=[16,64]")
    assert done.returncode == 0, done.stderr
    runs = {line.split("output: ")[1] for line in done.stdout.splitlines() if "output: " in line}
    batches = {o.split("/bs")[1].split("_")[0] for o in runs if o.startswith("results/runs/")}
    assert batches == {"16", "64"}
    for value, named in [("[0]", "batch_sizes[0]"), ("abc", "batch_sizes")]:
        refused = snakemake(
            tmp_path, "-n", "--configfile", str(config), "--config", f"batch_sizes={value}"
        )
        ours = [line for line in refused.stderr.splitlines() if line.startswith("batchscope:")]
        assert refused.returncode != 0 and len(ours) == 1
        assert ours[0].startswith(f"batchscope: config key {named}:")


# fmnist_run (tests/workflow/conftest.py): the tiny sweep, shared with the other modules


@needs_fmnist
def test_summary_has_one_ok_row_per_grid_point_with_the_environment(fmnist_run):
    workdir, _ = fmnist_run
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    grid = {(m, b, w) for m in ("train", "infer") for b in (7, 50) for w in (0, 1)}
    assert (
        set(zip(summary["mode"], summary["batch_size"], summary["num_workers"], strict=True))
        == grid
    )
    assert len(summary) == len(grid)
    assert (summary["status"] == "ok").all()
    assert (summary["samples_per_s"] > 0).all()
    assert ((summary["data_wait_frac"] >= 0) & (summary["data_wait_frac"] <= 1)).all()
    assert (summary["peak_mem_mb"] > 0).all()
    # sweep.launch's default: each run forked from the warm interpreter, the ceilings too
    assert (summary["launch"] == "forked").all()
    ceilings = (workdir / "results" / "ceiling").rglob("*.json")
    assert {json.loads(path.read_text())["launch"] for path in ceilings} == {"forked"}
    env = json.loads((workdir / "results" / "env" / "environment.json").read_text())
    assert (summary["env_fingerprint"] == env["fingerprint"]).all()
    assert env["packages"]["torch"] and env["pip_freeze"]
    train = summary[summary["mode"] == "train"]
    assert train["val_accuracy"].between(0, 1).all() and train["final_loss"].notna().all()
    assert summary.loc[summary["mode"] == "infer", "val_accuracy"].isna().all()
    # every row is held against the compute-only ceiling of its mode and batch size
    assert (summary["ceiling_samples_per_s"] > 0).all()
    assert (
        summary["frac_of_ceiling"] == summary["samples_per_s"] / summary["ceiling_samples_per_s"]
    ).all()


@needs_fmnist
def test_each_run_measures_exactly_its_batch_size_after_warmup(fmnist_run):
    workdir, _ = fmnist_run
    steps = pd.read_csv(
        workdir / "results/runs/train/small_cnn/bs7_acc1_nw1_seed0_round1.steps.csv"
    )
    # the phases are timed in 3 diagnostic steps after max_steps, never in the windows
    assert list(steps["phase"]) == ["warmup"] * 2 + ["measured"] * 6 + ["diagnostic"] * 3
    assert list(steps["samples_seen"]) == [7 * i for i in range(1, 12)]
    run = workdir / "results/runs/train/small_cnn/bs7_acc1_nw1_seed0_round1.json"
    result = json.loads(run.read_text())
    assert result["measured_samples"] == 42 and result["batch_size"] == 7
    assert result["pythonhashseed"] == "0" and result["deterministic"] is True
    curves = pd.read_csv(workdir / "results" / "curves.csv")
    assert len(curves) == 8 * (8 + 3)


@needs_fmnist
def test_plots_recommendation_and_report_are_written_from_the_numbers(fmnist_run):
    workdir, _ = fmnist_run
    results = workdir / "results"
    for name in ("throughput", "peak_memory", "data_wait", "loss_curves", "val_accuracy"):
        assert is_png(results / "plots" / f"{name}.png"), name
    summary = pd.read_csv(results / "summary.csv")
    text = (results / "recommendation.md").read_text()
    for mode in ("train", "infer"):
        rows = summary[summary["mode"] == mode]
        best = rows.loc[rows["samples_per_s"].idxmax()]
        assert f"{best['samples_per_s']:.1f}" in text, f"{mode}: best throughput not cited"
    html = (results / "report.html").read_text()
    assert "throughput.png" in html and "recommendation.html" in html
    if not Path("/sys/class/powercap").exists():  # no energy counter on this machine
        assert summary["energy_source"].str.startswith("unavailable: no RAPL").all()
        assert summary["energy_j_per_sample"].isna().all()
        assert "Energy was not measured: unavailable: no RAPL energy counter" in text
        assert is_png(results / "plots" / "energy.png")  # declared: it says why
        assert "energy.png" not in text
        answer = json.loads((results / "recommendation.json").read_text())
        for found in (a["objectives"] for a in answer["answers"]):
            assert found["energy_unavailable"].startswith("unavailable: no RAPL")


@needs_fmnist
def test_rerun_does_only_what_is_missing(fmnist_run):
    workdir, config = fmnist_run
    nothing = snakemake(workdir, "-n", "--configfile", str(config))
    assert "Nothing to be done" in nothing.stdout + nothing.stderr
    # as after a run in which one grid point failed: its result and the table are missing
    removed = [workdir / "results/runs/infer/small_cnn/bs50_acc1_nw0_seed0_round1.json"]
    removed.append(workdir / "results/summary.csv")
    for path in removed:  # set aside, restored for the tests that read them
        path.rename(path.with_name(path.name + ".aside"))
    try:
        again = snakemake(workdir, "-n", "--configfile", str(config))
    finally:
        for path in removed:
            path.with_name(path.name + ".aside").rename(path)
    counts = job_counts(again.stdout + again.stderr)
    assert counts == {
        "bench": 1,
        "aggregate": 1,
        "plots": 1,
        "answer": 1,
        "recommend": 1,
        "all": 1,
        "total": 6,
    }


@needs_fmnist
def test_the_dataset_fetched_again_reruns_only_the_missing_run(fmnist_run, tmp_path):
    """In a copy of the finished sweep, the dataset's cache deleted and one result missing: the
    rerun (to the runs) fetches the dataset and measures that point, and no other (Snakemake
    reruns a job whose input a job of the same run remade, ancient or not; grid.smk: set_up)."""
    source, config = fmnist_run
    workdir = tmp_path / "copy"
    dataset = Path("resources/datasets/fashion_mnist")
    shutil.copytree(source, workdir, symlinks=True, ignore=lambda d, names: (
        ["fashion_mnist"] if Path(d) == source / dataset.parent else []))  # fmt: skip
    runs = workdir / "results" / "runs"
    missing = "infer/small_cnn/bs50_acc1_nw0_seed0_round1.json"
    (runs / missing).unlink()
    before = run_mtimes(workdir)
    targets = [f"results/runs/{p}" for p in [*before, missing]]
    done = snakemake(
        workdir, *targets, "--cores", "2", "--configfile", str(workdir / config.name)
    )  # targets first: --configfile takes several
    assert done.returncode == 0, done.stderr[-3000:]
    after = run_mtimes(workdir)
    assert {p for p in after if before.get(p) != after[p]} == {missing}
    assert (workdir / dataset).is_dir()
    ran = finished_jobs(done.stdout + done.stderr)
    assert ran == {"bench": 1, "download_dataset": 1}  # its spec was kept


def test_oom_is_a_result_and_the_sweep_completes(tmp_path):
    config = write_config(
        tmp_path,
        dataset={"name": "synthetic", "channels": 3, "image_size": 64, "num_samples": 8192},
        models=["small_cnn"],
        modes=["infer"],
        batch_sizes=[4, 4096],
        num_workers=[0],
        seeds=[0],
        measure={"warmup_steps": 1, **ONE_ROUND},
        sweep=NO_RACE,
        infer={"max_steps": 3},
        cpu_memory_budget_mb=64,  # a 4096 x 3 x 64 x 64 float batch alone is 192 MB
    )
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv").set_index("batch_size")
    assert summary.loc[4, "status"] == "ok"
    assert summary.loc[4096, "status"] == "oom"
    assert "allocate" in summary.loc[4096, "error"]
    assert pd.isna(summary.loc[4096, "samples_per_s"])
    assert "4096" in (tmp_path / "results" / "recommendation.md").read_text()
    assert is_png(tmp_path / "results" / "plots" / "throughput.png")


def test_accumulation_axis_from_config_to_table_and_recommendation(tmp_path):
    config = write_config(
        tmp_path,
        dataset={"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 512},
        models=["small_cnn"],
        modes=["train", "infer"],
        batch_sizes=[8],
        num_workers=[0],
        seeds=[0],
        measure={"warmup_steps": 1, "repeats": 1, **ONE_ROUND},
        sweep=NO_RACE,
        train={
            "max_steps": 5,
            "lr": 0.01,
            "lr_scaling": "linear",
            "base_batch_size": 8,
            "accumulation_steps": [1, 3],
        },
        infer={"max_steps": 5},
    )
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    runs = tmp_path / "results" / "runs"
    assert sorted(p.relative_to(runs).as_posix() for p in runs.rglob("*.json")) == [
        "infer/small_cnn/bs8_acc1_nw0_seed0_round1.json",
        "train/small_cnn/bs8_acc1_nw0_seed0_round1.json",
        "train/small_cnn/bs8_acc3_nw0_seed0_round1.json",
    ]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    train = summary[summary["mode"] == "train"].set_index("accumulation_steps")
    assert list(train["effective_batch_size"].sort_index()) == [8, 24]
    assert train.loc[3, "lr"] == pytest.approx(3 * train.loc[1, "lr"])  # scaled with the batch
    steps = pd.read_csv(runs / "train/small_cnn/bs8_acc3_nw0_seed0_round1.steps.csv")
    assert steps["samples_seen"].diff().dropna().eq(24).all()  # one update per 3 micro-batches
    points = pd.read_csv(tmp_path / "results" / "summary_by_point.csv")
    assert sorted(points.loc[points["mode"] == "train", "accumulation_steps"]) == [1, 3]
    recommendation = (tmp_path / "results" / "recommendation.md").read_text()
    assert "## train / small_cnn (synthetic), 3 accumulation steps" in recommendation
    assert recommendation.count("## train / small_cnn (synthetic)") == 2


def test_corrupt_image_is_skipped_counted_and_logged(tmp_path):
    from PIL import Image

    images = tmp_path / "my images"
    for label in ("cat", "dog"):
        (images / label).mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (20, 20), (40 * i, 10, 200)).save(images / label / f"{i}.png")
    (images / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    config = write_config(
        tmp_path,
        dataset={"name": "imagefolder", "path": str(images), "image_size": 16},
        models=["small_cnn"],
        modes=["infer"],
        batch_sizes=[4],
        num_workers=[0],
        seeds=[0],
        measure={
            "warmup_steps": 1,
            "repeats": 1,
            "min_steps": 2,
            **ONE_ROUND,
        },  # inference ends when its window has 2 steps: with the warm-up, one pass
        sweep=NO_RACE,
    )
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    row = pd.read_csv(tmp_path / "results" / "summary.csv").iloc[0]
    assert row["status"] == "ok" and row["images_skipped"] == 1
    assert row["measured_samples"] == 4 * 2  # 12 readable images: 3 steps, 1 of them warm-up
    assert "broken.png" in (tmp_path / "logs" / "download" / "imagefolder.log").read_text()
    recommendation = (tmp_path / "results" / "recommendation.md").read_text()
    assert "Data: 1 unreadable image in the image folder was skipped in every run" in recommendation


def test_checksum_mismatch_fails_the_download_and_leaves_no_dataset(tmp_path):
    import gzip

    mirror = tmp_path / "bad mirror"
    mirror.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):  # fmt: skip
        (mirror / f"{name}.gz").write_bytes(gzip.compress(b"not the real data"))
    dataset = {"name": "fashion_mnist", "mirrors": [str(mirror) + "/"]}
    config = write_config(tmp_path, **{**TINY, "dataset": dataset})
    done = snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert done.returncode != 0
    log = (tmp_path / "logs" / "download" / "fashion_mnist.log").read_text()
    assert "md5" in log
    assert not (tmp_path / "resources" / "datasets" / "fashion_mnist").exists()
    assert not list((tmp_path / "results").glob("runs/**/*.json"))


@needs_fmnist
def test_compare_shows_the_environment_difference_beside_the_metric_difference(fmnist_run):
    """The seed articles' story: accuracy drops at one batch size in an environment whose BLAS
    differs. Folder b is folder a with its package metadata and one accuracy changed."""
    import shutil

    workdir, _ = fmnist_run
    a, b = workdir / "results", workdir / "results-b"
    shutil.copytree(a, b)
    env = json.loads((b / "env" / "environment.json").read_text())
    env["pip_freeze"] = [
        "numpy==1.26.4" if line.startswith("numpy==") else line for line in env["pip_freeze"]
    ]
    env["blas"]["numpy"]["blas"] = "mkl"
    (b / "env" / "environment.json").write_text(json.dumps(env))
    summary = pd.read_csv(b / "summary.csv")
    dropped = (summary["mode"] == "train") & (summary["batch_size"] == 50)
    summary.loc[dropped, "val_accuracy"] -= 0.03
    summary.to_csv(b / "summary.csv", index=False)

    env_path = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "batchscope", "compare", str(a), str(b)],
        capture_output=True, text=True, env=env_path, check=True,
    )  # fmt: skip
    report = done.stdout
    env_section = report.split("## Metric differences beyond the noise")[0]
    assert "pip.numpy" in env_section and "1.26.4" in env_section
    assert "blas.numpy.blas" in env_section and "mkl" in env_section
    beyond = report.split("## Metric differences beyond the noise")[1].split("## All metric")[0]
    rows = [line for line in beyond.splitlines() if line.startswith("| train")]
    assert len(rows) == 2 and all("| 50 |" in r and "val_accuracy" in r for r in rows)


def _default_sweep_outputs() -> set[str]:
    """Every file the default sweep (config/config.yaml) is known to make before it starts:
    what it made before the run spec existed, with the first round's runs (later rounds are
    what the decision after each round keeps), that decision, and the machine-readable answer.
    The contract that refactoring the workflow must keep."""
    grid = [(m, b, w) for m in ("train", "infer") for b in (32, 64, 128, 256) for w in (0, 2)]
    runs = {
        f"results/runs/{m}/small_cnn/bs{b}_acc1_nw{w}_seed0_round1{suffix}"
        for m, b, w in grid
        for suffix in (".json", ".steps.csv")
    }
    ceilings = {
        f"results/ceiling/{m}/small_cnn/bs{b}{suffix}"
        for m, b, _ in grid
        for suffix in (".json", ".steps.csv")
    }
    plots = ("breakdown", "data_wait", "loss_curves", "peak_memory", "throughput", "val_accuracy")
    tables = ("curves.csv", "summary.csv", "summary_by_point.csv", "env/environment.json")
    documents = ("recommendation.md", "recommendation.html", "recommendation.json")
    return (
        runs
        | ceilings
        | {f"results/plots/{name}.png" for name in plots}
        | {"results/plots/energy.png"}  # the recommendation wrote it (with energy), undeclared
        | {f"results/{name}" for name in (*tables, *documents)}
        | {"results/rounds/round1.json", "results/rounds/round2.json"}
        | {"resources/datasets/fashion_mnist"}
        | {"results/models/small_cnn.json"}
        | {"results/models_checked.json"}  # the checkpoint the benchmarks wait for
    )


def test_the_default_sweep_makes_the_files_it_always_made_plus_one_spec_per_job(tmp_path):
    done = snakemake(tmp_path, "--summary", "--cores", "2")
    assert done.returncode == 0, done.stderr
    files = {line.split("\t")[0] for line in done.stdout.splitlines() if "\t" in line}
    files.discard("output_file")
    specs = {f for f in files if f.startswith("specs/")}
    assert files - specs == _default_sweep_outputs()
    # one spec per benchmark and ceiling job, laid out as their results are
    jobs = {f.removeprefix("results/").removesuffix(".json") for f in files if f.endswith(".json")}
    assert specs == {
        f"specs/{job}.json" for job in jobs if job.startswith(("runs/", "ceiling/", "models/"))
    }
