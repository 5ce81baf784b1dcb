"""What a finished measured loop reports: its throughput windows and their spread, the
step-time breakdown of the diagnostic steps, the first step, the status.

``timing_result`` reads the steps ``batchscope.bench.loop`` recorded and their device times
(read after the loop's one synchronisation); nothing here runs during the timed steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from batchscope.bench import measure

if TYPE_CHECKING:
    from batchscope.bench.loop import LoopState

#: Phases of a step the step functions time, after waiting for data.
TRAIN_PHASES = ("h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("h2d", "forward")
#: Every column of the per-step breakdown, in step order ("runner" is our own bookkeeping).
BREAKDOWN = ("runner", "data_wait", *TRAIN_PHASES)

#: A point whose throughput windows spread more than this, (max − min) / median, is flagged
#: ``noisy``. The range rather than the IQR: with 3 windows the IQR spans half the range and
#: misses a 1000/909/833 series (an 18% range).
NOISY_RANGE_FRAC = 0.10


def window_stats(samples: list[int], seconds: list[float], repeats: int) -> dict:
    """Split the measured steps into ``repeats`` consecutive windows; median and IQR of their
    throughputs, and the ``noisy`` flag (None with one window: no spread to judge)."""
    n = min(repeats, len(samples))
    rates = [
        float(np.sum(s) / np.sum(t))
        for s, t in zip(np.array_split(samples, n), np.array_split(seconds, n), strict=True)
    ]
    p25, p50, p75 = np.percentile(rates, [25, 50, 75])
    spread = (max(rates) - min(rates)) / p50
    return {
        "samples_per_s": float(p50),
        "samples_per_s_iqr": float(p75 - p25),
        "samples_per_s_windows": rates,
        "repeats": n,
        "noisy": bool(spread > NOISY_RANGE_FRAC) if n >= 2 else None,
    }


def timing_result(state: LoopState, seconds: list[float], last_loss: float | None) -> dict:
    """The timing summary and status of the finished loop ``state``; ``seconds`` are its steps'
    device times, ``last_loss`` the last finite loss."""
    measured = [(s, t) for s, t in zip(state.steps, seconds, strict=True)]
    measured = [(s, t) for s, t in measured if s.phase == "measured"]
    step_s = [t for _, t in measured]
    samples = [s.samples for s, _ in measured]
    measured_s = float(sum(step_s))
    ok = state.status == "ok" and measured_s > 0
    stamps = state.stamps
    first = state.steps[0] if state.steps else None
    diag = len(state.diagnostic_s)
    breakdown = ok and diag > 0
    result = {
        "status": state.status,
        "error": state.error,
        "oom_step": state.oom_step,
        "steps_run": state.step,
        "warmup_steps": state.measure.warmup_steps,
        "measured_steps": len(step_s),
        "measured_samples": int(sum(samples)),
        "measured_s": measured_s,
        "diagnostic_steps": diag,
        "data_wait_frac": (
            sum(s.data_wait_s for s, _ in measured) / measured_s if measured_s > 0 else None
        ),
        "worker_startup_s": (
            stamps["workers_started"] - stamps["iter_started"] if stamps else None
        ),
        "time_to_first_batch_s": (
            stamps["first_batch"] - stamps["iter_started"] if "first_batch" in stamps else None
        ),
        "first_step_s": seconds[0] if seconds else None,
        # the first step less its wait for data (worker start-up, the first batch)
        "first_step_compute_s": seconds[0] - first.data_wait_s if seconds else None,
        "dry_run_peak_mem_mb": state.dry_run_mb,
        "final_loss": last_loss,
        "stopped_early": state.stopped_early,
        **{
            f"time_{name}_ms": 1000.0 * state.sums[name] / diag
            if breakdown and name in ("runner", "data_wait", *state.phases)
            else None
            for name in BREAKDOWN
        },
        "time_other_ms": (
            1000.0 * (sum(state.diagnostic_s) - sum(state.sums.values())) / diag
            if breakdown
            else None
        ),
        **measure.step_stats(step_s if ok else []),
        **host_phases(state),
    }
    if ok:
        result.update(window_stats(samples, step_s, state.measure.repeats))
    else:
        result.update(samples_per_s=None, samples_per_s_iqr=None, repeats=0, noisy=None)
        result.update(samples_per_s_windows=None)
    return result


def host_phases(state: LoopState) -> dict[str, float | None]:
    """The loop's share of ``batchscope.bench.jobtime.PHASES``, on the host clock: its set-up,
    the workers' start (the first loader iterator to its first batch, carved out of the first
    warm-up step; null without a warm-up, where it is in the first measured step), the
    warm-up, the measured steps, the pauses with the steps left out after them, and the
    diagnostic steps."""
    host, stamps = state.host_s, state.stamps
    workers = None
    if state.steps and state.steps[0].phase == "warmup" and "first_batch" in stamps:
        workers = stamps["first_batch"] - stamps["iter_started"]
    return {
        "phase_prepare_s": state.prepare_s,
        "phase_workers_s": workers,
        "phase_warmup_s": host["warmup"] - (workers or 0.0),
        "phase_measured_s": host["measured"],
        "phase_paused_s": host["after_pause"] + state.paused_s,
        "phase_diagnostic_s": host["diagnostic"],
    }
