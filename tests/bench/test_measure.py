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


_PEAK_AFTER_64_MB = """
import json, torch
from batchscope.bench import measure
device = torch.device("cpu")
measure.reset_peak_memory(device)
before = measure.peak_memory(device)["peak_rss_mb"]
block = torch.ones(64 * 1024 * 1024 // 4)  # 64 MB, touched
after = measure.peak_memory(device, workers_mb=10.0)
print(json.dumps({"before": before, **after}))
"""


def test_peak_memory_on_cpu_counts_the_process_and_grows_with_an_allocation():
    # a fresh process: in this one, earlier tests leave freed memory the allocator would reuse
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_AFTER_64_MB], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after["peak_rss_mb"] >= after["before"] + 48
    assert after["peak_mem_mb"] == pytest.approx(after["peak_rss_mb"] + 10.0)
    assert after["cuda_max_allocated_mb"] is None
