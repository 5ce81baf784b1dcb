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
from contextlib import contextmanager

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


#: Fewer measured steps than this leave ``step_time_ms_p99`` null: the 99th percentile of fewer
#: steps is their largest, or next to it, and says nothing about the tail.
MIN_STEPS_FOR_P99 = 100


def step_stats(step_times_s: Sequence[float]) -> dict[str, float | None]:
    """Percentiles and interquartile range of step times, in milliseconds (the 99th only from
    :data:`MIN_STEPS_FOR_P99` steps on)."""
    if len(step_times_s) == 0:
        keys = ("p50", "p90", "p99", "iqr", "mean")
        return {f"step_time_ms_{k}": None for k in keys}
    ms = np.asarray(step_times_s, dtype=float) * 1000.0
    p25, p50, p75, p90, p99 = np.percentile(ms, [25, 50, 75, 90, 99])
    return {
        "step_time_ms_p50": float(p50),
        "step_time_ms_p90": float(p90),
        "step_time_ms_p99": float(p99) if len(ms) >= MIN_STEPS_FOR_P99 else None,
        "step_time_ms_iqr": float(p75 - p25),
        "step_time_ms_mean": float(ms.mean()),
    }


# --- memory -------------------------------------------------------------------------------

_MB = 1024 * 1024


#: The largest RSS peak read since :func:`reset_peak_memory`, in MB: Linux updates the
#: high-water mark it keeps lazily and reports the larger of it and the current RSS, so a later
#: VmHWM can read lower than an earlier one.
_rss_peak_read_mb = 0.0


def reset_peak_memory(device: torch.device) -> None:
    """Start a fresh peak: CUDA's allocator counters, and the process's RSS high-water mark."""
    global _rss_peak_read_mb
    _rss_peak_read_mb = 0.0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:  # Linux >= 4.0: writing 5 resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass  # not Linux, or not permitted: the peak then spans the whole process


def _rss_peak_mb() -> float:
    """High-water mark of this process's resident set, in MB: never lower than an earlier
    reading since :func:`reset_peak_memory`."""
    global _rss_peak_read_mb
    _rss_peak_read_mb = max(_rss_peak_read_mb, _read_rss_peak_mb())
    return _rss_peak_read_mb


def _read_rss_peak_mb() -> float:
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


def _descendants(pid: int) -> list[int]:
    """The processes ``pid`` forked, and theirs, recursively (Linux's ``task/*/children``;
    psutil elsewhere)."""
    try:
        found, todo = [], [pid]
        while todo:
            parent = todo.pop()
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as handle:
                    kids = [int(child) for child in handle.read().split()]
                found += kids
                todo += kids
        return found
    except OSError:  # not Linux, or no CONFIG_PROC_CHILDREN, or a process just ended
        import psutil

        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []


def _uss_mb(pid: int) -> float | None:
    """Unique set size of process ``pid`` (its pages no other process maps), in MB."""
    import psutil

    try:
        return psutil.Process(pid).memory_full_info().uss / _MB
    except (psutil.Error, AttributeError):  # ended meanwhile, or no USS on this platform
        return None


