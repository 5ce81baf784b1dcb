"""The measured loop: steps over a DataLoader, timed, the warm-up left out.

Each step's time runs from the end of the previous step to the end of this one, so it includes
waiting for the next batch: the user pays for the input pipeline. Nothing inside the measured
steps waits for the device: on a GPU a step's end is a CUDA event recorded on the stream, and
the events are read after the loop's one synchronisation, so the host prepares step i+1 while
the device runs step i, as in any training loop. On the CPU every operation is synchronous and
the ends are host clock readings. Data wait is the host's time blocked in the loader's
``next()``. When a time-based window is full is decided on the host clock.

The first ``warmup_steps`` steps are recorded but never enter the statistics; the measured steps
are split into ``repeats`` consecutive windows whose throughputs give the median and the spread.
Hooks that run off the clock (validation, noise-scale measurements) pause it: their time is
taken out of the step they fall in, and that step and the ``num_workers × prefetch_factor``
after it (whose batches the workers prefetched during the pause, hiding their wait) are left
out of the windows (phase ``after_pause``).

The per-phase breakdown (runner, data wait, copy, forward, backward, optimizer) needs the device
synchronised at every step, so it is timed only in ``diagnostic_steps`` separate steps after
the throughput windows (phase ``diagnostic``), never in them.

Energy (``batchscope.bench.energy``): where a counter can be read, it is read just before the
first measured step and after the last, the device synchronised at both (once each, never per
step), so the warm-up and the diagnostic steps are outside the span.

An allocator failure ends the run with ``status: oom`` (``oom_step``: the step it hit, its
hooks included), a non-finite training loss with ``status: diverged``; anything else
propagates and fails the job. The batch size is never changed.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader

from batchscope.bench import energy as energy_meter
from batchscope.bench import loop_result, measure
from batchscope.bench.loop_result import BREAKDOWN, INFER_PHASES, TRAIN_PHASES
from batchscope.core.spec import RunSpec


class NothingToMeasure(ValueError):
    """The grid point leaves no step to time (a batch size too large for the data, say)."""


@dataclass
class StepLog:
    """Per-step records, flushed to the steps CSV."""

    rows: list[dict] = field(default_factory=list)

    def add(self, **row) -> None:
        self.rows.append(row)


class PhaseClock:
    """Marks phase boundaries inside a step: host clocks on the CPU, CUDA events on a GPU.

    Used in the diagnostic steps only, whose end synchronises the device before the events are
    read. On the CPU every operation is synchronous and the host clock is exact.
    """

    def __init__(self, device: torch.device, phases: tuple[str, ...]):
        self.phases = phases
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(len(phases) + 1)]
        self._times = [0.0] * (len(phases) + 1)
        self._next = 0

    def start(self) -> None:
        self._next = 0
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            self._events[self._next].record()
        else:
            self._times[self._next] = time.perf_counter()
        self._next += 1

    def durations_s(self) -> dict[str, float]:
        """Seconds per phase of the step just finished (call after synchronising)."""
        if self.cuda:
            ms = [a.elapsed_time(b) for a, b in itertools.pairwise(self._events)]
            return {p: t / 1000.0 for p, t in zip(self.phases, ms, strict=True)}
        return {
            p: b - a for p, (a, b) in zip(self.phases, itertools.pairwise(self._times), strict=True)
        }


class _NoPhases:
    """The clock the throughput steps get: it marks nothing, so a step records no event."""

    def start(self) -> None:
        pass

    def mark(self) -> None:
        pass


NO_PHASES = _NoPhases()


class StepClock:
    """Step ends on the device's timeline without waiting for the device.

    On CUDA a mark is an event recorded on the current stream (read after :meth:`settle`);
    elsewhere the host clock after ``measure.synchronize`` (a no-op on the CPU, so exact there).
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        measure.synchronize(self.device)  # the CPU: nothing; MPS: no events here, so wait
        return time.perf_counter()

    def settle(self) -> None:
        """Wait for the device once, so that every mark so far can be read."""
        measure.synchronize(self.device)

    def seconds(self, start, end) -> float:
        if self.cuda:
            return start.elapsed_time(end) / 1000.0
        return end - start


