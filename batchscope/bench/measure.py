"""Measurement primitives: devices, synchronised clocks, step statistics, peak memory, OOM.

Every clock read that ends a timed region first waits for the device: CUDA kernels run
asynchronously, so reading ``perf_counter`` without ``torch.cuda.synchronize`` times the launch,
not the work.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence

import numpy as np
import torch


class DeviceError(RuntimeError):
    """The requested device does not exist on this machine."""


def resolve_device(requested: str) -> torch.device:
    """``auto`` picks CUDA, then MPS, then the CPU; an explicit device must exist."""
    cuda = torch.cuda.is_available()
    mps = torch.backends.mps.is_available()
    if requested == "auto":
        return torch.device("cuda" if cuda else "mps" if mps else "cpu")
    if requested.startswith("cuda") and not cuda:
        raise DeviceError(f"device {requested!r} requested but torch sees no CUDA GPU")
    if requested == "mps" and not mps:
        raise DeviceError("device 'mps' requested but torch sees no Apple MPS device")
    return torch.device(requested)


def synchronize(device: torch.device) -> None:
    """Wait until all work queued on ``device`` has finished."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_clock(device: torch.device) -> float:
    """Seconds on a monotonic clock, read only after the device has caught up."""
    synchronize(device)
    return time.perf_counter()


def step_stats(step_times_s: Sequence[float]) -> dict[str, float | None]:
    """Percentiles and interquartile range of step times, in milliseconds."""
    if len(step_times_s) == 0:
        keys = ("p50", "p90", "p99", "iqr", "mean")
        return {f"step_time_ms_{k}": None for k in keys}
    ms = np.asarray(step_times_s, dtype=float) * 1000.0
    p25, p50, p75, p90, p99 = np.percentile(ms, [25, 50, 75, 90, 99])
    return {
        "step_time_ms_p50": float(p50),
        "step_time_ms_p90": float(p90),
        "step_time_ms_p99": float(p99),
        "step_time_ms_iqr": float(p75 - p25),
        "step_time_ms_mean": float(ms.mean()),
    }


# --- memory -------------------------------------------------------------------------------

_MB = 1024 * 1024


def reset_peak_memory(device: torch.device) -> None:
    """Start a fresh peak: CUDA's allocator counters, and the process's RSS high-water mark."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:  # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass  # not Linux, or not permitted: the peak then spans the whole process


def _rss_peak_mb() -> float:
    """High-water mark of this process's resident set, in MB."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    # ru_maxrss is KiB on Linux, bytes on macOS
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (_MB if os.uname().sysname == "Darwin" else 1024.0)


def workers_pss_mb() -> float:
    """Proportional set size of this process's children (the DataLoader workers), in MB.

    PSS splits pages shared with the parent (torch's libraries, the dataset mapped before the
    fork) between the processes sharing them, so adding it to the parent's RSS does not count
    them twice.
    """
    import psutil

    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            total += child.memory_full_info().pss / _MB
        except (psutil.Error, AttributeError):
            continue
    return total


def peak_memory(device: torch.device, workers_mb: float = 0.0) -> dict[str, float | None]:
    """Peak memory since :func:`reset_peak_memory`.

    ``peak_mem_mb`` is what limits the batch size on that device: CUDA's peak allocated bytes
    on a GPU; on the CPU the process's peak RSS plus its DataLoader workers' PSS.
    """
    rss = _rss_peak_mb()
    out: dict[str, float | None] = {
        "peak_rss_mb": rss,
        "workers_pss_mb": workers_mb,
        "cuda_max_allocated_mb": None,
        "cuda_max_reserved_mb": None,
    }
    if device.type == "cuda":
        out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / _MB
        out["cuda_max_reserved_mb"] = torch.cuda.max_memory_reserved(device) / _MB
        out["peak_mem_mb"] = out["cuda_max_allocated_mb"]
    else:
        out["peak_mem_mb"] = rss + workers_mb
    return out


def release_cached_memory(device: torch.device) -> None:
    """Give cached blocks back after an OOM so the error report itself can allocate."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def _vm_data_bytes() -> int:
    """Private writable memory this process has mapped (Linux's VmData), in bytes."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("VmData not found in /proc/self/status")


def limit_cpu_memory(budget_mb: float) -> int:
    """Let this process map at most ``budget_mb`` more private writable memory than it has now.

    The cap is ``RLIMIT_DATA`` (Linux >= 4.7 counts anonymous mappings in it, so large tensors
    are covered). Allocations beyond it fail inside the allocator (a real ``DefaultCPUAllocator``
    error, not a simulated one), so an over-large batch on the CPU is recorded as ``oom`` as on
    a GPU. Reserved-but-untouched address space (thread stacks' guard areas, malloc arenas) is
    not counted, unlike ``RLIMIT_AS``. Forked DataLoader workers inherit the cap, each process
    for itself. Returns the limit in bytes.
    """
    limit = int(_vm_data_bytes() + budget_mb * _MB)
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    return limit


_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "defaultcpuallocator",
    "not enough memory",
)


def is_oom(exc: BaseException) -> bool:
    """Is ``exc`` an allocator failure (CUDA, MPS or CPU) rather than a bug?"""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        message = str(exc).lower()
        return any(marker in message for marker in _OOM_MARKERS)
    return False


# --- compute: peak, utilisation (FLOPs: batchscope.bench.flops) --------------------------

#: Dense peak TFLOP/s by GPU name fragment: (bf16/fp16 tensor cores, fp32). Vendor datasheet
#: figures for the SXM parts; set ``measure.peak_tflops`` for anything else.
PEAK_TFLOPS = {
    "H200": (989.0, 67.0),
    "H100": (989.0, 67.0),
    "A100": (312.0, 19.5),
    "L40S": (362.0, 91.6),
    "L4": (121.0, 30.3),
    "A10": (125.0, 31.2),
    "V100": (125.0, 15.7),
    "T4": (65.0, 8.1),
}


def peak_tflops(device_name: str | None, precision: str) -> float | None:
    """The device's dense peak for ``precision`` from :data:`PEAK_TFLOPS`, if it is listed."""
    for fragment, (half, single) in PEAK_TFLOPS.items():
        if device_name and fragment in device_name:
            return single if precision == "fp32" else half
    return None


class GpuUtilisation:
    """Samples NVML's GPU utilisation in a background thread while measuring (CUDA only).

    Sampling every ``interval_s`` costs one NVML query per interval; without ``pynvml``
    (nvidia-ml-py) or off CUDA, :attr:`mean_pct` stays None. Samples are kept only while
    :attr:`active` is true (the measured loop sets it during its measured steps).
    """

    def __init__(self, device: torch.device, interval_s: float = 0.2):
        self.device = device
        self.interval_s = interval_s
        self.samples: list[float] = []
        self.active = True
        self._stop = None

    @property
    def mean_pct(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None

    def __enter__(self):
        if self.device.type != "cuda":
            return self
        try:
            import pynvml

            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else 0
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            if index < len(visible) and visible[index].strip().isdigit():
                index = int(visible[index])  # NVML counts physical GPUs, CUDA visible ones
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - no NVML: utilisation is simply not reported
            return self
        import threading

        self._stop = threading.Event()

        def sample() -> None:
            while not self._stop.wait(self.interval_s):
                if not self.active:
                    continue
                self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._stop.set()
            self._thread.join()
