"""Energy over the measured steps, from the counters the hardware keeps: NVML's total energy
on an NVIDIA GPU (Volta and later), RAPL's package energy on a CPU that exposes it in Linux's
powercap sysfs. Counters are read at the measured span's two ends only (no polling thread):
what the device used in between is the difference.

The measured loop (``batchscope.bench.loop``) opens the span just before its first measured
step and closes it after its last, the device synchronised at both ends, so the span holds the
measured steps and whatever ran off the clock between them (a noise-scale measurement's pause).
``mean_power_w`` is the span's energy over its seconds; ``energy_j_per_sample`` that power over
the measured steps' own seconds, per measured sample (the pauses counted at the span's mean
power, not at their own).

Where no counter can be read, ``energy_source`` says why (``unavailable: ...``) and the numbers
are null. Both counters measure the whole device: NVML the whole GPU, RAPL every CPU package
(other processes on it, and their idle power, included).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

#: Linux's powercap tree; a top-level RAPL zone (a CPU package) is ``intel-rapl:N`` (its
#: sub-zones ``intel-rapl:N:M``, core and uncore, are parts of the package and not added).
POWERCAP = Path("/sys/class/powercap")
_PACKAGE_ZONE = re.compile(r"intel-rapl:\d+")

UNAVAILABLE = "unavailable"


class CounterError(RuntimeError):
    """An energy counter cannot be read; the message says why."""


class NvmlCounter:
    """A GPU's total energy since the driver loaded (NVML, millijoules)."""

    source = "nvml"

    def __init__(self, pynvml, handle):
        self._nvml, self._handle = pynvml, handle
        try:
            self.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
        except pynvml.NVMLError:
            self.power_limit_w = None

    def read_j(self) -> float:
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0
        except self._nvml.NVMLError as exc:
            raise CounterError(f"NVML's energy counter cannot be read ({exc})") from exc


class RaplCounter:
    """The CPU packages' energy (RAPL through powercap, microjoules), summed over packages,
    since this counter was opened. Each package's counter wraps around at its
    ``max_energy_range_uj``."""

    source = "rapl"
    power_limit_w = None

    def __init__(self, zones: list[Path]):
        self._zones = zones
        self._range_uj = [int(_read(zone / "max_energy_range_uj")) for zone in zones]
        self._last_uj = [int(_read(zone / "energy_uj")) for zone in zones]
        self._total_uj = 0

    def read_j(self) -> float:
        """Joules since this counter was opened. A package's counter below its previous reading
        wrapped once in between: its range is added (a span longer than one wrap, hours at a
        package's full power, would read low)."""
        for i, zone in enumerate(self._zones):
            now = int(_read(zone / "energy_uj"))
            delta = now - self._last_uj[i]
            if delta < 0:
                delta += self._range_uj[i]
            self._total_uj += delta
            self._last_uj[i] = now
        return self._total_uj / 1e6


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except PermissionError as exc:
        raise CounterError(
            f"RAPL energy counters are not readable (permission denied: {path}; Linux lets "
            "only root read them unless an administrator allows it)"
        ) from exc
    except OSError as exc:
        raise CounterError(f"RAPL energy counter {path} cannot be read ({exc.strerror})") from exc


def nvml_index(device_index: int | None) -> int:
    """NVML's index of CUDA device ``device_index``: NVML counts physical GPUs, CUDA the ones
    CUDA_VISIBLE_DEVICES leaves visible."""
    index = device_index if device_index is not None else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    if index < len(visible) and visible[index].strip().isdigit():
        index = int(visible[index])
    return index


def nvml_counter(device_index: int | None):
    """The NVML counter of a CUDA device; ``CounterError`` with the reason where there is none."""
    try:
        import pynvml
    except ImportError as exc:
        raise CounterError("nvidia-ml-py (pynvml) is not installed") from exc
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index))
    except pynvml.NVMLError as exc:
        raise CounterError(f"NVML cannot be opened ({exc})") from exc
    counter = NvmlCounter(pynvml, handle)
    try:
        counter.read_j()
    except CounterError as exc:
        raise CounterError(f"{exc}: NVML keeps it on Volta and later GPUs only") from exc
    return counter


def rapl_counter(root: Path = POWERCAP) -> RaplCounter:
    """The RAPL counter of every CPU package under ``root``; ``CounterError`` with the reason
    where there is none or it cannot be read."""
    zones = sorted(p for p in root.glob("intel-rapl:*") if _PACKAGE_ZONE.fullmatch(p.name))
    if not zones:
        raise CounterError(f"no RAPL energy counter ({root} has no intel-rapl package zone)")
    return RaplCounter(zones)


def open_counter(device_type: str, device_index: int | None = None, root: Path = POWERCAP):
    """``(counter, None)`` for the device, or ``(None, reason)`` where none can be read."""
    try:
        if device_type == "cuda":
            return nvml_counter(device_index), None
        if device_type == "cpu":
            return rapl_counter(root), None
    except CounterError as exc:
        return None, str(exc)
    return None, f"no energy counter is read on a {device_type} device"


class EnergyMeter:
    """The energy of the measured span: :meth:`start` and :meth:`stop` read the counter (the
    caller has synchronised the device), :meth:`fields` gives the result's energy fields."""

    def __init__(
        self, counter, reason: str | None = None, clock: Callable[[], float] | None = None
    ):
        self.counter, self.reason = counter, reason
        self.clock = clock or time.perf_counter
        self.energy_j = 0.0
        self.span_s = 0.0
        self._start: tuple[float, float] | None = None

    @property
    def active(self) -> bool:
        """A counter is there and has not failed: the loop synchronises for it."""
        return self.counter is not None

    @property
    def started(self) -> bool:
        return self._start is not None

    def _fail(self, exc: CounterError) -> None:
        self.counter, self.reason, self._start = None, str(exc), None

    def start(self) -> None:
        if self.counter is None:
            return
        try:
            self._start = (self.counter.read_j(), self.clock())
        except CounterError as exc:
            self._fail(exc)

    def stop(self) -> None:
        if self.counter is None or self._start is None:
            return
        try:
            energy_j = self.counter.read_j()
        except CounterError as exc:
            self._fail(exc)
            return
        start_j, start_s = self._start
        self.energy_j += energy_j - start_j
        self.span_s += self.clock() - start_s
        self._start = None

    @property
    def source(self) -> str:
        if self.counter is None:
            return f"{UNAVAILABLE}: {self.reason}"
        return self.counter.source

    def fields(self, measured_s: float | None, measured_samples: int | None) -> dict:
        """``energy_source``, ``mean_power_w``, ``energy_j_per_sample`` and ``power_limit_w``
        (NVML's enforced limit; null elsewhere). The numbers are null without a counter or a
        closed span with measured steps in it."""
        out = {
            "energy_source": self.source,
            "mean_power_w": None,
            "energy_j_per_sample": None,
            "power_limit_w": getattr(self.counter, "power_limit_w", None),
        }
        if self.counter is None or self.span_s <= 0 or not measured_samples or not measured_s:
            return out
        power_w = self.energy_j / self.span_s
        out["mean_power_w"] = power_w
        out["energy_j_per_sample"] = power_w * measured_s / measured_samples
        return out


def meter_for(device) -> EnergyMeter:
    """The meter of a torch device (its counter opened now, or the reason there is none)."""
    counter, reason = open_counter(device.type, device.index)
    return EnergyMeter(counter, reason)
