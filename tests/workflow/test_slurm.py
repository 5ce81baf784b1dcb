"""End to end on a real SLURM: a tiny sweep through ``--profile profiles/slurm`` on a one-node
cluster started for these tests (``slurm_cluster.py``), whose one fake GPU the benchmark jobs ask
for. Skipped without SLURM or the executor plugin, except under CI, where that fails.

There is no accounting database, so the runs poll with ``squeue`` (a real cluster keeps the
plugin's default, ``sacct``) and the checks read the finished jobs from ``slurmctld``.
"""

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from slurm_cluster import Cluster, require_slurm, run_killable, slurm_cluster

from tests.factories import NO_RACE, ONE_ROUND

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "slurm"
ACCOUNT = "batchscope-ci"  # any name: without accounting SLURM does not check it
RUN_TIMEOUT_S = 600  # then the run and everything it started get SIGKILL

pytestmark = pytest.mark.e2e

TINY = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 512},
    "models": ["small_cnn"],
    "modes": ["train", "infer"],
    "batch_sizes": [8, 16],
    "num_workers": [0],
    "seeds": [0],
    "device": "cpu",
    "measure": {"warmup_steps": 1, **ONE_ROUND},
    "sweep": NO_RACE,
    "train": {"max_steps": 4},
    "infer": {"max_steps": 4},
}
GRID = {(mode, bs) for mode in TINY["modes"] for bs in TINY["batch_sizes"]}
LIGHT_RULES = {"capture_environment", "aggregate", "plots", "answer", "recommend"}


@pytest.fixture(scope="module")
def cluster():
    require_slurm()
    started = time.monotonic()
    with slurm_cluster() as running:
        print(f"\nSLURM test: cluster up in {time.monotonic() - started:.1f} s")
        yield running
        stopping = time.monotonic()
    print(f"\nSLURM test: cluster down in {time.monotonic() - stopping:.1f} s")