class HostMemory:
    """Samples the host memory of this process's descendants (the DataLoader workers) in a
    background thread while measuring: the peak of their summed USS, :attr:`workers_uss_mb`.

    USS, not RSS or PSS: a worker forked from the job shares the job's pages (torch's libraries,
    a dataset loaded before the fork) until one of them writes to a page, and the job's own RSS
    already counts each of those once; a worker's RSS would count them again, its PSS would
    count a share of them again. The USS (the pages only that worker maps: its own heap,
    batches, pages it copied on writing) adds exactly what the workers add. Pages that only
    the workers share with each other (a library none but they load) are not counted.

    Reading a worker's USS walks its page tables (about 10 ms for a forked torch process
    here), so a reading is taken every ``interval_s``, or as soon as the set of descendants
    changes (workers started), and never more than ``max_duty`` of the time, whatever the
    number of workers. A worker's memory (its heap and its prefetched batches) changes slowly;
    the job's own peak, which a short step can hold for milliseconds, is the exact high-water
    mark (:func:`peak_memory`), not a sample.
    """

    def __init__(self, interval_s: float = 0.5, poll_s: float = 0.05, max_duty: float = 0.02):
        self.interval_s, self.poll_s, self.max_duty = interval_s, poll_s, max_duty
        self.readings = 0
        self.workers_uss_mb = 0.0
        self._pid = os.getpid()
        self._stop = None

    def sample(self) -> list[int]:
        """Read the descendants' USS now; the peak keeps the largest sum. Returns their pids."""
        pids = _descendants(self._pid)
        total = sum(mb for mb in map(_uss_mb, pids) if mb is not None)
        self.workers_uss_mb = max(self.workers_uss_mb, total)
        self.readings += 1
        return pids

    def start(self) -> HostMemory:
        """Start sampling (once): before ``limit_cpu_memory``, which would count the thread's
        stack and its allocator arena, mapped when it starts, against the budget."""
        if self._stop is not None:
            return self
        import threading

        import psutil  # noqa: F401 - imported here, not under the budget

        self._stop, ready = threading.Event(), threading.Event()

        def run() -> None:
            seen: set[int] = set(_descendants(self._pid))
            ready.set()
            due = 0.0
            try:
                while not self._stop.wait(self.poll_s):
                    now = time.perf_counter()
                    pids = set(_descendants(self._pid))
                    if now < due and pids <= seen or not pids:
                        seen = pids  # an ended worker is no reason to read the others again
                        continue
                    seen = set(self.sample())
                    cost = time.perf_counter() - now
                    due = time.perf_counter() + max(self.interval_s, cost / self.max_duty)
            except MemoryError:  # under a tight memory budget: the readings so far stand
                pass

        self._thread = threading.Thread(target=run, name="batchscope-host-memory", daemon=True)
        self._thread.start()
        ready.wait()
        return self

    def __enter__(self) -> HostMemory:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self._stop is not None:
            self._stop.set()
            self._thread.join()

    @contextmanager
    def sampling(self):
        """The sampling (if :meth:`start` started it) for the ``with`` block, stopped at its
        end; not started, no thread runs and one reading is taken at the end instead (a run
        without workers has no descendants to watch, normally none at all)."""
        try:
            yield self
        finally:
            if self._stop is not None:
                self.__exit__()
            else:
                self.sample()


