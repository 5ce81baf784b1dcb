"""The largest-batch search's trials (``batchscope.bench.maxbatch``) and the compute-only
ceiling's input (``batchscope.bench.data.DeviceBatches``): what each measures, and that it
measures what the sweep's runs will need."""

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from batchscope.bench import data, job, maxbatch, measure, runner
from batchscope.bench.models import build_model
from batchscope.core import results, search
from batchscope.core import spec as spec_module
from tests.factories import fake_result, make_spec, settings, sweep_config

# --- the trial runs what the sweep's run will hold --------------------------------------------


def test_the_cap_leaves_the_sweeps_largest_accumulation_steps_to_measure():
    config = sweep_config(
        dataset={"name": "synthetic", "num_samples": 600},
        batch_sizes="auto",
        train={"accumulation_steps": [1, 4]},
    )
    cap = spec_module.build_search(config, mode="train", model="small_cnn").cap
    # the sweep's run at the cap with 4 micro-batches per loader batch: it must measure a step
    # (a cap of 600 // 3 = 200 gave a loader batch of 800 samples from 600: NothingToMeasure)
    spec = spec_module.build(
        config, mode="train", model="small_cnn", batch_size=cap, accumulation_steps=4,
        num_workers=0, seed=0,
    )  # fmt: skip
    split = data.open_split("synthetic", None, "train", synthetic=config["dataset"])
    model = build_model("small_cnn", num_classes=split.num_classes, in_channels=split.channels)
    outcome, _ = runner.run(model, spec, torch.device("cpu"), split.dataset)
    assert outcome["status"] == "ok" and outcome["measured_steps"] >= 1
    # inference has no accumulation: its cap is the warm-up's alone
    assert spec_module.build_search(config, mode="infer", model="small_cnn").cap == 600 // 3


def test_a_trial_holds_the_largest_accumulation_and_measures_the_noise_scale():
    config = sweep_config(
        batch_sizes="auto",
        train={"accumulation_steps": [1, 2, 4], "noise_scale_every_steps": 50},
    )
    search_spec = spec_module.build_search(config, mode="train", model="small_cnn")
    trial = maxbatch.TrialRunner(search_spec.run, 1, None, None).trial_spec(16)
    # the loader batch of 4 micro-batches is on the device at once, as in the sweep's run
    assert trial.accumulation_steps == 4 and trial.effective_batch_size == 64
    # the noise measurement's extra gradients are held within the trial's few steps
    assert trial.train.noise_scale_every_steps == 1 < trial.max_steps
    assert trial.train.validate  # and the validation pass after training
    quiet = sweep_config(batch_sizes="auto")  # no noise measurement in the sweep: none here
    run = spec_module.build_search(quiet, mode="train", model="small_cnn").run
    assert maxbatch.TrialRunner(run, 1, None, None).trial_spec(16).train == run.train


# --- a batch the model cannot run is a result, for real ---------------------------------------


