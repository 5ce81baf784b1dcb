"""Faults: a sweep killed with SIGKILL mid-run loses nothing it finished, and a rerun redoes only
what is missing; a full disk never leaves a truncated result behind."""

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from batchscope.core import results
from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import REPO, job_counts, write_config

pytestmark = pytest.mark.e2e


def _env():
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def _snakemake_cmd(workdir, config, *args):
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
            "--directory", str(workdir), "--configfile", str(config), *args]  # fmt: skip


def test_sigkill_mid_run_then_rerun_redoes_only_the_killed_and_missing_jobs(tmp_path):
    config = write_config(
        tmp_path,
        dataset={"name": "synthetic", "channels": 1, "image_size": 16, "num_samples": 60000},
        models=["small_cnn"],
        modes=["infer"],
        batch_sizes=[8, 16, 32],
        num_workers=[0],
        seeds=[0],
        # inference ends when its window is full: 3 s of it per job, long enough to be caught
        measure={"warmup_steps": 1, "repeats": 1, "min_steps": 0, **ONE_ROUND, "min_seconds": 3},
        sweep=NO_RACE,
        infer={"max_steps": 100_000},
    )
    runs = tmp_path / "results" / "runs" / "infer" / "small_cnn"
    logs = tmp_path / "logs" / "bench" / "infer" / "small_cnn"
    sweep = subprocess.Popen(
        _snakemake_cmd(tmp_path, config, "--cores", "2"),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and sweep.poll() is None:
            done = {p.name.removesuffix(".json") for p in runs.glob("*.json")}
            running = [
                log for log in logs.glob("*.log")
                if log.stem not in done and "batchscope bench: infer" in log.read_text()
            ]  # fmt: skip
            if done and running:  # a job has printed its header: it is inside runner.run
                os.killpg(sweep.pid, signal.SIGKILL)  # Snakemake and its job, like a lost node
                break
            time.sleep(0.1)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
    # which job was caught is read after the kill: a fast machine may finish the one seen running
    # between the look and the kill, and then another one is the one caught
    finished = {p: p.stat().st_mtime_ns for p in runs.glob("*.json")}
    started = [log.stem for log in logs.glob("*.log") if "bench: infer" in log.read_text()]
    caught = [stem for stem in started if runs / f"{stem}.json" not in finished]
    assert caught, "no job was caught mid-run"
    killed_in = caught[0]
    assert not (runs / f"{killed_in}.steps.csv").exists()
    for path in finished:  # what finished is whole
        assert json.loads(path.read_text())["status"] == "ok"

    subprocess.run(_snakemake_cmd(tmp_path, config, "--unlock"), env=_env(), check=True,
                   capture_output=True)  # fmt: skip
    plan = subprocess.run(_snakemake_cmd(tmp_path, config, "-n"), env=_env(), capture_output=True,
                          text=True)  # fmt: skip
    assert job_counts(plan.stdout + plan.stderr)["bench"] == 3 - len(finished)
    rerun = subprocess.run(_snakemake_cmd(tmp_path, config, "--cores", "2"), env=_env(),
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # not recomputed
    summary = pd.read_csv(tmp_path / "results" / "summary.csv")
    assert sorted(summary["batch_size"]) == [8, 16, 32]
    assert (summary["status"] == "ok").all()


def _write_under_file_size_limit(path: Path, limit_bytes: int) -> subprocess.CompletedProcess:
    """Write a large result in a child process whose files may not exceed ``limit_bytes``
    (RLIMIT_FSIZE: the kernel refuses the write, as a full disk would)."""
    code = (
        "import resource, signal, sys\n"
        "from batchscope.core import results\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, resource.RLIM_INFINITY))\n"
        f"results.write_json({str(path)!r}, {{'values': list(range(100000))}})\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO)  # fmt: skip


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs RLIMIT_FSIZE")
def test_a_write_that_runs_out_of_space_leaves_no_result_and_keeps_the_old_one(tmp_path):
    target = tmp_path / "result.json"
    failed = _write_under_file_size_limit(target, 4096)
    assert failed.returncode != 0 and "File too large" in failed.stderr
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind either

    results.write_json(target, {"status": "ok"})
    _write_under_file_size_limit(target, 4096)
    assert json.loads(target.read_text()) == {"status": "ok"}  # the finished one is intact


def test_a_failed_grid_point_does_not_stop_the_others_and_is_listed_in_a_partial_report(tmp_path):
    from PIL import Image

    # 20 readable images among 60 files: the config check (which counts files, before any job)
    # lets batch 16 through; in its job, 20 images hold one batch of 16: nothing to measure
    images = tmp_path / "images"
    for label in ("cat", "dog"):
        (images / label).mkdir(parents=True)
        for i in range(10):
            Image.new("RGB", (20, 20), (20 * i, 10, 200)).save(images / label / f"{i}.png")
        for i in range(20):
            (images / label / f"broken{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n not a png")
    config = write_config(
        tmp_path,
        dataset={"name": "imagefolder", "path": str(images), "image_size": 16},
        models=["small_cnn"],
        modes=["infer"],
        batch_sizes=[4, 8, 16],
        num_workers=[0],
        seeds=[0],
        measure={"warmup_steps": 1, "repeats": 1, "min_steps": 0, "ceiling": False, **ONE_ROUND},
        sweep=NO_RACE,
    )
    first = subprocess.run(_snakemake_cmd(tmp_path, config, "--cores", "2"), env=_env(),
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert first.returncode != 0  # one job failed ...
    runs = tmp_path / "results" / "runs" / "infer" / "small_cnn"
    assert sorted(p.name for p in runs.glob("*.json")) == [
        "bs4_acc1_nw0_seed0_round1.json",
        "bs8_acc1_nw0_seed0_round1.json",
    ]
    assert not (tmp_path / "results" / "summary.csv").exists()  # ... the others still ran

    partial = subprocess.run(
        _snakemake_cmd(tmp_path, config, "--cores", "2", "--config", "partial=True"),
        env=_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert partial.returncode == 0, partial.stderr[-3000:]
    summary = pd.read_csv(tmp_path / "results" / "summary.csv").set_index("batch_size")
    assert list(summary["status"]) == ["ok", "ok", "failed"]
    assert summary.loc[16, "error"].startswith("batchscope bench: error: batch_size 16 gives 1")
    recommendation = (tmp_path / "results" / "recommendation.md").read_text()
    assert "16" in recommendation and "failed" in recommendation
