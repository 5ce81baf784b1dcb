"""The devices axis end to end on the CPU: a point on two devices runs as two gloo processes
started by torchrun; a rank that dies fails its job with one line naming it, and the rerun
recomputes only that point; the summary, the plot and the recommendation carry the axis.

One sweep (small_cnn, one batch size, no workers, one round, a few steps) serves every test:
first run with rank 1 of the two-device job killed, then run again."""

import json
import math
import os

import pandas as pd
import pytest

from batchscope.bench.job import FAULT_RANK_ENV
from batchscope.core import paths
from tests.workflow.test_workflow import is_png, job_counts, snakemake, write_config

pytestmark = pytest.mark.e2e

BATCH, BASE_LR = 8, 0.02
TINY = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 512},
    "models": ["small_cnn"],
    "modes": ["train"],
    "batch_sizes": [BATCH],
    "num_workers": [0],
    "devices": [1, 2],
    "seeds": [0],
    "device": "cpu",
    "measure": {
        "warmup_steps": 1, "repeats": 1, "min_steps": 2, "min_seconds": 0,
        "diagnostic_steps": 0, "rounds": 1, "ceiling": False,
    },
    # the lr scales to the global batch; the noise scale is measured every other step (steps
    # 2 and 4, off the clock), steps 3 and 5 are measured
    "train": {
        "max_steps": 6, "lr": BASE_LR, "lr_scaling": "linear", "base_batch_size": BATCH,
        "noise_scale_every_steps": 2, "validate": False,
    },
}  # fmt: skip
RUNS = "results/runs/train/small_cnn"
ONE, TWO = f"{RUNS}/bs8_acc1_nw0_seed0_round1", f"{RUNS}/bs8_acc1_nw0_dev2_seed0_round1"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The sweep, run once with rank 1 of the two-device job killed, then again."""
    workdir = tmp_path_factory.mktemp("devices")
    config = write_config(workdir, **TINY)
    args = ["--cores", "2", "--configfile", str(config)]
    os.environ[FAULT_RANK_ENV] = "1"
    try:
        faulty = snakemake(workdir, *args, "--keep-going")
    finally:
        del os.environ[FAULT_RANK_ENV]
    log = workdir / paths.log_of(TWO)
    state = {
        "faulty": faulty,
        "fault_log": log.read_text() if log.exists() else "",
        "two_after_fault": (workdir / f"{TWO}.json").exists(),
        "one_after_fault": (workdir / f"{ONE}.json").exists(),
        "rerun_plan": snakemake(workdir, *args, "-n"),
    }
    done = snakemake(workdir, *args)
    assert done.returncode == 0, done.stderr[-4000:]
    return workdir, state


def test_a_dead_rank_fails_its_job_with_one_line_naming_it(sweep):
    _, state = sweep
    assert state["faulty"].returncode != 0
    assert state["one_after_fault"] and not state["two_after_fault"]
    lines = [line for line in state["fault_log"].splitlines() if line.strip()]
    assert lines[-1] == "batchscope bench: rank 1 of 2 died: exit code -9 (SIGKILL)"


def test_the_rerun_recomputes_only_the_point_whose_rank_died(sweep):
    _, state = sweep
    plan = state["rerun_plan"]
    counts = job_counts(plan.stdout + plan.stderr)
    assert counts["bench_ddp"] == 1
    assert "bench" not in counts and "model_check" not in counts


def test_two_devices_record_the_ranks_the_global_batch_and_the_scaled_lr(sweep):
    workdir, _ = sweep
    one = json.loads((workdir / f"{ONE}.json").read_text())
    two = json.loads((workdir / f"{TWO}.json").read_text())
    assert (one["devices"], one["world_size"], one["global_batch_size"]) == (1, 1, BATCH)
    assert (two["devices"], two["world_size"], two["global_batch_size"]) == (2, 2, 2 * BATCH)
    assert len(two["samples_per_s_per_rank"]) == 2
    assert two["samples_per_s"] == pytest.approx(sum(two["samples_per_s_per_rank"]))
    # linear lr scaling from base_batch_size to the global batch, not the per-device one
    assert one["lr"] == pytest.approx(BASE_LR) and two["lr"] == pytest.approx(2 * BASE_LR)
    # the noise scale: a rank's batch against the all-reduced global one
    assert (two["noise_scale_batch_small"], two["noise_scale_batch_big"]) == (BATCH, 2 * BATCH)
    assert two["noise_scale_measurements"] > 0
    # each rank of two got half the job's two cores as torch threads
    assert (one["torch_threads"], two["torch_threads"]) == (2, 1)


def test_the_summary_has_the_scaling_efficiency_of_each_point(sweep):
    workdir, _ = sweep
    summary = pd.read_csv(workdir / "results" / "summary.csv").set_index("devices")
    assert list(summary.index) == [1, 2]
    speed = summary["samples_per_s"]
    assert summary.loc[1, "scaling_efficiency"] == pytest.approx(1.0)
    expected = speed[2] / (2 * speed[1])
    assert summary.loc[2, "scaling_efficiency"] == pytest.approx(expected)
    by_point = pd.read_csv(workdir / "results" / "summary_by_point.csv").set_index("devices")
    assert by_point.loc[2, "scaling_efficiency"] == pytest.approx(expected)
    assert math.isfinite(expected) and expected > 0


def test_the_scaling_plot_and_a_recommendation_per_devices_value(sweep):
    workdir, _ = sweep
    assert is_png(workdir / "results" / "plots" / "scaling.png")
    answers = json.loads((workdir / "results" / "recommendation.json").read_text())["answers"]
    assert sorted(a["devices"] for a in answers) == [1, 2]
    assert "On 2 devices" in (workdir / "results" / "recommendation.md").read_text()
