"""Goodput prediction from short runs: steps and seconds to a target at every batch size, from
full-length runs at only two of them.

McCandlish et al. 2018 model the steps to a target as S(B) = S_min (1 + B_noise/B), that is
S = S_min + E_min/B with E_min = S_min·B_noise: a straight line in 1/B. Two unknowns, so
full-length runs to the target at two batch sizes pin it; ``calibration_sizes`` picks the
smallest and the largest of the grid, the widest lever arm on the slope E_min, so that every
other batch size of the grid is an interpolation. Every batch size gets a short run, which
measures its throughput (samples_per_s) and the gradient noise scale B_simple early in training.
Then, per batch size B (the effective batch: micro-batch × accumulation, the samples per update),

    steps(B)   = S_min (1 + B_noise/B)
    seconds(B) = steps(B) · B / samples_per_s(B)

with 95% intervals from a bootstrap over seeds (each calibration size's steps and each batch
size's throughput resampled with replacement, the line refitted).

The cross-check is Pollux's statistical efficiency (Qiao et al. 2021) relative to a base batch
B0, E(B) = (B_noise + B0)/(B_noise + B), with B_noise read from the short runs' B_simple instead
of the fit: it says samples(B) = samples(B0)/E(B), hence the same curve through the measured
steps at B0. The two estimates of B_noise should agree; ``cross_check`` says so in one line.

Plain NumPy: no torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

#: A batch size more than this factor outside the calibrated range is flagged as extrapolated.
EXTRAPOLATION_FACTOR = 2.0


class PredictionError(ValueError):
    """A prediction that cannot be made; the message is one line saying why."""


def calibration_sizes(batch_sizes: Sequence[int]) -> tuple[int, ...]:
    """The batch sizes that get full-length runs: the smallest and the largest (all of them when
    there are fewer than two distinct sizes)."""
    sizes = sorted({int(b) for b in batch_sizes})
    return tuple(sizes) if len(sizes) <= 2 else (sizes[0], sizes[-1])


@dataclass(frozen=True)
class Line:
    """S(B) = S_min (1 + B_noise/B), fitted to (batch size, steps)."""

    s_min: float
    b_noise: float

    def steps(self, batch: np.ndarray | float) -> np.ndarray | float:
        return self.s_min * (1.0 + self.b_noise / np.asarray(batch, dtype=float))


def fit_line(batch_sizes: Sequence[float], steps: Sequence[float]) -> Line:
    """Least squares of S = S_min + E_min/B over the points (exact through two); B_noise =
    E_min/S_min. Raises ``PredictionError`` when the points admit no such curve."""
    batch = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    if len(np.unique(batch)) < 2:
        raise PredictionError("the fit needs steps to the target at two batch sizes or more")
    if not (np.all(batch > 0) and np.all(np.isfinite(s)) and np.all(s > 0)):
        raise PredictionError("the fit needs positive, finite batch sizes and steps")
    x = 1.0 / batch
    slope, intercept = np.polyfit(x, s, 1)
    if slope < 0:
        raise PredictionError(
            "the larger batch needed more steps to the target than the smaller one: no curve "
            "S_min (1 + B_noise/B) with B_noise >= 0 fits"
        )
    if intercept <= 0:
        raise PredictionError(
            "the steps fell faster than 1/B between the calibration batch sizes: S_min would be "
            "<= 0"
        )
    return Line(s_min=float(intercept), b_noise=float(slope / intercept))


def _interval(values: np.ndarray) -> tuple[float, float] | None:
    values = values[np.isfinite(values)]
    if len(values) < 2:
        return None
    tail = (1 - CONFIDENCE) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


@dataclass(frozen=True)
class BatchPrediction:
    """One batch size's prediction; intervals None when nothing could be resampled."""

    batch: int
    steps: float
    steps_interval: tuple[float, float] | None
    samples_per_s: float
    seconds: float
    seconds_interval: tuple[float, float] | None