def test_a_stock_resnet_that_cannot_train_on_batch_1_is_searched_above_it(tmp_path):
    # resnet18 on 32x32 images ends on 1x1 feature maps: BatchNorm in training refuses batch 1
    config = sweep_config(
        models=["resnet18"],
        dataset={"name": "synthetic", "channels": 3, "image_size": 32, "num_samples": 64},
        batch_sizes="auto",
        train={"val_batch_size": 8},
        cpu_memory_budget_mb=400,
        maxbatch={"cap": 4},  # three trials, each a process importing torchvision
    )
    search_spec = spec_module.build_search(config, mode="train", model="resnet18")
    spec_path = tmp_path / "search.spec.json"
    spec_path.write_text(search_spec.to_json())
    out, trials = tmp_path / "search.json", tmp_path / "trials"
    cmd = [sys.executable, "-m", "batchscope.bench.maxbatch", str(spec_path), "--threads", "1"]
    cmd += ["--trials-dir", str(trials), "--output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    assert found["limit"] == 4 and found["too_small"] == 1
    assert found["grid"] == [2, 4]  # the sweep never runs batch 1
    first = found["trials"][0]
    assert first["batch_size"] == 1 and first["status"] == "cannot_run"
    assert "Expected more than 1 value per channel" in first["reason"]
    assert "batch 1 failed (cannot_run: ValueError: Expected more than 1" in found["summary"]
    written = json.loads((trials / "bs1.json").read_text())
    results.validate_result(written)  # the schema's cannot_run form
    assert written["status"] == "cannot_run"


# --- on a GPU: every byte the device gave the trial, judged with fakes -----------------------

CONTEXT_MB = 500.0  # the CUDA context and libraries, outside the caching allocator
CAPACITY_MB = 4000.0


def fake_gpu_bench(cmd, **_kwargs):
    """A bench process on a fake GPU: allocated 200 + b MB, reserved 15% more, the context
    beside it; the allocator fails once the device is full."""
    spec = spec_module.RunSpec.read(cmd[3])
    output = cmd[cmd.index("--output") + 1]
    allocated = 200.0 + spec.batch_size
    reserved = 1.15 * allocated
    device = reserved + CONTEXT_MB
    status = "ok" if device <= CAPACITY_MB else "oom"
    result = fake_result(
        status=status,
        batch_size=spec.batch_size,
        device="cuda:0",
        peak_mem_mb=allocated,
        cuda_max_allocated_mb=allocated,
        cuda_max_reserved_mb=reserved,
        cuda_peak_device_mb=device,
    )
    results.validate_result(result)
    results.write_json(output, result)
    return subprocess.CompletedProcess(cmd, 0, "", "")


def test_a_gpu_trial_is_judged_on_all_the_device_memory_it_needed(tmp_path, monkeypatch):
    monkeypatch.setattr(maxbatch.subprocess, "run", fake_gpu_bench)
    run = make_spec("train", kind="trial", device="cuda")
    trials = maxbatch.TrialRunner(run, 1, None, tmp_path)
    found = search.search(trials, capacity_mb=CAPACITY_MB, margin=0.1, tolerance=0.05)
    # 90% of the device holds 1.15 (200 + b) + 500 MB up to b = 2495; judged on the allocated
    # memory alone the search went on to 2843, where the context leaves no margin at all
    largest = (0.9 * CAPACITY_MB - CONTEXT_MB) / 1.15 - 200.0
    assert (1 - 0.05) * largest <= found.limit <= largest
    over = [t for t in found.trials if t.status == "over_margin"]
    assert over and all(t.ran for t in over)  # they ran, the margin rejected them
    assert trials.extras[found.limit]["cuda_peak_device_mb"] <= 0.9 * CAPACITY_MB


def test_peak_device_memory_counts_the_allocators_slack_and_the_context(monkeypatch):
    mb = 1024 * 1024
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1000 * mb, 8000 * mb))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 6000 * mb)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 6500 * mb)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 5000 * mb)
    # 7000 MB used on the device, 6000 of them the allocator's now: 1000 outside it; the
    # allocator's peak was 6500 (of which 5000 allocated)
    assert measure.cuda_peak_device_mb(torch.device("cuda")) == pytest.approx(7500.0)
    assert measure.cuda_peak_device_mb(torch.device("cpu")) is None


# --- the compute-only ceiling: batches built once, on the device ------------------------------


class CountingImages(data.SyntheticImages):
    """Synthetic images that count how often an item is read."""

    reads = 0

    def __getitem__(self, index):
        CountingImages.reads += 1
        return super().__getitem__(index)


def test_the_ceiling_reads_no_sample_while_it_steps(tmp_path, monkeypatch):
    opened = data.open_split

    def counting_split(*args, **kwargs):
        split = opened(*args, **kwargs)
        own = split.dataset
        counted = CountingImages(own.num_samples, split.channels, split.image_size, 4)
        return replace(split, dataset=counted)

    monkeypatch.setattr(data, "open_split", counting_split)
    reads, steps = {}, {}
    for max_steps in (4, 10):
        spec = make_spec(
            "infer", kind="ceiling", dataset={"name": "fashion_mnist"},
            **settings("infer", max_steps=max_steps),
        )  # fmt: skip
        path = tmp_path / f"ceiling{max_steps}.spec.json"
        path.write_text(spec.to_json())
        out = tmp_path / f"ceiling{max_steps}"
        CountingImages.reads = 0
        args = [str(path), "--threads", "1", "--output", f"{out}.json", "--steps", f"{out}.csv"]
        assert job.main(args) == 0
        reads[max_steps] = CountingImages.reads
        steps[max_steps] = json.loads(out.with_suffix(".json").read_text())["steps_run"]
    assert steps == {4: 4, 10: 10}
    # six more steps of 8 samples, not one more sample read: the batches were built up front
    assert reads[4] == reads[10] <= data.CEILING_BATCHES * spec.batch_size + 1