def peak_memory(device: torch.device, host: HostMemory | None = None) -> dict[str, float | None]:
    """Peak memory since :func:`reset_peak_memory`; ``host`` the workers' sampled memory.

    ``peak_mem_mb`` is what limits the batch size on that device: CUDA's peak allocated bytes
    on a GPU; on the CPU the process's peak RSS plus the peak of its workers' summed USS
    (:class:`HostMemory`): the job's pages counted once, whoever else maps them, and each
    worker's own pages added. Two peaks added: at most what they need together, if they
    coincide.
    """
    rss = _rss_peak_mb()
    workers = host.workers_uss_mb if host is not None else 0.0
    out: dict[str, float | None] = {
        "peak_rss_mb": rss,
        "workers_uss_mb": workers,
        "cuda_max_allocated_mb": None,
        "cuda_max_reserved_mb": None,
    }
    if device.type == "cuda":
        out["cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / _MB
        out["cuda_max_reserved_mb"] = torch.cuda.max_memory_reserved(device) / _MB
        out["peak_mem_mb"] = out["cuda_max_allocated_mb"]
    else:
        out["peak_mem_mb"] = rss + workers
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
    global _CAPPED
    _CAPPED = True
    return limit


#: Whether :func:`limit_cpu_memory` capped this process: then oneDNN's failure to create a
#: primitive (its scratch buffer refused by the cap) is the cap's doing, an allocator failure.
_CAPPED = False
_CAPPED_OOM_MARKERS = ("could not create a primitive",)

_OOM_MARKERS = (
    "out of memory",
    "can't allocate memory",
    "cannot allocate memory",
    "defaultcpuallocator",
    "not enough memory",
)


def is_oom(exc: BaseException) -> bool:
    """Is ``exc`` an allocator failure (CUDA, MPS or CPU) rather than a bug? Under a CPU memory
    cap, oneDNN reports a refused scratch buffer as a primitive it could not create."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        message = str(exc).lower()
        markers = _OOM_MARKERS + (_CAPPED_OOM_MARKERS if _CAPPED else ())
        return any(marker in message for marker in markers)
    return False


# --- compute: peak, utilisation (FLOPs: batchscope.bench.flops) --------------------------

#: Dense (not sparse) peak TFLOP/s by GPU name fragment, per math mode: bf16/fp16 on tensor
#: cores, TF32 on tensor cores (None: the GPU has none), plain fp32. Vendor datasheet figures
#: for the SXM parts; set ``measure.peak_tflops`` for anything else.
PEAK_TFLOPS = {
    "H200": (989.0, 494.7, 67.0),
    "H100": (989.0, 494.7, 67.0),
    "A100": (312.0, 156.0, 19.5),
    "L40S": (362.0, 183.0, 91.6),
    "L4": (121.0, 60.0, 30.3),
    "A10": (125.0, 62.5, 31.2),
    "V100": (125.0, None, 15.7),
    "T4": (65.0, None, 8.1),
}

#: Math modes, by the order of :data:`PEAK_TFLOPS`'s figures.
_MODE_COLUMN = {"bf16": 0, "fp16": 0, "tf32": 1, "fp32": 2}


def tf32_allowed() -> dict[str, bool]:
    """Whether torch lets fp32 work run in TF32 now: ``conv`` (cuDNN convolutions; on by
    default) and ``matmul`` (cuBLAS matrix products; off by default, on with
    ``torch.set_float32_matmul_precision("high")``). Read from the ``fp32_precision`` flags
    where torch has them, else from the older ``allow_tf32`` ones."""

    def flag(backend, legacy) -> bool:
        precision = getattr(backend, "fp32_precision", "none")
        if precision in ("tf32", "ieee"):
            return precision == "tf32"
        return bool(legacy())

    cudnn, cuda = torch.backends.cudnn, torch.backends.cuda
    return {
        "conv": flag(getattr(cudnn, "conv", None), lambda: cudnn.allow_tf32),
        "matmul": flag(cuda.matmul, lambda: cuda.matmul.allow_tf32),
    }


def math_modes(
    precision: str, capability: str | None, tf32: dict[str, bool] | None = None
) -> dict[str, str]:
    """The math mode convolutions (``conv``) and matrix products (``matmul``) run in on a GPU
    of compute ``capability`` ("8.0"): the autocast dtype for bf16/fp16; for fp32, ``tf32``
    where torch allows it (``tf32``, default :func:`tf32_allowed`) and the GPU has it
    (capability 8.0, Ampere, and later), else ``fp32``."""
    if precision != "fp32":
        return {"conv": precision, "matmul": precision}
    tf32 = tf32_allowed() if tf32 is None else tf32
    has_tf32 = capability is not None and int(capability.split(".")[0]) >= 8
    return {op: "tf32" if has_tf32 and tf32[op] else "fp32" for op in ("conv", "matmul")}


def peak_tflops(device_name: str | None, mode: str) -> float | None:
    """The device's dense peak in math ``mode`` from :data:`PEAK_TFLOPS`, if it is listed
    (a GPU without TF32 gets its fp32 figure for ``tf32``)."""
    for fragment, figures in PEAK_TFLOPS.items():
        if device_name and fragment in device_name:
            figure = figures[_MODE_COLUMN[mode]]
            return figures[_MODE_COLUMN["fp32"]] if figure is None else figure
    return None


def compute_peak(
    device_name: str | None, modes: dict[str, str], conv_share: float
) -> tuple[str, float | None]:
    """The math mode of the work and the peak it could run at: ``(math_mode, TFLOP/s)``.

    ``conv_share`` of the FLOPs are convolutions, run in ``modes["conv"]``, the rest matrix
    products in ``modes["matmul"]``. When both do work in different modes, the mode is the two
    joined ("fp32+tf32", PyTorch's default for a model with both) and the peak is the rate of
    the whole at each part's own peak: FLOPs / Σ (part's FLOPs / part's peak).
    """
    shares = {"conv": conv_share, "matmul": 1.0 - conv_share}
    working = {op: share for op, share in shares.items() if share > 0} or {"matmul": 1.0}
    mode = "+".join(sorted({modes[op] for op in working}))
    peaks = {op: peak_tflops(device_name, modes[op]) for op in working}
    if any(peak is None for peak in peaks.values()):
        return mode, None
    return mode, 1.0 / sum(share / peaks[op] for op, share in working.items())


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


# --- the device's whole memory (the largest-batch search's judgement) --------------------


def cuda_peak_device_mb(device: torch.device) -> float | None:
    """All the device memory the run has needed at its peak, in MB: the caching allocator's peak
    reservation plus what the device holds outside it now (the CUDA context, libraries' own
    memory, other processes). Call as the run ends, the allocator's cache still held; None off
    CUDA.

    ``max_memory_allocated`` leaves out the allocator's slack and everything outside it, which
    on a real GPU is hundreds of MB: a batch judged on it alone can fail in the sweep.
    """
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    outside = max(0, total - free - torch.cuda.memory_reserved(device))
    return (torch.cuda.max_memory_reserved(device) + outside) / _MB
