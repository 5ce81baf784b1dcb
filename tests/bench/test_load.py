"""The foreign-load figures: other processes' CPU time over a run, never our own."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from batchscope.bench.load import ForeignLoad, machine_busy_s

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux /proc/stat")


def _write_stat(path, busy_ticks: int, idle_ticks: int = 1000) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {busy_ticks} 0 0 {idle_ticks} 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


def test_our_own_cpu_time_is_subtracted_from_the_machines(tmp_path):
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    own = iter([10.0, 13.0])  # this run used 3 CPU seconds
    _write_stat(stat, 100 * ticks)
    with ForeignLoad(stat_path=str(stat), cpus=4, own_clock=lambda: next(own)) as load:
        _write_stat(stat, 105 * ticks)  # the machine was busy for 5
    assert load.foreign_cpu_s == pytest.approx(2.0)  # someone else took the other 2


def test_a_run_alone_reads_no_foreign_time_even_when_clock_ticks_round_against_it(tmp_path):
    stat = tmp_path / "stat"
    own = iter([0.0, 1.0])
    _write_stat(stat, 0)
    with ForeignLoad(stat_path=str(stat), cpus=2, own_clock=lambda: next(own)) as load:
        _write_stat(stat, int(0.99 * os.sysconf("SC_CLK_TCK")))
    assert load.foreign_cpu_s == 0.0 and load.foreign_cpu_frac == 0.0


def test_a_process_spinning_beside_the_run_is_counted_as_foreign():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # started and spinning before the run begins
        before = psutil.Process(spinner.pid).cpu_times()
        with ForeignLoad() as load:
            time.sleep(1.5)
        after = psutil.Process(spinner.pid).cpu_times()
    finally:
        spinner.kill()
        spinner.wait()
    spun_s = (after.user + after.system) - (before.user + before.system)
    # other load on the machine can only add to it; ticks are 10 ms
    assert load.foreign_cpu_s >= 0.8 * spun_s - 0.05
    assert 0 < load.foreign_cpu_frac <= 1
    assert load.loadavg_1m is not None


def test_without_proc_stat_the_figures_are_unknown_not_zero(tmp_path):
    with ForeignLoad(stat_path=str(tmp_path / "missing")) as load:
        pass
    assert load.fields() == {"foreign_cpu_s": None, "foreign_cpu_frac": None, "loadavg_1m": None}
    assert machine_busy_s(str(tmp_path / "missing")) is None