def test_device_batches_cycle_a_few_ready_batches_a_loader_would_give():
    images = data.SyntheticImages(100, 1, 4, 3)
    placed = []

    def place(x, y):
        placed.append(x.shape[0])
        return x.to(torch.float64), y

    batches = data.DeviceBatches(images, 16, place)
    assert len(batches) == 100 // 16 and batches.batch_size == 16  # drop_last, as the loader
    assert placed == [16] * data.CEILING_BATCHES  # placed once each, before any step
    epoch = list(batches)
    assert len(epoch) == 6 and len(list(batches)) == 6  # every pass has the loader's length
    assert all(x.dtype == torch.float64 and x.shape == (16, 1, 4, 4) for x, _ in epoch)
    assert epoch[0][0] is epoch[2][0] and epoch[1][0] is epoch[3][0]  # the same tensors again
    assert not torch.equal(epoch[0][0], epoch[1][0])  # distinct samples in each
    assert torch.equal(epoch[1][0][0], images[16][0])
    assert placed == [16] * data.CEILING_BATCHES  # iterating placed nothing more


def test_a_trial_runs_the_sweeps_spec_at_its_size_covering_its_steps(tmp_path):
    run = make_spec(
        "train",
        kind="trial",
        batch_size=1,
        dataset={"name": "synthetic", "channels": 1, "image_size": 8, "num_samples": 10},
        batch_sizes="auto",  # a trial's sweep; a fixed batch of 8 would not fit 10 samples
        **settings("train", precision="bf16", channels_last=True, val_batch_size=100),
    )
    runner = maxbatch.TrialRunner(run, 2, 135.0, tmp_path)
    trial = runner.trial_spec(64)
    assert trial.batch_size == 64 and trial.dataset.synthetic.num_samples == 64 * 3
    assert trial.measure.warmup_steps == 1 and trial.max_steps == 3
    assert trial.cpu_memory_budget_mb == 135.0
    # what the search does not set is the sweep's: precision, memory format, validation
    assert trial.compute == run.compute and trial.train == run.train
    cmd = runner.command(tmp_path / "bs64.spec.json", tmp_path / "bs64")
    assert cmd[1:4] == ["-m", "batchscope.bench", str(tmp_path / "bs64.spec.json")]
    assert cmd[cmd.index("--threads") + 1] == "2"


def test_maxbatch_finds_a_real_allocator_limit_on_the_cpu(tmp_path):
    config = sweep_config(
        # 3072 samples: the cap leaves the sweep's run of the limit a step to measure (1024)
        dataset={"name": "synthetic", "channels": 1, "image_size": 32, "num_samples": 3072},
        batch_sizes="auto",
        train={"val_batch_size": 64},  # trials validate as the sweep's runs do
        cpu_memory_budget_mb=150,
        # start at 32 and settle within 10%: each trial is a process that imports torch (~6 s),
        # and resident-set readings on the CPU wobble by ~10 MB, which costs predictions their edge
        maxbatch={"margin_frac": 0.1, "start": 32, "tolerance_frac": 0.1},
    )
    search_spec = spec_module.build_search(config, mode="train", model="small_cnn")
    spec_path = tmp_path / "search.spec.json"
    spec_path.write_text(search_spec.to_json())
    out = tmp_path / "search.json"
    trials = tmp_path / "trials"
    cmd = [sys.executable, "-m", "batchscope.bench.maxbatch", str(spec_path), "--threads", "1"]
    cmd += ["--trials-dir", str(trials), "--output", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    limit = result["limit"]
    assert limit is not None and 32 <= limit < 1024
    assert result["trial_cpu_memory_budget_mb"] == pytest.approx(135.0)
    by_size = {t["batch_size"]: t for t in result["trials"]}
    assert by_size[limit]["fits"] and by_size[limit]["bench_status"] == "ok"
    larger = min(b for b in by_size if b > limit)
    assert larger == result["first_failure"]
    assert by_size[larger]["bench_status"] == "oom"  # the real allocator refused
    # torch's allocator, or oneDNN's scratch buffer, refused by the cap
    refused = ("DefaultCPUAllocator", "could not create a primitive")
    assert any(words in by_size[larger]["error"] for words in refused)
    assert result["grid"][-1] == limit
    assert result["grid"] == [b for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if b < limit] + [
        limit
    ]
    # one bench process, with its own result file, per trial
    assert len(list(trials.glob("bs*[0-9].json"))) == len(result["trials"]) == result["trial_count"]
    for trial in trials.glob("bs*[0-9].json"):  # each follows the result schema (ok and oom)
        results.validate_result(json.loads(trial.read_text()))
    assert len(list(trials.glob("bs*.spec.json"))) == result["trial_count"]  # its spec
    assert all(t["returncode"] == 0 and t["process_s"] > 0 for t in result["trials"])
    assert result["device"] == "cpu" and result["summary"].startswith("largest batch")
