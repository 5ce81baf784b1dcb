"""The benchmark job's entry point in its own process, as Snakemake runs it."""

import functools
import json
import os
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
import torch

from batchscope.core import results
from batchscope.core.spec import RunSpec
from tests.factories import make_spec, settings

SYNTHETIC = {"channels": 1, "image_size": 16, "num_classes": 4, "num_samples": 512}


def write_spec(tmp_path, name, spec: RunSpec):
    path = tmp_path / f"{name}.spec.json"
    path.write_text(spec.to_json())
    return path


def bench(tmp_path, name, *args, seed=0, spec=None):
    out = tmp_path / name
    if spec is None:
        spec = make_spec(
            "train",
            batch_size=16,
            num_workers=1,
            seed=seed,
            dataset={"name": "synthetic", **SYNTHETIC},
            **settings("train", max_steps=12, lr=0.05),
        )
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    path = write_spec(specs, name, spec)
    cmd = [sys.executable, "-m", "batchscope.bench", str(path), "--threads", "1"]
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
    written = [json.loads(out.with_suffix(".json").read_text()) for _, out in runs]
    assert written[0]["val_accuracy"] == written[1]["val_accuracy"]
    assert written[0]["env_fingerprint"] == written[1]["env_fingerprint"]
    assert written[0]["pythonhashseed"] == "7" and written[2]["pythonhashseed"] == "8"
    results.validate_result(written[0])  # the result schema holds a plain training run's keys


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_without_a_gpu_is_one_line_and_writes_nothing(tmp_path):
    spec = make_spec("infer", device="cuda", **settings("infer", max_steps=12))
    done, out = bench(tmp_path, "cuda", spec=spec)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "batchscope bench: error: device 'cuda' requested but torch sees no CUDA GPU"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["specs"]


def test_batch_too_large_for_the_data_is_one_line(tmp_path):
    spec = make_spec("train", batch_size=400, dataset={"name": "synthetic", **SYNTHETIC})
    done, out = bench(tmp_path, "big", spec=spec)  # 512 samples: one step
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("batchscope bench: error: batch_size 400 gives 1 steps")
    assert "Traceback" not in done.stderr
    assert not out.with_suffix(".json").exists()
    # in a largest-batch trial the same is the trial's result, not a failure
    trial, out = bench(tmp_path, "trial", spec=replace(spec, kind="trial"))
    assert trial.returncode == 0, trial.stderr
    result = json.loads(out.with_suffix(".json").read_text())
    assert result["status"] == "too_large_for_data"
    assert result["error"].startswith("batch_size 400 gives 1 steps")
    results.validate_result(result)


#: One run of each shape a result takes: the schema must hold every key each writes.
#: (The plain training run is test_same_seed_gives_a_bit_identical_loss_curve_across_processes'.)
SHAPES = {
    "infer": make_spec(
        "infer", num_workers=1, dataset={"name": "synthetic", **SYNTHETIC},
        **settings("infer", max_steps=10),
    ),
    "train towards a target, noise scale measured": make_spec(
        "train", batch_size=16, dataset={"name": "synthetic", **SYNTHETIC},
        **settings(
            "train", max_steps=10, eval_every_samples=64, eval_samples=64, target_accuracy=0.99,
            noise_scale_every_steps=2, lr_scaling="linear", base_batch_size=8,
        ),
    ),
    "out of memory": make_spec(
        "train", batch_size=64, cpu_memory_budget_mb=1, dataset={"name": "synthetic", **SYNTHETIC},
        **settings("train", max_steps=10, warmup_steps=1),
    ),
}  # fmt: skip


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_result_follows_the_result_schema(tmp_path, shape):
    """Every key the benchmark job writes is in the schema (additionalProperties: false), with
    its type, and every key the schema always expects is written."""
    done, out = bench(tmp_path, "run", spec=SHAPES[shape])
    assert done.returncode == 0, done.stderr
    result = json.loads(out.with_suffix(".json").read_text())
    results.validate_result(result)
    assert result["status"] == ("oom" if shape == "out of memory" else "ok")
    if shape == "out of memory":  # a real allocator failure, in the first step: on one device
        assert (result["oom_rank"], result["oom_step"]) == (0, 1)
    with open(f"{out}.steps.csv") as handle:
        assert handle.readline().strip().split(",") == list(results.STEP_COLUMNS)
    # where the process's time went: the phases add up to it (to the clock's tick)
    phases = {k: v for k, v in result.items() if k.startswith("phase_")}
    assert result["process_s"] > result["wall_s"] > result["measured_s"]
    assert sum(v for v in phases.values() if v is not None) == pytest.approx(
        result["process_s"], abs=0.05
    )
    assert phases["phase_measured_s"] == pytest.approx(result["measured_s"], abs=1e-3)  # CPU
    if shape.startswith("train towards"):  # its evaluations pause the loop
        assert phases["phase_paused_s"] > 0 and phases["phase_validation_s"] > 0


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