@dataclass(frozen=True)
class Prediction:
    """The fitted line, its bootstrap intervals and every batch size's prediction.

    ``best`` is the batch size with the fewest predicted seconds, ``best_set`` the batch sizes
    that were best in at least (1 − CONFIDENCE)/2 of the bootstrap's resamples, and
    ``failed_resamples`` how many resamples admitted no curve (left out of the intervals)."""

    line: Line
    s_min_interval: tuple[float, float] | None
    b_noise_interval: tuple[float, float] | None
    calibration: tuple[int, ...]
    batches: tuple[BatchPrediction, ...]
    best: int
    best_set: tuple[int, ...]
    resamples: int
    failed_resamples: int
    notes: tuple[str, ...] = field(default=())

    def at(self, batch: int) -> BatchPrediction:
        return next(p for p in self.batches if p.batch == batch)


def predict(
    calibration_steps: Mapping[int, Sequence[float]],
    speeds: Mapping[int, Sequence[float]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Prediction:
    """Steps and seconds to the target at every batch size of ``speeds``.

    ``calibration_steps`` maps each calibration (effective) batch size to its seeds' steps to the
    target (every seed must have reached it); ``speeds`` maps every batch size to its seeds'
    samples_per_s. Raises ``PredictionError`` (one line) when no prediction can be made.
    """
    cal = sorted(calibration_steps)
    cal_values = [np.asarray(calibration_steps[b], dtype=float) for b in cal]
    if any(len(v) == 0 for v in cal_values):
        raise PredictionError("a calibration batch size has no run that reached the target")
    line = fit_line(cal, [v.mean() for v in cal_values])
    batches = sorted(speeds)
    speed_values = [np.asarray(speeds[b], dtype=float) for b in batches]
    for b, v in zip(batches, speed_values, strict=True):
        if len(v) == 0 or not np.all(np.isfinite(v) & (v > 0)):
            raise PredictionError(f"batch size {b}: no measured samples_per_s")
    b_arr = np.asarray(batches, dtype=float)
    mean_speed = np.array([v.mean() for v in speed_values])
    steps = np.asarray(line.steps(b_arr))
    seconds = steps * b_arr / mean_speed

    rng = np.random.default_rng(seed)
    can_resample = any(len(v) > 1 for v in cal_values)
    boot_steps = np.full((resamples, len(batches)), np.nan)
    boot_speed = np.column_stack(
        [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in speed_values]
    )
    boot_s_min = np.full(resamples, np.nan)
    boot_b_noise = np.full(resamples, np.nan)
    failed = 0
    if can_resample:
        cal_means = np.column_stack(
            [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in cal_values]
        )
        for r in range(resamples):
            try:
                fitted = fit_line(cal, cal_means[r])
            except PredictionError:
                failed += 1
                continue
            boot_s_min[r], boot_b_noise[r] = fitted.s_min, fitted.b_noise
            boot_steps[r] = fitted.steps(b_arr)
    boot_seconds = boot_steps * b_arr / boot_speed
    per_batch = tuple(
        BatchPrediction(
            batch=int(b),
            steps=float(steps[k]),
            steps_interval=_interval(boot_steps[:, k]) if can_resample else None,
            samples_per_s=float(mean_speed[k]),
            seconds=float(seconds[k]),
            seconds_interval=_interval(boot_seconds[:, k]) if can_resample else None,
        )
        for k, b in enumerate(batches)
    )
    best = int(batches[int(np.argmin(seconds))])
    best_set: tuple[int, ...] = (best,)
    ok = np.all(np.isfinite(boot_seconds), axis=1)
    if can_resample and ok.any():
        winners = np.asarray(batches)[np.argmin(boot_seconds[ok], axis=1)]
        share = {int(b): float(np.mean(winners == b)) for b in batches}
        best_set = tuple(b for b in batches if share[b] >= (1 - CONFIDENCE) / 2 or b == best)
    notes = []
    if not can_resample:
        notes.append("one seed per calibration batch size: no intervals")
    if failed:
        notes.append(f"{failed} of {resamples} bootstrap resamples admitted no curve")
    return Prediction(
        line=line,
        s_min_interval=_interval(boot_s_min) if can_resample else None,
        b_noise_interval=_interval(boot_b_noise) if can_resample else None,
        calibration=tuple(int(b) for b in cal),
        batches=per_batch,
        best=best,
        best_set=best_set,
        resamples=resamples if can_resample else 0,
        failed_resamples=failed,
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------------------------
# The noise scale: Pollux's efficiency as the cross-check, and drift
# --------------------------------------------------------------------------------------------


def pollux_efficiency(batch: float, b_noise: float, base_batch: float) -> float:
    """Pollux's statistical efficiency of ``batch`` relative to ``base_batch``:
    (B_noise + B0)/(B_noise + B), the samples to the target at B0 over those at B."""
    return (b_noise + base_batch) / (b_noise + batch)


def pollux_steps(batch: float, b_noise: float, base_batch: float, base_steps: float) -> float:
    """Steps to the target at ``batch`` from the measured steps at ``base_batch`` and the
    efficiency: samples(B) = samples(B0)/E(B), steps = samples/B."""
    return base_steps * base_batch / (batch * pollux_efficiency(batch, b_noise, base_batch))


@dataclass(frozen=True)
class NoiseEstimate:
    """B_simple = Σ tr Σ / Σ |G|² over measurements, its bootstrap 95% interval and count."""

    value: float
    interval: tuple[float, float] | None
    n: int


def pooled_noise_scale(
    g2: Sequence[float], trace: Sequence[float], *, seed: int = BOOTSTRAP_SEED
) -> NoiseEstimate | None:
    """B_simple of pooled unbiased (|G|², tr Σ) measurements (the ratio of sums, McCandlish et
    al. appendix A.1), with a percentile bootstrap over measurements; None when there are none
    or Σ |G|² ≤ 0 (noise swamps the signal)."""
    g = np.asarray(g2, dtype=float)
    t = np.asarray(trace, dtype=float)
    keep = np.isfinite(g) & np.isfinite(t)
    g, t = g[keep], t[keep]
    if len(g) == 0 or g.sum() <= 0:
        return None
    interval = None
    if len(g) >= 2:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(g), size=(1000, len(g)))
        gs, ts = g[idx].sum(axis=1), t[idx].sum(axis=1)
        ratios = np.where(gs > 0, ts / np.where(gs > 0, gs, 1.0), np.inf)
        tail = (1 - CONFIDENCE) / 2
        interval = (float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail)))
    return NoiseEstimate(value=float(t.sum() / g.sum()), interval=interval, n=len(g))


def overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool | None:
    """Whether two intervals overlap (None when either is missing)."""
    if a is None or b is None:
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def cross_check(prediction: Prediction, early: NoiseEstimate | None) -> str:
    """One line: does the fit's B_noise agree with the short runs' B_simple?"""
    fit = prediction.line.b_noise
    if early is None:
        return "Cross-check: no noise scale measured in the short runs."
    text = (
        f"Cross-check: fitted B_noise {fit:.3g} {_text(prediction.b_noise_interval)} vs "
        f"B_simple from the short runs {early.value:.3g} {_text(early.interval)}"
    )
    agree = overlap(prediction.b_noise_interval, early.interval)
    if agree is False:
        return text + ": they disagree (intervals do not overlap); trust neither blindly."
    if agree is None:
        return text + " (no interval to compare)."
    return text + ": consistent."


def _text(interval: tuple[float, float] | None) -> str:
    return "(no interval)" if interval is None else f"(95% {interval[0]:.3g}-{interval[1]:.3g})"


def extrapolation_factor(batch: float, calibration: Sequence[float]) -> float:
    """How far ``batch`` lies outside the calibrated range: 1 inside, else the ratio to the
    nearer end."""
    low, high = min(calibration), max(calibration)
    return max(1.0, low / batch, batch / high)


def flags(
    batch: float,
    calibration: Sequence[float],
    *,
    schedule: str | None,
    batchnorm: bool | None,
    drift: str | None,
) -> list[str]:
    """The honesty flags of one batch size's prediction, one short phrase each."""
    out = []
    factor = extrapolation_factor(batch, calibration)
    if factor > EXTRAPOLATION_FACTOR:
        low, high = min(calibration), max(calibration)
        out.append(f"extrapolated x{factor:.3g} beyond the calibrated {low}-{high}")
    if schedule:
        out.append(f"schedule changes with the batch ({schedule})")
    if batchnorm:
        out.append("BatchNorm: noise scale measured with batch statistics")
    if drift:
        out.append(drift)
    return out


def drift_flag(early: NoiseEstimate | None, late: NoiseEstimate | None) -> str | None:
    """A phrase when B_simple early and late in training disagree (intervals apart)."""
    if early is None or late is None or overlap(early.interval, late.interval) is not False:
        return None
    return f"noise scale drifts: B_simple {early.value:.3g} early, {late.value:.3g} late"


def finite_or_none(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)
