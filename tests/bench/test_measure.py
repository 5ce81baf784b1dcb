import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from batchscope.bench import measure


def test_step_stats_percentiles_in_ms():
    times_s = [0.010] * 50 + [0.020] * 40 + [0.100] * 10
    stats = measure.step_stats(times_s)
    assert stats["step_time_ms_p50"] == pytest.approx(15.0)  # between the 50th and 51st
    assert stats["step_time_ms_p90"] == pytest.approx(np.percentile(np.array(times_s) * 1e3, 90))
    assert stats["step_time_ms_p99"] == pytest.approx(100.0)
    assert stats["step_time_ms_iqr"] == pytest.approx(10.0)
    assert stats["step_time_ms_mean"] == pytest.approx(1000 * sum(times_s) / len(times_s))


def test_p99_of_too_few_steps_is_not_reported():
    # 55 steps, one slow: NumPy's 99th percentile of them is (nearly) that one step's time
    times_s = [0.010] * 54 + [0.500]
    stats = measure.step_stats(times_s)
    assert stats["step_time_ms_p99"] is None
    assert stats["step_time_ms_p90"] == pytest.approx(10.0)
    enough = measure.step_stats(times_s * 2)  # 110 steps: two slow ones
    assert enough["step_time_ms_p99"] == pytest.approx(
        np.percentile(np.array(times_s * 2), 99) * 1e3
    )


def test_step_stats_empty_is_all_none():
    assert set(measure.step_stats([]).values()) == {None}


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (MemoryError(), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1"), True),
        (RuntimeError("MPS backend out of memory"), True),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), False),
        (ValueError("out of memory"), False),
    ],
)
def test_is_oom_tells_allocator_failures_from_bugs(exc, expected):
    assert measure.is_oom(exc) is expected


def test_resolve_device_auto_and_cpu():
    assert measure.resolve_device("cpu").type == "cpu"
    expected = "cuda" if torch.cuda.is_available() else None
    if expected:
        assert measure.resolve_device("auto").type == "cuda"
    else:
        assert measure.resolve_device("auto").type in ("cpu", "mps")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_resolve_device_cuda_without_gpu_is_one_line_error():
    with pytest.raises(measure.DeviceError) as info:
        measure.resolve_device("cuda")
    assert "\n" not in str(info.value) and "cuda" in str(info.value)


