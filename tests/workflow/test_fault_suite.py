"""scripts/fault_suite.py: how it reads Snakemake's output (the line a user sees, a dry run's
plan), no sweeps; and one fault it injects that no other test covers, end to end: a second
``snakemake`` on a folder where one runs stops at the lock, and SIGTERM (a time limit) to
the first leaves no lock behind."""

import signal
import sys
from pathlib import Path

import pytest

from tests.workflow.helpers import write_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from faults import harness  # noqa: E402 - the suite's package lives in scripts/

FAILED_JOB = """Select jobs to execute...
Error in rule bench:
    message: None
    log: logs/bench/train/small_cnn/bs16.log (check log file(s) for error details)
        (command exited with non-zero exit code)
Logfile logs/bench/train/small_cnn/bs16.log:
================================================================================
batchscope bench: train small_cnn on fashion_mnist, batch_size=16
Traceback (most recent call last):
OSError: [Errno 28] No space left on device
================================================================================
Removing output files of failed job bench since they might be corrupted:
Exiting because a job execution failed. Look above for error messages
"""


def test_the_line_a_user_sees_is_ours_first_else_snakemakes_with_the_logs_end():
    said = "batchscope bench: rank 1 of 2: error: out of memory"
    assert harness.user_line(FAILED_JOB.replace("Traceback (most recent call last):", said)) == said
    assert harness.user_line(FAILED_JOB) == (
        "Error in rule bench: OSError: [Errno 28] No space left on device"
    )
    empty = FAILED_JOB.split("Logfile")[0] + "Logfile logs/bench/x.log: empty file\n"
    assert harness.user_line(empty) == "Error in rule bench: its log is empty"
    assert harness.user_line("Building DAG...\nNothing to be done.") == "Nothing to be done."


def test_a_long_line_keeps_its_start_and_its_reason_without_the_suites_folder():
    line = (
        "batchscope download: error: fashion_mnist: no mirror gave a good labels.gz: /w/mirror/:"
        " md5 mismatch: expected 9018921c3c673c538a1fc5bad174d6f9, got 7f2d2632499838975b3f4171ec"
        "69977e, and more words that make it longer than the table's column"
    )
    clipped = harness.clip(line, Path("/w"))
    assert len(clipped) == harness.WIDTH
    assert clipped.startswith("batchscope download: error:") and clipped.endswith("column")
    assert harness.clip("a gave /w/mirror/: no", Path("/w")) == "a gave mirror/: no"
    digests = "expected 9018921c3c673c538a1fc5bad174d6f9, got 7f2d2632499838975b3f4171ec69977e"
    assert harness.clip(digests) == "expected 901892…, got 7f2d26…"


def test_a_plan_in_words_and_its_outputs():
    plan = """Job stats:
job                 count
----------------  -------
download_dataset        1
bench                   2
aggregate               1
all                     1
total                   5

rule bench:
    output: results/runs/a.json, results/runs/a.steps.csv
"""
    counts = harness.job_counts(plan)
    assert harness.describe(counts) == "1 download_dataset, 2 bench + 2 after"
    assert harness.describe({}) == "nothing"
    assert harness.planned_outputs(plan) == {"results/runs/a.json", "results/runs/a.steps.csv"}


def test_what_a_run_finished_is_counted_by_rule_from_its_log():
    # the lines Snakemake 9 prints as jobs end, a checkpoint and a local rule among them
    output = """localcheckpoint download_dataset:
    reason: Missing output files: resources/datasets/fashion_mnist
Finished jobid: 3 (Rule: download_dataset)
Updating checkpoint dependencies.
Finished jobid: 7 (Rule: bench)
Finished jobid: 9 (Rule: bench)
Finished jobid: 2 (Rule: run_spec)
"""
    assert harness.finished_jobs(output) == {"download_dataset": 1, "bench": 2, "run_spec": 1}


@pytest.mark.e2e
def test_a_second_snakemake_stops_at_the_lock_and_sigterm_leaves_no_lock(tmp_path):
    config = write_config(
        tmp_path,
        dataset={"name": "synthetic", "channels": 1, "image_size": 12, "num_samples": 64},
        models=["small_cnn"], modes=["infer"], batch_sizes=[8], num_workers=[0], seeds=[0],
        measure=harness.MEASURE, sweep={"strategy": "full"},
    )  # fmt: skip
    folder = harness.Folder(tmp_path, config)
    first = folder.start("--cores", "2")
    try:
        first.job("specs/")  # a job of the first is running: it holds the lock
        second = folder.run("--cores", "2")
    finally:
        first.signal_group(signal.SIGTERM)  # every process of the allocation, as SLURM does
        terminated = first.wait()
    assert second.returncode != 0
    assert "cannot be locked" in harness.user_line(second.output)
    assert "Select jobs to execute" not in second.output  # it started nothing
    assert terminated.returncode != 0
    assert not list((tmp_path / ".snakemake" / "locks").glob("*"))  # a plain rerun may start