@dataclass
class _Step:
    """One step as the loop saw it; its device time is read after the loop."""

    phase: str
    samples: int
    start: object  # the previous step's end mark
    end: object
    pauses: list  # (mark, mark) spans off the clock inside this step
    host_s: float  # the same span on the host clock, pauses excluded
    data_wait_s: float
    loss: torch.Tensor | float | None
    lr: float | None
    extra: dict = field(default_factory=dict)
    seconds: float | None = None  # read once the device has passed its end


def planned_steps(spec: RunSpec, steps_per_epoch: int) -> int:
    """Steps the run is planned for: epochs (train) or one pass (infer, which ends with its
    windows, before or after it), capped by max_steps."""
    epochs = spec.train.epochs if spec.train is not None else 1
    planned = steps_per_epoch * epochs
    return planned if spec.max_steps is None else min(planned, spec.max_steps)


def _progress(total: int, desc: str):
    from tqdm import tqdm

    # Logs are files, not terminals: a line every few seconds is plenty.
    return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=5.0, ascii=True)


def _batches(loader: DataLoader, stamps: dict) -> Iterator:
    """Batches of ``loader`` epoch after epoch; notes when the first iterator is set up."""
    for epoch in itertools.count():
        started = time.perf_counter()
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):  # a rank's DistributedSampler: reshuffle per epoch
            sampler.set_epoch(epoch)
        batches = iter(loader)  # starts the worker processes
        if epoch == 0:
            stamps["iter_started"] = started
            stamps["workers_started"] = time.perf_counter()
        yield from batches
        del batches


def _to_host(loss: torch.Tensor) -> torch.Tensor:
    """The loss copied into pinned host memory behind the step on the stream: readable without
    a wait once the step's end event has completed."""
    host = torch.empty(loss.shape, dtype=loss.dtype, pin_memory=True)
    host.copy_(loss.detach(), non_blocking=True)
    return host


def _loss_value(loss) -> float | None:
    if loss is None:
        return None
    return float(loss.item()) if isinstance(loss, torch.Tensor) else float(loss)