def test_a_spec_that_does_not_describe_a_run_is_one_line(tmp_path):
    good = json.loads(make_spec("infer").to_json())
    cases = {
        "accumulating inference": {**good, "accumulation_steps": 2},
        "unknown key": {**good, "measure": {**good["measure"], "windows": 3}},
        "missing key": {k: v for k, v in good.items() if k != "seed"},
    }
    expected = {
        "accumulating inference": "spec accumulation_steps: a training setting",
        "unknown key": "spec.measure.windows: unknown key",
        "missing key": "spec.seed: missing",
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.spec.json"
        path.write_text(json.dumps(data))
        out = tmp_path / name
        cmd = [sys.executable, "-m", "batchscope.bench", str(path)]
        cmd += ["--output", f"{out}.json", "--steps", f"{out}.steps.csv"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, name
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("batchscope bench: error:"), name
        assert expected[name] in lines[0], name
        assert not out.with_suffix(".json").exists()


#: One bench job in this process, then the modules it loaded (what a real job's process holds
#: when it writes its result).
_BENCH_THEN_MODULES = """
import json, sys
from batchscope.bench import job
rc = job.main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def bench_modules(tmp_path, name, spec: RunSpec) -> tuple[dict, set[str]]:
    """Run ``spec`` as a bench job in a fresh process; its result and the modules it loaded."""
    path = write_spec(tmp_path, name, spec)
    out = tmp_path / name
    cmd = [sys.executable, "-c", _BENCH_THEN_MODULES, str(path), "--threads", "1"]
    cmd += ["--output", f"{out}.json", "--steps", f"{out}.steps.csv"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0, done.stderr
    return json.loads(out.with_suffix(".json").read_text()), set(report["modules"])


def loaded(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_a_small_cnn_job_on_synthetic_data_imports_only_what_it_needs(tmp_path, mode):
    steps = settings(mode, max_steps=3, warmup_steps=1, repeats=1)
    spec = make_spec(mode, dataset={"name": "synthetic", **SYNTHETIC}, **steps)
    result, modules = bench_modules(tmp_path, mode, spec)
    assert result["status"] == "ok" and result["flops_per_sample"] > 0
    assert not loaded(modules, "torchvision")  # no torchvision dataset or model
    assert not loaded(modules, "timm") and not loaded(modules, "transformers")  # optional
    assert not loaded(modules, "PIL")
    for plotting in ("matplotlib", "seaborn", "pandas"):
        assert not loaded(modules, plotting)
    # torch.optim's optimizers import torch._dynamo (PyTorch's own, on their first parameter
    # group); inference without torch.compile loads none of the compiler
    compiler = ("torch._dynamo", "torch._inductor", "sympy")
    assert [loaded(modules, name) for name in compiler] == [mode == "train"] * 3


def test_a_torchvision_model_on_an_image_folder_still_runs_and_counts_flops_as_torch(tmp_path):
    from PIL import Image

    from batchscope.bench import models
    from batchscope.bench.fetch import prepare
    from batchscope.bench.flops import flops_per_sample

    tree = tmp_path / "images"
    for colour in ("red", "blue"):
        (tree / colour).mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (20 + i, 18), colour).save(tree / colour / f"{i}.png")
    root = tmp_path / "prepared"
    prepare("imagefolder", root, path=tree, log=lambda line: None)
    spec = make_spec(
        "infer",
        model="resnet18",
        batch_size=2,
        dataset={"name": "imagefolder", "path": str(tree), "image_size": 32},
        modes=["infer"],  # the sweep the config check sees: 8 images, batches of 2
        batch_sizes=[2],
        **settings("infer", max_steps=3, warmup_steps=1, repeats=1),
    )
    spec = replace(spec, dataset=replace(spec.dataset, root=str(root)))
    result, modules = bench_modules(tmp_path, "resnet18", spec)
    assert result["status"] == "ok" and result["image_size"] == 32
    assert loaded(modules, "torchvision")
    # the figure torch.utils.flop_counter.FlopCounterMode gives on the meta device
    build = functools.partial(models.build_model, "resnet18", num_classes=2, in_channels=3)
    assert result["flops_per_sample"] == flops_per_sample(build, (3, 32, 32), train=False)
