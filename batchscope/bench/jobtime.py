"""Where a benchmark job's time goes: its process's life cut into phases on the host clock.

Every result carries ``process_s`` (seconds since the operating system started the process,
read just before the result is written) and the ``phase_<name>_s`` keys of :data:`PHASES`,
which add up to it: the phases the job times itself (:class:`JobClock`), the loop's
(``batchscope.bench.loop``, from its steps' host times) and the validation after training
(``batchscope.bench.runner``); ``phase_other_s`` is what none of them covers. The meaning of
each: docs/results.md ("Where a job's time goes"). Only the measured steps are the
measurement; everything else is what a round pays to get them.

No torch here: the clock starts before torch is imported.
"""

from __future__ import annotations

import os
import time

#: The phases of a job's process, in the order they happen; ``phase_<name>_s`` in a result.
PHASES = (
    "startup",  # the process's start to the job's clock: interpreter, imports before it
    "setup",  # the job's own imports, the environment, device, threads and seeds
    "data",  # opening the dataset's splits
    "model",  # building the model and loading its weights
    "flops",  # counting its FLOPs
    "prepare",  # the model on the device, loaders, optimizer, samplers: up to the first step
    "workers",  # the first loader iterator to its first batch (worker start-up)
    "warmup",  # the warm-up steps, less the above
    "measured",  # the measured steps (measured_s, on the host clock)
    "paused",  # pauses in the loop (in-training evaluation, noise scale) and the steps after
    "diagnostic",  # the device-synchronised steps that time each phase of a step
    "validation",  # the validation pass after training
    "write",  # writing the steps CSV
    "other",  # what none of the above covers: the loop's end, the result's assembly
)


def launch() -> str:
    """How this process started (``launch`` in a result): ``forked`` from a warm interpreter
    (``batchscope.bench.warm`` marks the child), else ``fresh``."""
    from batchscope.bench.launch import LAUNCH_ENV

    return "forked" if os.environ.get(LAUNCH_ENV) == f"forked:{os.getpid()}" else "fresh"


def phase_key(name: str) -> str:
    """The result key of phase ``name``."""
    return f"phase_{name}_s"


def process_age_s() -> float | None:
    """Seconds since the operating system started this process, or None where unknown.

    On Linux from the process's start in clock ticks since boot (``/proc/self/stat``) against
    the boot-time clock: to a tick (10 ms). psutil's ``create_time`` elsewhere: on Linux it
    adds the boot time ``/proc/stat`` gives in whole seconds, up to a second off.
    """
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, after pid and comm
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started
    except (OSError, IndexError, ValueError, AttributeError):
        pass
    try:
        import psutil

        return time.time() - psutil.Process().create_time()
    except Exception:  # noqa: BLE001 - no figure is better than no result
        return None


class JobClock:
    """The job's own phases: :meth:`lap` ends the phase under way, :meth:`fields` adds the
    loop's and closes the account against the process's age."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        age = process_age_s()
        self.startup_s = max(0.0, age) if age is not None else None
        self._last = self.started
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        """End phase ``name`` now: the time since the last lap is its (added to what it had)."""
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + now - self._last
        self._last = now

    def skip(self) -> None:
        """Start the next phase now, leaving the time since the last lap to ``other`` (a block
        whose phases another part of the job times, such as the loop)."""
        self._last = time.perf_counter()

    def elapsed_s(self) -> float:
        """Seconds on the job's clock (``wall_s``)."""
        return time.perf_counter() - self.started

    def fields(self, timed: dict) -> dict[str, float | None]:
        """``process_s`` and every ``phase_*_s``: the laps plus the phases in ``timed`` (the
        loop's and the runner's, by key; None: not measured), ``phase_other_s`` the rest.
        Without the process's start, ``process_s``, ``phase_startup_s`` and ``phase_other_s``
        are null."""
        out: dict[str, float | None] = {
            phase_key(name): float(self.laps.get(name, 0.0)) for name in PHASES[:-1]
        }
        for key, value in timed.items():
            if key in out and value is not None:
                out[key] += float(value)
            elif key in out:  # not measured (the workers' start without a warm-up)
                out[key] = None
        out[phase_key("startup")] = self.startup_s
        if self.startup_s is None:
            return {"launch": launch(), "process_s": None, **out, phase_key("other"): None}
        process_s = self.startup_s + self.elapsed_s()
        known = sum(v for v in out.values() if v is not None)
        other = max(0.0, process_s - known)
        return {"launch": launch(), "process_s": process_s, **out, phase_key("other"): other}