class LoopState:
    """The state of one measured loop; :func:`measured_loop` runs it."""

    def __init__(self, spec: RunSpec, device: torch.device, planned: int):
        self.spec, self.device, self.planned = spec, device, planned
        self.measure = spec.measure
        self.phases = TRAIN_PHASES if spec.mode == "train" else INFER_PHASES
        self.clock = StepClock(device)
        self.status, self.error = "ok", None
        self.at_step = 0  # the step under way (1-based), its hooks included
        self.oom_step: int | None = None  # the step that ran out of memory
        self.steps: list[_Step] = []
        self.stamps: dict[str, float] = {}
        self.dry_run_mb = None
        self.stopped_early = False
        self.samples_seen = 0
        self.measured_host_s = 0.0
        self.measured_count = 0
        self.refill_left = 0  # steps still left out after a pause
        self.sums = dict.fromkeys(BREAKDOWN, 0.0)  # the diagnostic steps' phases
        self.diagnostic_s: list[float] = []
        self.checked = 0  # steps whose loss poll() has read
        # where the loop's time goes, on the host clock (batchscope.bench.jobtime)
        self.host_s = dict.fromkeys(("warmup", "measured", "after_pause", "diagnostic"), 0.0)
        self.paused_s = 0.0  # inside the pauses themselves
        self.prepare_s = 0.0  # the loop's own set-up before its first step

    @property
    def step(self) -> int:
        return len(self.steps)

    def windows_full(self) -> bool:
        """Every window has its minimum steps and seconds (on the host clock)."""
        m = self.measure
        return (
            self.measured_count >= m.repeats * m.min_steps
            and self.measured_host_s >= m.repeats * m.min_seconds
        )

    def finished(self) -> bool:
        """The run's end: never past max_steps. A throughput run (inference, or training with
        no target and no in-training evaluation) ends once its windows are full; inference goes
        on past one pass until they are, training ends with its planned steps whatever. A run
        towards a target does its planned steps."""
        spec = self.spec
        if spec.max_steps is not None and self.step >= spec.max_steps:
            return True
        if spec.throughput_run and self.step > self.measure.warmup_steps and self.windows_full():
            return True
        return spec.mode == "train" and self.step >= self.planned

    def next_phase(self) -> str:
        """The phase of the step about to run, before any pause inside it."""
        if self.step < self.measure.warmup_steps:
            return "warmup"
        return "after_pause" if self.refill_left > 0 else "measured"

    def record(self, step: _Step) -> None:
        """Book one finished step (times are read later, see :meth:`settle`)."""
        if step.pauses and step.phase == "measured":
            step.phase = "after_pause"
        if step.phase == "measured":
            self.measured_host_s += step.host_s
            self.measured_count += 1
        if self.refill_left > 0 and not step.pauses:
            self.refill_left -= 1
        self.host_s[step.phase] += step.host_s
        self.steps.append(step)
        self.samples_seen += step.samples
        if len(self.steps) == 1:  # the memory dry run: the allocator's peak of one whole step
            self.dry_run_mb = measure.peak_memory(self.device)["peak_mem_mb"]

    def poll(self) -> None:
        """Read the steps the device has finished, without waiting: their seconds (so a long
        run keeps no more events than the device is behind) and their losses, a non-finite one
        ending the run (on a GPU a few steps late; the rows are cut at it)."""
        while self.checked < len(self.steps):
            step = self.steps[self.checked]
            if self.clock.cuda and not step.end.query():
                return
            step.seconds = self._seconds(step)
            step.start, step.pauses = None, []  # the events it no longer needs
            if self.checked > 0:
                self.steps[self.checked - 1].end = None
            loss = _loss_value(step.loss)
            self.checked += 1
            if loss is not None and not math.isfinite(loss):
                self.status = "diverged"
                return

    def paused(self) -> None:
        """A pause ended: the workers refilled their queues, so the next steps' wait is hidden."""
        loader = self.spec.loader
        self.refill_left = self.spec.num_workers * loader.prefetch_factor

    def settle(self) -> list[float]:
        """Synchronise once and read every step's seconds, its pauses taken out."""
        self.clock.settle()
        return [self._seconds(s) if s.seconds is None else s.seconds for s in self.steps]

    def _seconds(self, step: _Step) -> float:
        total = self.clock.seconds(step.start, step.end)
        return total - sum(self.clock.seconds(a, b) for a, b in step.pauses)

    def write_rows(self, log: StepLog, seconds: list[float]) -> float | None:
        """The steps CSV's rows; returns the last finite loss. A run that diverged is cut at its
        first non-finite loss (on a GPU the loop learns of it only after the loop)."""
        elapsed, samples_seen, last_loss = 0.0, 0, None
        for number, (s, step_s) in enumerate(zip(self.steps, seconds, strict=True), start=1):
            loss = _loss_value(s.loss)
            elapsed += step_s
            samples_seen += s.samples
            log.add(
                step=number,
                phase=s.phase,
                samples_seen=samples_seen,
                elapsed_s=elapsed,
                step_time_ms=step_s * 1000.0,
                data_wait_ms=s.data_wait_s * 1000.0,
                loss=loss,
                lr=s.lr,
            )
            log.rows[-1].update(s.extra)
            last_loss = loss
            if loss is not None and not math.isfinite(loss):
                self.status = "diverged"
                del self.steps[number:], seconds[number:]
                break
        return last_loss

    def summary(self, log: StepLog, energy: energy_meter.EnergyMeter) -> dict:
        """After the loop: the device settled once, the steps CSV's rows, the result."""
        if self.status == "oom":
            measure.release_cached_memory(self.device)
        seconds = self.settle()
        last_loss = self.write_rows(log, seconds)
        result = loop_result.timing_result(self, seconds, last_loss)
        ok = result["samples_per_s"] is not None
        measured_s = result["measured_s"] if ok else None
        result.update(energy.fields(measured_s, result["measured_samples"]))
        return result


