"""The devices axis end to end on the CPU: a point on two devices runs as two gloo processes
started by torchrun; a rank that dies fails its job with one line naming it, and the rerun
recomputes only that point; a rank out of memory is the point's result; the summary, the plot
and the recommendation carry the axis.

One sweep (small_cnn, one batch size, no workers, one round, a few steps) serves most tests:
first run with rank 1 of the two-device job killed, then run again. The out-of-memory test
runs the two-device point alone."""

import json
import math
import os

import pandas as pd
import pytest

from batchscope.bench.ddp import OOM_AT_ENV
from batchscope.bench.job import FAULT_RANK_ENV
from batchscope.core import paths
from tests.workflow.helpers import is_png, job_counts, snakemake, write_config

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
    "sweep": {"strategy": "full"},
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


def test_a_rank_out_of_memory_is_the_points_result_and_the_others_stop(tmp_path):
    config = write_config(tmp_path, **{**TINY, "devices": [2]})
    args = [f"{TWO}.json", "--cores", "2", "--configfile", str(config)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(OOM_AT_ENV, "1:3")  # rank 1, at its third step; rank 0 goes on into it
        # far below the 10 minutes rank 0 would wait in the all-reduce for rank 1
        done = snakemake(tmp_path, *args, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads((tmp_path / f"{TWO}.json").read_text())
    assert (result["status"], result["oom_rank"], result["oom_step"]) == ("oom", 1, 3)
    assert result["error"].startswith("rank 1 of 2, step 3: ")
    assert (result["world_size"], result["steps_run"]) == (2, 2)
    assert (tmp_path / f"{TWO}.steps.csv").exists()
    log = (tmp_path / paths.log_of(TWO)).read_text().splitlines()
    assert log[-1].startswith("batchscope bench: out of memory, the point's result is oom: rank 1")
    rerun = snakemake(tmp_path, *args, "-n")
    assert "Nothing to be done" in rerun.stdout + rerun.stderr  # the point has its answer


def _planned_jobs(output: str) -> dict[str, tuple[str, str]]:
    """devices_tag -> (resources line, shell command) of each bench_ddp job a dry run prints."""
    jobs, tag, resources = {}, None, None
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("wildcards:") and "devices_tag=" in line:
            tag = line.split("devices_tag=")[1].split(",")[0]
        elif line.startswith("resources:") and tag:
            resources = line
        elif line.startswith("Shell command:") and tag and "torch.distributed.run" in line:
            jobs[tag] = (resources, line)
            tag = None
    return jobs


def test_slurm_resources_one_node_up_to_gpus_per_node_then_whole_nodes(tmp_path):
    """What the SLURM executor is asked for (the rule's resources) and how torchrun starts:
    written for clusters of several nodes, which cannot be tried here."""
    sweep = {**TINY, "device": "cuda", "devices": [4, 16], "slurm": {"gpus_per_node": 8}}
    sweep["num_workers"] = [2]
    config = write_config(tmp_path, **sweep)
    done = snakemake(
        tmp_path, "-n", "-p", "--cores", "8", "--set-threads", "bench_ddp=2",
        "--configfile", str(config),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = _planned_jobs(done.stdout + done.stderr)
    one_node, resources_4 = jobs["_dev4"][1], jobs["_dev4"][0]
    for expected in ("mpi=torchrun", "nodes=1", "tasks=4", "tasks_per_gpu=1", "gpu=4"):
        assert expected in resources_4
    assert "cpus_per_task=3" in resources_4  # a rank's thread (2 // 4, at least 1) + 2 workers
    assert "torch.distributed.run --standalone --nproc-per-node 4 -m batchscope.bench" in one_node
    nodes, resources_16 = jobs["_dev16"][1], jobs["_dev16"][0]
    for expected in ("nodes=2", "tasks=2", "tasks_per_gpu=0", "gpu=0", "gres=gpu:8"):
        assert expected in resources_16
    assert "cpus_per_task=24" in resources_16  # 8 ranks a node, each 1 thread + 2 workers
    assert "srun --ntasks-per-node=1 --nodes=2" in nodes
    assert "--nnodes 2 --nproc-per-node 8" in nodes and "--rdzv-backend c10d" in nodes
    assert '--rdzv-endpoint $(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1):' in nodes