def snakemake_on(cluster: Cluster, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake through profiles/slurm from ``workdir``, as a user of this cluster would run
    it, under a hard timeout; the run must succeed."""
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cluster.env['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "--profile", str(PROFILE), *args]
    # What this cluster needs: no accounting, so poll with squeue (and early); keep the logs.
    cmd += ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2"]
    cmd += ["--slurm-keep-successful-logs", "--latency-wait", "5"]
    started = time.monotonic()
    try:
        done = run_killable(cmd, timeout=RUN_TIMEOUT_S, env=env, cwd=workdir)
    except subprocess.TimeoutExpired as killed:
        pytest.fail(
            f"the SLURM run was killed after {RUN_TIMEOUT_S} s:\n{(killed.stderr or '')[-4000:]}"
            f"\n{cluster.run('squeue', '--states=all')}\n{cluster.logs()}"
        )
    print(f"SLURM test: snakemake ran {time.monotonic() - started:.1f} s in {workdir.name}")
    assert done.returncode == 0, f"{done.stderr[-4000:]}\n{cluster.logs()}"
    return done


def jobs_of(cluster: Cluster, workdir: Path) -> list[dict[str, str]]:
    return [job for job in cluster.jobs() if job["WorkDir"] == str(workdir)]


def rule_of(job: dict[str, str]) -> str:
    """The rule a SLURM job ran, from the comment the executor plugin gives each job."""
    return job["Comment"].removeprefix("rule_").split("_wildcards_")[0]


def mb(value: str) -> int:
    """``8000M`` or ``8G`` (scontrol) in MB."""
    return round(float(value[:-1]) * (1024 if value.endswith("G") else 1))


def minutes(limit: str) -> int:
    """``01:00:00`` or ``1-00:00:00`` (scontrol) in minutes."""
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(part) for part in clock.split(":"))
    return (int(days or 0) * 24 + h) * 60 + m + (s > 0)


def profile() -> dict:
    return yaml.safe_load(PROFILE.joinpath("config.yaml").read_text())


@pytest.fixture(scope="module")
def sweep(cluster, tmp_path_factory):
    """The tiny sweep, with the partition and account given on the command line."""
    workdir = tmp_path_factory.mktemp("slurm sweep")
    config = workdir / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    snakemake_on(
        cluster, workdir,
        "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile", str(config),
        "--default-resources", f"slurm_partition={cluster.partition}", f"slurm_account={ACCOUNT}",
    )  # fmt: skip
    jobs = jobs_of(cluster, workdir)
    spans = [f"{rule_of(j)} {j['StartTime'][11:]}-{j['EndTime'][11:]}" for j in jobs]
    print("SLURM test: jobs " + ", ".join(spans))
    return workdir, cluster, jobs


def test_sweep_through_slurm_gives_one_ok_row_per_grid_point(sweep):
    workdir, *_ = sweep
    summary = pd.read_csv(workdir / "results" / "summary.csv")
    assert set(zip(summary["mode"], summary["batch_size"], strict=True)) == GRID
    assert len(summary) == len(GRID)
    assert (summary["status"] == "ok").all()
    assert (summary["samples_per_s"] > 0).all()
    assert (summary["device"] == "cpu").all()
    assert summary["env_matches_capture"].all()
    for name in ("recommendation.md", "recommendation.html", "plots/throughput.png"):
        assert (workdir / "results" / name).stat().st_size > 0


def test_every_job_ran_as_its_own_slurm_job_in_the_given_partition_and_account(sweep):
    _, cluster, jobs = sweep
    expected = ["bench"] * len(GRID) + ["model_check"] + [*LIGHT_RULES]  # one model checked
    assert sorted(rule_of(job) for job in jobs) == sorted(expected)
    for job in jobs:
        assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0")
        assert (job["Partition"], job["Account"]) == (cluster.partition, ACCOUNT)
        # the job's own Snakemake log, kept by --slurm-keep-successful-logs
        log = Path(job["StdOut"])
        assert log.is_relative_to(sweep[0] / ".snakemake" / "slurm_logs" / f"rule_{rule_of(job)}")
        assert "1 of 1 steps (100%) done" in log.read_text()


def test_benchmarks_get_the_gpu_one_at_a_time_with_workers_plus_threads_cpus(sweep):
    workdir, _, jobs = sweep
    threads = profile()["set-threads"]["bench"]
    bench = [job for job in jobs if rule_of(job) == "bench"]
    assert len(bench) == len(GRID)
    for job in bench:
        assert (job["TresPerJob"], job["JOB_GRES"]) == ("gres:gpu:1", "gpu:1")
        assert int(job["NumCPUs"]) == threads + 0  # num_workers 0
        assert mb(job["MinMemoryNode"]) == 8000  # first attempt
        assert minutes(job["TimeLimit"]) == 60
        assert "python -m batchscope.bench" in Path(job["StdOut"]).read_text()
    # One fake GPU: the GPU jobs ran one after another, never side by side.
    gpu_jobs = [job for job in jobs if job.get("JOB_GRES") == "gpu:1"]
    spans = sorted((job["StartTime"], job["EndTime"]) for job in gpu_jobs)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    for mode, bs in GRID:
        result = workdir / f"results/runs/{mode}/small_cnn/bs{bs}_acc1_nw0_seed0_round1.json"
        assert json.loads(result.read_text())["torch_threads"] == threads


def test_light_jobs_get_one_cpu_and_no_gpu_but_the_capture_runs_on_the_gpu(sweep):
    workdir, _, jobs = sweep
    light = {rule_of(job): job for job in jobs if rule_of(job) in LIGHT_RULES}
    assert set(light) == LIGHT_RULES
    for rule, job in light.items():
        assert (job["JOB_GRES"] == "gpu:1") == (rule == "capture_environment"), rule
        assert int(job["NumCPUs"]) == 1, rule
        assert minutes(job["TimeLimit"]) == 15, rule
    # The environment was captured inside its SLURM job, with the GPU SLURM gave it.
    env = json.loads((workdir / "results" / "env" / "environment.json").read_text())
    assert env["env"]["CUDA_VISIBLE_DEVICES"] == "0"


FAILS_ONCE = """\
rule all:
    input: "out/nw2.txt"

# Stands in for the benchmark rule, so that the profile's `bench` resources apply.
rule bench:
    output: "out/nw{num_workers}.txt"
    shell: "if [ -e failed_once ]; then touch {output}; else touch failed_once; exit 1; fi"
"""


def test_a_retry_asks_for_twice_the_memory_and_time(cluster, tmp_path):
    (tmp_path / "Snakefile").write_text(FAILS_ONCE)
    snakemake_on(cluster, tmp_path, "--default-resources", f"slurm_partition={cluster.partition}")
    first, retry = jobs_of(cluster, tmp_path)
    assert (first["JobState"], retry["JobState"]) == ("FAILED", "COMPLETED")
    assert (mb(first["MinMemoryNode"]), mb(retry["MinMemoryNode"])) == (12000, 24000)
    assert (minutes(first["TimeLimit"]), minutes(retry["TimeLimit"])) == (60, 120)
    # two DataLoader workers: two more CPUs than the benchmark's threads
    threads = profile()["set-threads"]["bench"]
    assert int(first["NumCPUs"]) == int(retry["NumCPUs"]) == threads + 2


def test_a_two_device_point_is_one_slurm_job_of_two_tasks_running_torchrun(cluster, tmp_path):
    """A devices=2 point through the profile: one job of two tasks (one per rank, a CPU each
    here: the device is the CPU, so no GPU), whose command starts torchrun itself."""
    config = tmp_path / "ddp.yaml"
    ddp = {**TINY, "modes": ["train"], "batch_sizes": [8], "devices": [2]}
    config.write_text(yaml.safe_dump(ddp))
    target = "results/runs/train/small_cnn/bs8_acc1_nw0_dev2_seed0_round1.json"
    snakemake_on(
        cluster, tmp_path, target,
        "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(config),
        "--default-resources", f"slurm_partition={cluster.partition}", f"slurm_account={ACCOUNT}",
    )  # fmt: skip
    (job,) = [job for job in jobs_of(cluster, tmp_path) if rule_of(job) == "bench_ddp"]
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0")
    assert (int(job["NumTasks"]), int(job["NumNodes"])) == (2, 1)
    threads = profile()["set-threads"]["bench_ddp"]
    assert int(job["NumCPUs"]) == 2 * max(1, threads // 2)  # a rank's threads, no workers
    assert job.get("JOB_GRES") in (None, "(null)")
    launcher = "torch.distributed.run --standalone --nproc-per-node 2"
    assert launcher in Path(job["StdOut"]).read_text()
    result = json.loads((tmp_path / target).read_text())
    assert (result["status"], result["world_size"]) == ("ok", 2)
    assert len(result["samples_per_s_per_rank"]) == 2
    assert result["slurm_job_id"] == job["JobId"]
