"""Energy counters (NVML against a fake pynvml, RAPL against a fake powercap tree) and the
measured loop's span: read once before the first measured step and once after the last."""

import sys
import types

import pytest
import torch

from batchscope.bench import energy, loop
from tests.bench.test_runner import _fake_loop, _FakeEvent, _FakeTime


class _NVMLError(Exception):
    pass


def _fake_pynvml(monkeypatch, readings_mj, *, limit_mw=300_000, supported=True):
    """A pynvml module whose energy counter returns ``readings_mj`` one after another."""
    readings = iter(readings_mj)

    def total_energy(handle):
        if not supported:
            raise _NVMLError("Not Supported")
        return next(readings)

    fake = types.SimpleNamespace(
        NVMLError=_NVMLError,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: ("gpu", index),
        nvmlDeviceGetTotalEnergyConsumption=total_energy,
        nvmlDeviceGetEnforcedPowerLimit=lambda handle: limit_mw,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)


class _Clock:
    def __init__(self, *times):
        self.times = iter(times)

    def __call__(self):
        return next(self.times)


def test_nvml_counter_gives_exact_joules_per_sample_and_watts(monkeypatch):
    # opening reads once; then 1 000 000 mJ at t=10 s and 1 500 000 mJ at t=12 s
    _fake_pynvml(monkeypatch, [999_000, 1_000_000, 1_500_000])
    counter, reason = energy.open_counter("cuda", 0)
    assert reason is None
    meter = energy.EnergyMeter(counter, clock=_Clock(10.0, 12.0))
    meter.start()
    meter.stop()
    fields = meter.fields(measured_s=1.6, measured_samples=400)
    assert fields["energy_source"] == "nvml"
    assert fields["mean_power_w"] == pytest.approx(250.0)  # 500 J over 2 s
    assert fields["energy_j_per_sample"] == pytest.approx(1.0)  # 250 W x 1.6 s / 400
    assert fields["power_limit_w"] == pytest.approx(300.0)


def test_nvml_without_the_counter_says_why(monkeypatch):
    _fake_pynvml(monkeypatch, [], supported=False)
    meter = energy.meter_for(torch.device("cuda", 0))
    fields = meter.fields(1.0, 10)
    assert fields["energy_source"].startswith("unavailable: NVML's energy counter")
    assert "Volta" in fields["energy_source"]
    assert fields["mean_power_w"] is None and fields["energy_j_per_sample"] is None


def test_without_pynvml_energy_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    source = energy.meter_for(torch.device("cuda")).source
    assert source == "unavailable: nvidia-ml-py (pynvml) is not installed"


def _zone(root, name, uj, range_uj=1_000_000_000):
    zone = root / name
    zone.mkdir()
    (zone / "energy_uj").write_text(f"{uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return zone


def test_rapl_sums_packages_and_survives_a_wrap(tmp_path):
    pkg0 = _zone(tmp_path, "intel-rapl:0", 998_000_000)  # 2 J below its wrap at 1000 J
    pkg1 = _zone(tmp_path, "intel-rapl:1", 5_000_000)
    core = _zone(tmp_path, "intel-rapl:0:0", 0)  # a part of package 0: not added again
    counter, reason = energy.open_counter("cpu", root=tmp_path)
    assert reason is None and counter.source == "rapl"
    meter = energy.EnergyMeter(counter, clock=_Clock(0.0, 2.0))
    meter.start()
    (pkg0 / "energy_uj").write_text("1000000\n")  # wrapped: 2 J + 1 J
    (pkg1 / "energy_uj").write_text("8000000\n")  # 3 J
    (core / "energy_uj").write_text("900000000\n")
    meter.stop()
    assert meter.energy_j == pytest.approx(6.0)
    fields = meter.fields(measured_s=2.0, measured_samples=60)
    assert fields["mean_power_w"] == pytest.approx(3.0)
    assert fields["energy_j_per_sample"] == pytest.approx(0.1)
    assert fields["power_limit_w"] is None


def test_rapl_permission_denied_says_so(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", 1)
    real = energy.Path.read_text

    def read_text(path, *args, **kwargs):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(energy.Path, "read_text", read_text)
    source = energy.EnergyMeter(*energy.open_counter("cpu", root=tmp_path)).source
    assert source.startswith("unavailable: RAPL energy counters are not readable")
    assert "permission denied" in source


def test_no_powercap_zone_and_mps_are_unavailable(tmp_path):
    assert energy.open_counter("cpu", root=tmp_path)[1].startswith("no RAPL energy counter")
    assert energy.open_counter("mps")[1] == "no energy counter is read on a mps device"


@pytest.mark.skipif(energy.POWERCAP.exists(), reason="this machine has powercap")
def test_on_this_machine_energy_is_unavailable():
    fields = energy.meter_for(torch.device("cpu")).fields(1.0, 10)
    assert fields["energy_source"].startswith("unavailable: no RAPL energy counter")
    assert fields["mean_power_w"] is None


class _PowerCounter:
    """A counter at 100 W on the test's fake clock; remembers when it was read."""

    source = "nvml"
    power_limit_w = 250.0

    def __init__(self, clock):
        self.clock, self.reads = clock, []

    def read_j(self):
        self.reads.append(self.clock.now)
        return 100.0 * self.clock.now


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_loop_meters_exactly_the_measured_steps(monkeypatch, device):
    syncs = []
    monkeypatch.setattr(loop.measure, "synchronize", lambda device: syncs.append(device))
    if device == "cuda":
        monkeypatch.setattr(loop.measure, "peak_memory", lambda device: {"peak_mem_mb": 1.0})
        monkeypatch.setattr(loop, "_to_host", lambda loss: loss)
        monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    clock = _FakeEvent.clock = _FakeTime()
    counter = _PowerCounter(clock)
    meter = energy.EnergyMeter(counter, clock=clock.perf_counter)
    monkeypatch.setattr(loop.energy_meter, "meter_for", lambda device: meter)
    result, steps = _fake_loop(
        monkeypatch, device=torch.device(device), clock=clock, max_steps=30, diagnostic_steps=4
    )
    warmup = result["warmup_steps"]
    assert result["measured_steps"] == 15 and len(steps) == warmup + 15 + 4
    # read after the warm-up's 10 ms steps and after the 15 measured ones: not in any step
    assert counter.reads == pytest.approx([100.0 + 0.01 * warmup, 100.0 + 0.01 * (warmup + 15)])
    assert result["mean_power_w"] == pytest.approx(100.0)
    assert result["energy_j_per_sample"] == pytest.approx(100.0 * 0.15 / 120)
    assert result["energy_source"] == "nvml" and result["power_limit_w"] == 250.0
    if device == "cuda":  # the span's two ends synchronised once each, on top of the loop's
        assert len(syncs) == 2 + 1 + 4 + 2