def _run_hook(state: LoopState, hook, args, pauses: list, utilisation) -> tuple[dict, float]:
    """Run ``hook(*args)`` off the clock. A hook that did something (returned a dict) leaves a
    pause in ``pauses`` and the workers' refill in ``state``; returns what it returned and the
    host seconds it paused for."""
    if hook is None:
        return {}, 0.0
    active = utilisation.active if utilisation is not None else None
    if utilisation is not None:
        utilisation.active = False
    host_start = time.perf_counter()
    start = state.clock.mark()
    extra = hook(*args)
    if extra:
        pauses.append((start, state.clock.mark()))
        state.paused()
    if utilisation is not None:
        utilisation.active = active
    if not extra:
        return {}, 0.0
    paused_s = time.perf_counter() - host_start
    state.paused_s += paused_s
    return extra, paused_s


def measured_loop(
    loader: DataLoader,
    step_fn: Callable,
    spec: RunSpec,
    device: torch.device,
    log: StepLog,
    *,
    lr_of: Callable[[], float] | None = None,
    before_step: Callable[[int, int, torch.Tensor, torch.Tensor], dict | None] | None = None,
    after_step: Callable[[int, int, torch.Tensor, torch.Tensor], dict | None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    utilisation=None,
    energy: energy_meter.EnergyMeter | None = None,
    agree: Callable[[bool], bool] | None = None,
) -> dict:
    """Run ``step_fn`` over ``loader`` and return the timing summary and status.

    ``before_step(step, samples_seen, x, y)`` runs once the step's batch is there, before the
    step (noise-scale measurements on a batch not yet trained on); ``after_step`` after the
    step (validation). Both are off the clock; what they return is added to that step's row.
    When ``should_stop()`` then says so, the run ends there (``stopped_early`` in the result).
    ``utilisation`` (a ``measure.GpuUtilisation``) samples only during the measured steps.
    ``energy`` (default: the device's ``energy.meter_for``) reads its counter at the measured
    span's ends; its fields join the result.
    ``agree(done)`` (a data-parallel run's) makes every rank end at the same step: the run
    ends when any rank's would (its windows full on its clock, its loss non-finite).
    """
    entered = time.perf_counter()
    state = LoopState(spec, device, _measurable_steps(spec, loader))
    energy = energy_meter.meter_for(device) if energy is None else energy
    bar = _progress(state.planned, f"{spec.mode} bs={loader.batch_size} nw={spec.num_workers}")
    state.clock.settle()
    last_end = state.clock.mark(), time.perf_counter()  # the end of the last step
    state.prepare_s = last_end[1] - entered
    batches = _batches(loader, state.stamps)
    try:
        _timed_steps(
            state, batches, step_fn, last_end, bar, energy, utilisation,
            lr_of=lr_of, before_step=before_step, after_step=after_step,
            should_stop=should_stop, agree=agree,
        )  # fmt: skip
        _close_span(state, energy, utilisation)
        if _wants_diagnostics(state):
            _diagnostic_steps(state, batches, step_fn, lr_of)
    except Exception as exc:  # noqa: BLE001 - only allocator failures are results
        if not measure.is_oom(exc):
            raise
        state.status, state.error = "oom", str(exc).strip().splitlines()[0][:500]
        state.oom_step = state.at_step
    finally:
        if utilisation is not None:
            utilisation.active = False
        batches.close()  # shuts the workers down
        bar.close()
    return state.summary(log, energy)


def _measurable_steps(spec: RunSpec, loader: DataLoader) -> int:
    """The run's planned steps; raises NothingToMeasure when the warm-up would take them all."""
    planned = planned_steps(spec, len(loader))
    if planned <= spec.measure.warmup_steps:
        raise NothingToMeasure(
            f"batch_size {loader.batch_size} gives {planned} steps, not more than the "
            f"{spec.measure.warmup_steps} warm-up steps: nothing would be measured"
        )
    return planned


def _timed_steps(
    state: LoopState,
    batches: Iterator,
    step_fn: Callable,
    last_end: tuple,
    bar,
    energy: energy_meter.EnergyMeter,
    utilisation,
    *,
    lr_of,
    before_step,
    after_step,
    should_stop,
    agree,
) -> None:
    """The steps on the clock, warm-up included, until the run is done. ``last_end`` is the
    (device mark, host time) the first step's time runs from. Nothing here waits for the
    device but the one settle before the energy span opens."""
    cuda = state.device.type == "cuda"
    prev, t_prev = last_end
    pauses: list = []  # spans off the clock inside the step under way
    host_paused = 0.0  # their host seconds, from the last step's after-hook
    while True:
        state.at_step = state.step + 1
        phase = state.next_phase()
        if phase == "measured" and energy.active and not energy.started:
            state.clock.settle()  # the warm-up's work done before the span opens
            energy.start()
        if utilisation is not None:
            utilisation.active = phase == "measured"
        t_ready = time.perf_counter()
        x, y = next(batches)
        t_data = time.perf_counter()
        state.stamps.setdefault("first_batch", t_data)
        extra, before_paused = _run_hook(
            state, before_step, (state.step + 1, state.samples_seen, x, y), pauses, utilisation
        )
        loss = step_fn(x, y, NO_PHASES)
        if cuda and loss is not None:  # read once its step has ended, never waited for
            loss = _to_host(loss)
        end, t_end = state.clock.mark(), time.perf_counter()
        state.record(
            _Step(
                phase=phase,
                samples=x.shape[0],
                start=prev,
                end=end,
                pauses=pauses,
                host_s=t_end - t_prev - host_paused - before_paused,
                data_wait_s=t_data - t_ready,
                loss=loss if cuda else _loss_value(loss),
                lr=lr_of() if lr_of else None,
                extra=extra,
            )
        )
        prev, t_prev, pauses = end, t_end, []
        bar.update()
        state.poll()
        done = state.status != "ok" or state.finished()
        if agree is not None:
            done = agree(done)
        host_paused = 0.0
        if not done:
            extra, host_paused = _run_hook(
                state, after_step, (state.step, state.samples_seen, x, y), pauses, utilisation
            )
            state.steps[-1].extra.update(extra)
        if not done and should_stop is not None and should_stop():
            done = state.stopped_early = True
        if done:
            break


def _close_span(state: LoopState, energy: energy_meter.EnergyMeter, utilisation) -> None:
    """After the last measured step: close the energy span (the device settled first, so the
    step's work is in it) and stop sampling utilisation."""
    if energy.started:
        state.clock.settle()  # the last measured step done before the span closes
        energy.stop()
    if utilisation is not None:
        utilisation.active = False


def _wants_diagnostics(state: LoopState) -> bool:
    """Diagnostic steps follow a throughput run that ended well, in its point's first round
    (a point needs its breakdown once, not once per round): a run towards a target keeps its
    model as trained, and neither a trial of the largest-batch search nor the compute-only
    ceiling (whose input is ready on the device) needs a breakdown."""
    spec = state.spec
    return (
        spec.measure.diagnostic_steps > 0
        and state.status == "ok"
        and not state.stopped_early
        and spec.throughput_run
        and spec.once_per_point
        and spec.kind == "bench"
    )


def _diagnostic_steps(state: LoopState, batches: Iterator, step_fn: Callable, lr_of) -> None:
    """``diagnostic_steps`` steps with the device synchronised at each end, their phases timed
    apart (phase ``diagnostic`` in the steps CSV, in no window)."""
    device = state.device
    clock = PhaseClock(device, state.phases)
    state.clock.settle()
    prev, t_prev = state.clock.mark(), time.perf_counter()
    for _ in range(state.measure.diagnostic_steps):
        state.at_step = state.step + 1
        t_ready = time.perf_counter()
        x, y = next(batches)
        t_data = time.perf_counter()
        loss = step_fn(x, y, clock)
        measure.synchronize(device)
        end, t_end = state.clock.mark(), time.perf_counter()
        parts = {"runner": t_ready - t_prev, "data_wait": t_data - t_ready}
        parts.update(clock.durations_s())
        for name, seconds in parts.items():
            state.sums[name] += seconds
        state.diagnostic_s.append(t_end - t_prev)
        step = _Step(
            phase="diagnostic",
            samples=x.shape[0],
            start=prev,
            end=end,
            pauses=[],
            host_s=t_end - t_prev,
            data_wait_s=t_data - t_ready,
            loss=_loss_value(loss),
            lr=lr_of() if lr_of else None,
        )
        state.record(step)
        state.poll()
        prev, t_prev = end, t_end
        if state.status != "ok":
            break