def _run_python(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh process (a clean heap, and a fork of something small); its last
    line of output, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


#: A DataLoader with 2 forked workers over a dataset holding a touched buffer of argv[1] MB.
_FORKED_BUFFER = """
import json, sys, time, torch
from torch.utils.data import DataLoader, Dataset
from batchscope.bench import measure

class Held(Dataset):
    def __init__(self, mb):
        self.buffer = torch.ones(mb * 1024 * 1024 // 4)
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.zeros(4)

device = torch.device("cpu")
data = Held(int(sys.argv[1]))
measure.reset_peak_memory(device)
with measure.HostMemory(interval_s=0.05) as host:
    for i, _ in enumerate(DataLoader(data, batch_size=4, num_workers=2)):
        if i == 0:  # let the sampler read the workers twice while they live
            seen = host.readings
            while host.readings < seen + 2:
                time.sleep(0.01)
print(json.dumps(measure.peak_memory(device, host)))
"""


def test_cpu_peak_memory_counts_a_buffer_shared_with_forked_workers_once():
    # The workers map the buffer, loaded before the fork, without copying it: the machine
    # holds it once. The old reading, the job's peak RSS plus the workers' PSS, counted it
    # again in each worker's share (300 MB read as 500 MB).
    without = _run_python(_FORKED_BUFFER, "0")
    with_buffer = _run_python(_FORKED_BUFFER, "300")
    added_mb = with_buffer["peak_mem_mb"] - without["peak_mem_mb"]
    assert added_mb == pytest.approx(300, rel=0.15)
    assert with_buffer["workers_uss_mb"] > 0  # the workers were read
    assert with_buffer["cuda_max_allocated_mb"] is None


#: A worker that holds 200 MB for a while, then frees it; read after it freed it.
_TRANSIENT_WORKER = """
import json, multiprocessing, time, torch
from batchscope.bench import measure

def worker(conn):
    block = torch.ones(200 * 1024 * 1024 // 4)  # touched
    conn.send("holding")
    conn.recv()
    del block
    conn.send("freed")
    conn.recv()

device = torch.device("cpu")
measure.reset_peak_memory(device)
here, there = multiprocessing.get_context("fork").Pipe()
with measure.HostMemory(interval_s=0.05) as host:
    child = multiprocessing.get_context("fork").Process(target=worker, args=(there,))
    child.start()
    assert here.recv() == "holding"
    seen = host.readings
    while host.readings < seen + 2:
        time.sleep(0.01)
    here.send("free")
    assert here.recv() == "freed"
    after = measure._uss_mb(child.pid)
    here.send("end")
    child.join()
print(json.dumps({"after_mb": after, **measure.peak_memory(device, host)}))
"""


def test_cpu_peak_memory_holds_a_workers_peak_not_its_last_reading():
    # the old reading took the workers' memory once, as the loop ended
    out = _run_python(_TRANSIENT_WORKER)
    assert out["workers_uss_mb"] >= out["after_mb"] + 0.9 * 200
    assert out["peak_mem_mb"] == pytest.approx(out["peak_rss_mb"] + out["workers_uss_mb"])


def test_peak_memory_without_workers_is_the_processs_high_water_mark():
    # a fresh process: in this one, earlier tests leave freed memory the allocator would reuse
    out = _run_python(
        "import json, torch\n"
        "from batchscope.bench import measure\n"
        "device = torch.device('cpu')\n"
        "measure.reset_peak_memory(device)\n"
        "before = measure.peak_memory(device)['peak_rss_mb']\n"
        "with measure.HostMemory() as host:\n"
        "    block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MB, touched\n"
        "    del block\n"
        "print(json.dumps({'before': before, **measure.peak_memory(device, host)}))\n"
    )
    assert out["peak_mem_mb"] >= out["before"] + 48  # freed before the end: still the peak
    assert out["workers_uss_mb"] == 0.0


# --- the peak a GPU's work could reach (MFU) ----------------------------------------------

ON = {"conv": True, "matmul": True}
DEFAULT = {"conv": True, "matmul": False}  # torch's defaults
OFF = {"conv": False, "matmul": False}


@pytest.mark.parametrize(
    ("precision", "capability", "tf32", "expected"),
    [
        ("fp32", "8.0", DEFAULT, {"conv": "tf32", "matmul": "fp32"}),
        ("fp32", "9.0", ON, {"conv": "tf32", "matmul": "tf32"}),
        ("fp32", "8.0", OFF, {"conv": "fp32", "matmul": "fp32"}),
        ("fp32", "7.0", ON, {"conv": "fp32", "matmul": "fp32"}),  # V100: no TF32
        ("fp32", None, ON, {"conv": "fp32", "matmul": "fp32"}),
        ("bf16", "8.0", OFF, {"conv": "bf16", "matmul": "bf16"}),
        ("fp16", "7.5", DEFAULT, {"conv": "fp16", "matmul": "fp16"}),
    ],
)
def test_math_modes_follow_precision_flags_and_gpu(precision, capability, tf32, expected):
    assert measure.math_modes(precision, capability, tf32) == expected


def test_tf32_flags_are_read_from_torch(monkeypatch):
    conv = torch.backends.cudnn.conv
    matmul = torch.get_float32_matmul_precision()
    was = conv.fp32_precision
    try:
        conv.fp32_precision = "ieee"
        torch.set_float32_matmul_precision("high")
        assert measure.tf32_allowed() == {"conv": False, "matmul": True}
        conv.fp32_precision = "tf32"
        torch.set_float32_matmul_precision("highest")
        assert measure.tf32_allowed() == {"conv": True, "matmul": False}
        assert measure.math_modes("fp32", "8.0") == {"conv": "tf32", "matmul": "fp32"}
    finally:
        conv.fp32_precision = was
        torch.set_float32_matmul_precision(matmul)


def test_an_fp32_cnn_on_an_a100_is_held_against_the_tf32_peak():
    # the old peak was the non-tensor fp32 figure (19.5), 8 times lower than what cuDNN's
    # default TF32 convolutions can reach, so MFU could read far above 1
    modes = measure.math_modes("fp32", "8.0", DEFAULT)
    assert measure.compute_peak("NVIDIA A100-SXM4-80GB", modes, conv_share=1.0) == ("tf32", 156.0)
    # a model of matrix products only runs in fp32 under the same flags
    assert measure.compute_peak("NVIDIA A100-SXM4-80GB", modes, conv_share=0.0) == ("fp32", 19.5)


def test_work_split_between_two_math_modes_is_held_against_their_combined_peak():
    modes = measure.math_modes("fp32", "9.0", DEFAULT)
    mode, peak = measure.compute_peak("NVIDIA H200", modes, conv_share=0.9)
    assert mode == "fp32+tf32"
    # 0.9 of the FLOPs at 494.7 TFLOP/s and 0.1 at 67: the whole at best 1 / (0.9/494.7 + 0.1/67)
    seconds_per_tflop = 0.9 / 494.7 + 0.1 / 67.0
    assert peak == pytest.approx(1 / seconds_per_tflop)
    assert 67.0 < peak < 494.7


@pytest.mark.parametrize(
    ("name", "mode", "expected"),
    [
        ("NVIDIA L40S", "tf32", 183.0),  # not the L4's
        ("NVIDIA L4", "tf32", 60.0),
        ("NVIDIA A10", "tf32", 62.5),  # not the A100's
        ("Tesla V100-SXM2-16GB", "tf32", 15.7),  # no TF32: its fp32 figure
        ("Some Future GPU", "tf32", None),
    ],
)
def test_peak_tflops_finds_the_gpu_by_its_name(name, mode, expected):
    assert measure.peak_tflops(name, mode) == expected


def test_onednn_failing_to_create_a_primitive_is_oom_only_under_the_memory_cap(monkeypatch):
    # seen in a largest-batch trial under a 135 MB cap on a loaded machine: the trial was
    # recorded cannot_run (a floor) instead of oom (the ceiling it was)
    error = RuntimeError("could not create a primitive")
    monkeypatch.setattr(measure, "_CAPPED", False)
    assert not measure.is_oom(error)  # uncapped: a real unsupported case, not memory
    monkeypatch.setattr(measure, "_CAPPED", True)
    assert measure.is_oom(error)
