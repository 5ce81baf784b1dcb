"""The measured loop: steps over a DataLoader, timed, the warm-up left out.

Each step's time runs from the end of the previous step (the device synchronised) to the end of
this one, so it includes waiting for the next batch: the user pays for the input pipeline.
Within a step, the phases are timed apart: the runner's own bookkeeping, waiting for data, the
host-to-device copy, forward, backward and the optimizer step (host clocks on the CPU, CUDA
events on a GPU, so timing a phase never stalls the device). The first ``warmup_steps`` steps
are recorded but never enter the statistics; the measured steps are split into ``repeats``
consecutive windows whose throughputs give the median and the spread.

An allocator failure ends the run with ``status: oom``, a non-finite training loss with
``status: diverged``; anything else propagates and fails the job. The batch size is never changed.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.utils.data import DataLoader

from batchscope.bench import measure
from batchscope.core.spec import RunSpec

#: Phases of a step the step functions time, after waiting for data.
TRAIN_PHASES = ("h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("h2d", "forward")
#: Every column of the per-step breakdown, in step order ("runner" is our own bookkeeping).
BREAKDOWN = ("runner", "data_wait", *TRAIN_PHASES)

#: A point whose throughput windows spread more than this (IQR / median) is flagged ``noisy``,
#: the threshold torch.utils.benchmark uses.
NOISY_IQR_FRAC = 0.10


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

    Events are read only after the step's closing synchronisation, so timing the phases adds no
    stall. On the CPU every operation is synchronous and the host clock is exact.
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


def planned_steps(spec: RunSpec, steps_per_epoch: int) -> int:
    """Steps the run is planned for: epochs (train) or one pass (infer), capped by max_steps."""
    epochs = spec.train.epochs if spec.train is not None else 1
    planned = steps_per_epoch * epochs
    return planned if spec.max_steps is None else min(planned, spec.max_steps)


def window_stats(samples: list[int], seconds: list[float], repeats: int) -> dict:
    """Split the measured steps into ``repeats`` consecutive windows; median and IQR of their
    throughputs, and the ``noisy`` flag (None with one window: no spread to judge)."""
    n = min(repeats, len(samples))
    rates = [
        float(np.sum(s) / np.sum(t))
        for s, t in zip(np.array_split(samples, n), np.array_split(seconds, n), strict=True)
    ]
    p25, p50, p75 = np.percentile(rates, [25, 50, 75])
    iqr = float(p75 - p25)
    return {
        "samples_per_s": float(p50),
        "samples_per_s_iqr": iqr,
        "samples_per_s_windows": rates,
        "repeats": n,
        "noisy": bool(iqr / p50 > NOISY_IQR_FRAC) if n >= 2 else None,
    }


def _progress(total: int, desc: str):
    from tqdm import tqdm

    # Logs are files, not terminals: a line every few seconds is plenty.
    return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=5.0, ascii=True)


def _batches(loader: DataLoader, stamps: dict) -> Iterator:
    """Batches of ``loader`` epoch after epoch; notes when the first iterator is set up."""
    for epoch in itertools.count():
        started = time.perf_counter()
        batches = iter(loader)  # starts the worker processes
        if epoch == 0:
            stamps["iter_started"] = started
            stamps["workers_started"] = time.perf_counter()
        yield from batches
        del batches


class _Loop:
    """The state of one measured loop; :func:`measured_loop` runs it."""

    def __init__(self, spec: RunSpec, device: torch.device, planned: int, log: StepLog):
        self.spec, self.device, self.planned, self.log = spec, device, planned, log
        self.measure = spec.measure
        self.phases = TRAIN_PHASES if spec.mode == "train" else INFER_PHASES
        self.clock = PhaseClock(device, self.phases)
        self.status, self.error, self.last_loss = "ok", None, None
        self.step_s: list[float] = []
        self.samples: list[int] = []
        self.sums = dict.fromkeys(BREAKDOWN, 0.0)
        self.stamps: dict[str, float] = {}
        self.workers_mb = self.dry_run_mb = self.first_step_s = None
        self.stopped_early = False
        self.samples_seen = self.step = 0
        self.train_s = 0.0  # time on the clock, warm-up included, evaluations excluded

    def windows_full(self) -> bool:
        """Every window has its minimum steps and seconds."""
        m = self.measure
        return (
            self.step - m.warmup_steps >= m.repeats * m.min_steps
            and sum(self.step_s) >= m.repeats * m.min_seconds
        )

    def finished(self) -> bool:
        """The run's end: never past max_steps. Inference: one pass, and on until the windows are
        full. Training: a throughput run ends once its windows are full (or its planned steps
        are done); a run towards a target does its planned steps."""
        spec = self.spec
        if spec.max_steps is not None and self.step >= spec.max_steps:
            return True
        if spec.mode == "infer":
            return self.step >= self.planned and self.windows_full()
        if spec.throughput_run and self.step > self.measure.warmup_steps and self.windows_full():
            return True
        return self.step >= self.planned

    def record(self, x, loss, t_prev: float, t_ready: float, t_data: float, t_end: float, lr_of):
        """Book one finished step: its times, samples and loss, and its row in the log."""
        self.step += 1
        self.samples_seen += x.shape[0]
        measured = self.step > self.measure.warmup_steps
        parts = {"runner": t_ready - t_prev, "data_wait": t_data - t_ready}
        parts.update(self.clock.durations_s())
        if measured:
            self.step_s.append(t_end - t_prev)
            self.samples.append(x.shape[0])
            for name, seconds in parts.items():
                self.sums[name] += seconds
        self.train_s += t_end - t_prev
        loss_value = None if loss is None else float(loss.item())
        self.log.add(
            step=self.step,
            phase="measured" if measured else "warmup",
            samples_seen=self.samples_seen,
            elapsed_s=self.train_s,
            step_time_ms=(t_end - t_prev) * 1000.0,
            data_wait_ms=parts["data_wait"] * 1000.0,
            loss=loss_value,
            lr=lr_of() if lr_of else None,
        )
        if self.step == 1:  # the memory dry run: the peak of one whole step
            self.first_step_s = t_end - t_prev
            self.dry_run_mb = measure.peak_memory(self.device)["peak_mem_mb"]
        if loss_value is not None:
            self.last_loss = loss_value
            if not math.isfinite(loss_value):
                self.status = "diverged"

    def result(self) -> dict:
        """The timing summary and status of the finished loop."""
        step_s, sums = self.step_s, self.sums
        measured_s = float(sum(step_s))
        ok = self.status == "ok" and measured_s > 0
        stamps = self.stamps
        result = {
            "status": self.status,
            "error": self.error,
            "steps_run": self.step,
            "warmup_steps": self.measure.warmup_steps,
            "measured_steps": len(step_s),
            "measured_samples": int(sum(self.samples)),
            "measured_s": measured_s,
            "data_wait_frac": sums["data_wait"] / measured_s if measured_s > 0 else None,
            "worker_startup_s": (
                stamps["workers_started"] - stamps["iter_started"] if stamps else None
            ),
            "time_to_first_batch_s": (
                stamps["first_batch"] - stamps["iter_started"] if "first_batch" in stamps else None
            ),
            "first_step_s": self.first_step_s,
            "dry_run_peak_mem_mb": self.dry_run_mb,
            "final_loss": self.last_loss,
            "stopped_early": self.stopped_early,
            "workers_pss_mb": self.workers_mb or 0.0,
            **{
                f"time_{name}_ms": 1000.0 * sums[name] / len(step_s)
                if ok and name in ("runner", "data_wait", *self.phases)
                else None
                for name in BREAKDOWN
            },
            **measure.step_stats(step_s if ok else []),
        }
        if ok:
            result.update(window_stats(self.samples, step_s, self.measure.repeats))
            result["time_other_ms"] = 1000.0 * (measured_s - sum(sums.values())) / len(step_s)
        else:
            result.update(samples_per_s=None, samples_per_s_iqr=None, repeats=0, noisy=None)
            result.update(samples_per_s_windows=None, time_other_ms=None)
        return result


def measured_loop(
    loader: DataLoader,
    step_fn: Callable,
    spec: RunSpec,
    device: torch.device,
    log: StepLog,
    *,
    lr_of: Callable[[], float] | None = None,
    after_step: Callable[[int, int, torch.Tensor, torch.Tensor], dict | None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Run ``step_fn`` over ``loader`` and return the timing summary and status.

    ``after_step(step, samples_seen, x, y)`` runs after each step, off the clock (validation,
    noise-scale measurements); what it returns is added to that step's row. When
    ``should_stop()`` then says so, the run ends there (``stopped_early`` in the result).
    """
    planned = planned_steps(spec, len(loader))
    if planned <= spec.measure.warmup_steps:
        raise NothingToMeasure(
            f"batch_size {loader.batch_size} gives {planned} steps, not more than the "
            f"{spec.measure.warmup_steps} warm-up steps: nothing would be measured"
        )
    state = _Loop(spec, device, planned, log)
    workers = spec.num_workers > 0
    bar = _progress(planned, f"{spec.mode} bs={loader.batch_size} nw={spec.num_workers}")
    t_prev = t_ready = measure.device_clock(device)  # end of the last step, end of bookkeeping
    batches = _batches(loader, state.stamps)
    try:
        for x, y in batches:
            t_data = time.perf_counter()
            state.stamps.setdefault("first_batch", t_data)
            loss = step_fn(x, y, state.clock)
            t_end = measure.device_clock(device)
            # --- bookkeeping: on the clock (as "runner"), off the phases it reports ---
            state.record(x, loss, t_prev, t_ready, t_data, t_end, lr_of)
            bar.update()
            done = state.status != "ok" or state.finished()
            if done and workers:
                state.workers_mb = measure.workers_pss_mb()  # the workers are still alive
            t_prev = t_end
            extra = (
                after_step(state.step, state.samples_seen, x, y)
                if after_step and not done
                else None
            )
            if extra:
                log.rows[-1].update(extra)
                t_prev = measure.device_clock(device)  # what the hook took is off the clock
            if not done and should_stop is not None and should_stop():
                done = state.stopped_early = True
                if workers:
                    state.workers_mb = measure.workers_pss_mb()
            t_ready = time.perf_counter()
            if done:
                break
    except Exception as exc:  # noqa: BLE001 - only allocator failures are results
        if not measure.is_oom(exc):
            raise
        state.status, state.error = "oom", str(exc).strip().splitlines()[0][:500]
    finally:
        batches.close()  # shuts the workers down
        bar.close()
    if state.status == "oom":
        measure.release_cached_memory(device)
    return state.result()
