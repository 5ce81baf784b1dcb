"""The machine's load while a run measures: what other processes took from it.

batchscope serialises its own jobs, but nothing stops another user's job, a build or a browser
from sharing the machine, and a run measured beside them is slower for reasons that have nothing
to do with its batch size. Two figures say how much of that there was:

- ``foreign_cpu_frac``: CPU time spent by processes outside this run's process tree, as a share
  of the machine's capacity (wall seconds × CPUs) over the run. The machine's busy time comes from
  ``/proc/stat``; this process's own time and its children's (DataLoader workers, once joined)
  from ``getrusage``; the difference is everyone else's.
- ``loadavg_1m``: the kernel's one-minute load average at the run's end, for comparison with the
  number of CPUs.

Off Linux (no ``/proc/stat``) both are None.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice;
# guest time is already counted in user time.
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


def machine_busy_s(stat_path: str = "/proc/stat") -> float | None:
    """Seconds of CPU time the whole machine has spent busy since boot, or None off Linux."""
    try:
        with open(stat_path) as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(fields[1 + i]) for i in _BUSY_FIELDS) / ticks


def own_cpu_s() -> float:
    """CPU seconds of this process and its waited-for children (user + system)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@dataclass
class ForeignLoad:
    """Measures the other processes' CPU share over a ``with`` block.

    ``stat_path`` and ``own_clock`` are what it reads (replaceable in tests)."""

    stat_path: str = "/proc/stat"
    cpus: int | None = None
    own_clock: Callable[[], float] = field(default=own_cpu_s, repr=False)
    foreign_cpu_s: float | None = None
    foreign_cpu_frac: float | None = None
    loadavg_1m: float | None = None
    #: this process tree's own CPU seconds over the block
    own_s: float | None = None

    def __enter__(self) -> ForeignLoad:
        self._wall = time.monotonic()
        self._busy = machine_busy_s(self.stat_path)
        self._own = self.own_clock()
        return self

    def __exit__(self, *exc) -> None:
        busy = machine_busy_s(self.stat_path)
        wall_s = time.monotonic() - self._wall
        if busy is None or self._busy is None or wall_s <= 0:
            return
        self.own_s = self.own_clock() - self._own
        self._wall_s = wall_s
        self.discount(busy - self._busy - self.own_s)
        try:
            self.loadavg_1m = os.getloadavg()[0]
        except OSError:
            self.loadavg_1m = None

    def discount(self, foreign_s: float) -> None:
        """Set the foreign time (less, in a run on several devices, the sibling ranks' own
        time on this machine: they are the run, not foreign) and its share."""
        cpus = self.cpus or os.cpu_count() or 1
        # clock ticks are coarse (10 ms): never report a negative share
        self.foreign_cpu_s = max(0.0, foreign_s)
        self.foreign_cpu_frac = min(1.0, self.foreign_cpu_s / (self._wall_s * cpus))

    def fields(self) -> dict[str, float | None]:
        """The result's fields (docs/results.md)."""
        return {
            "foreign_cpu_s": self.foreign_cpu_s,
            "foreign_cpu_frac": self.foreign_cpu_frac,
            "loadavg_1m": self.loadavg_1m,
        }
