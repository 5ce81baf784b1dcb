"""The benchmark job's entry point in its own process, as Snakemake runs it."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

SYNTHETIC = {
    "synthetic": {"channels": 1, "image_size": 16, "num_classes": 4, "num_samples": 512},
    "image_size": None,
}


def bench(tmp_path, name, *args, seed=0):
    out = tmp_path / name
    cmd = [sys.executable, "-m", "batchscope.bench", "--mode", "train", "--model", "small_cnn"]
    cmd += ["--dataset", "synthetic", "--dataset-options", json.dumps(SYNTHETIC)]
    cmd += ["--batch-size", "16", "--num-workers", "1", "--seed", str(seed), "--threads", "1"]
    cmd += ["--max-steps", "12", "--warmup-steps", "2", "--lr", "0.05", "--device", "cpu"]
    cmd += ["--output", f"{out}.json", "--steps", f"{out}.steps.csv", *args]
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300), out


def test_same_seed_gives_a_bit_identical_loss_curve_across_processes(tmp_path):
    runs = [bench(tmp_path, name, seed=seed) for name, seed in (("a", 7), ("b", 7), ("c", 8))]
    for done, _ in runs:
        assert done.returncode == 0, done.stderr
    losses = [pd.read_csv(f"{out}.steps.csv")["loss"].tolist() for _, out in runs]
    assert losses[0] == losses[1]  # exact float equality, step by step
    assert losses[0] != losses[2]
    results = [json.loads(out.with_suffix(".json").read_text()) for _, out in runs]
    assert results[0]["val_accuracy"] == results[1]["val_accuracy"]
    assert results[0]["env_fingerprint"] == results[1]["env_fingerprint"]
    assert results[0]["pythonhashseed"] == "7" and results[2]["pythonhashseed"] == "8"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_a_gpu_is_one_line_and_writes_nothing(tmp_path):
    done, out = bench(tmp_path, "cuda", "--device", "cuda")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "batchscope bench: error: device 'cuda' requested but torch sees no CUDA GPU"
    ]
    assert not list(tmp_path.iterdir())


def test_batch_too_large_for_the_data_is_one_line(tmp_path):
    done, _ = bench(tmp_path, "big", "--batch-size", "400")  # 512 samples: one step
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("batchscope bench: error: batch_size 400 gives 1 steps")
    assert "Traceback" not in done.stderr


_EXIT = """
import atexit, multiprocessing, sys, time
from batchscope.bench.job import exit_without_teardown
atexit.register(lambda: print("teardown", flush=True))
if sys.argv[1] == "child":
    multiprocessing.Process(target=time.sleep, args=(30,), daemon=True).start()
print("result written", end="")
exit_without_teardown(3)
"""


@pytest.mark.parametrize("child", ["none", "child"])
def test_bench_skips_teardown_only_when_no_child_process_is_left(child):
    done = subprocess.run(
        [sys.executable, "-c", _EXIT, child], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3
    assert done.stdout.startswith("result written")  # flushed before the hard exit
    # a live child (a DataLoader worker, say): the normal shutdown runs and stops it
    assert ("teardown" in done.stdout) == (child == "child")


def test_inference_refuses_accumulation_in_one_line(tmp_path):
    out = tmp_path / "infer"
    cmd = [sys.executable, "-m", "batchscope.bench", "--mode", "infer", "--model", "small_cnn"]
    cmd += ["--dataset", "synthetic", "--dataset-options", json.dumps(SYNTHETIC)]
    cmd += ["--batch-size", "8", "--num-workers", "0", "--seed", "0", "--accumulation-steps", "2"]
    cmd += ["--output", f"{out}.json", "--steps", f"{out}.steps.csv"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--accumulation-steps is a training setting: inference runs use 1")
    )
    assert not out.with_suffix(".json").exists()
