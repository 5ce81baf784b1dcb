"""Goodput prediction from short runs: steps and seconds to the target at every batch size, from
a full-length run at one batch size (or two).

McCandlish et al. 2018 model the steps to a target as S(B) = S_min (1 + B_noise/B), that is
S = S_min + E_min/B with E_min = S_min·B_noise: a straight line in 1/B with two unknowns. Every
batch size gets short runs, the calibration ones too, which measure its throughput
(samples_per_s), and under ``noise_scale`` the gradient noise scale B_simple early in training.
``train.predict_calibration`` says how the two unknowns are pinned (``calibration_sizes``) and
with which shape (``SHAPES``):

- ``late_noise`` (the default): ONE batch size, the one nearest the third quartile of the grid's
  log range, runs to the target, and B_noise is the B_simple its runs measure in their last
  third (near the target, where the noise scale stands for the critical batch; it grows during
  training, so an early reading is too small). The curve is the corner through that point:
  S_min = S(B_c)/max(1, B_noise/B_c). The upper size sits near or beyond the corner, where its
  steps are S_min itself, and B_simple's estimator (|G|² as the difference of two batch sizes'
  squared gradient norms) is least noisy at larger batches.
- ``noise_scale``: B_noise is the short runs' pooled B_simple early in training (Pollux's
  estimate of it), so ONE full-length run size pins S_min = S(B_c)/(1 + B_noise/B_c). B_c is
  the grid's geometric middle (the size nearest √(smallest·largest)), which halves the
  extrapolation on either side in log terms.
- ``corner``: full-length runs at the two sizes nearest the quartiles of the grid's log range
  fit S(B) = S_min max(1, B_noise/B), the sharp limit of the same trade-off: perfect scaling up
  to the critical batch B_noise, no gain beyond. With the learning rate scaled linearly with the
  batch, the steps on ``config/convergence.yaml`` follow that corner (the samples to the target
  about equal from 16 to 128, then the steps flat), which the smooth curve through any two
  sizes misses where it bends.
- ``two_point``: full-length runs at the smallest and the largest size fit the line by least
  squares, the widest lever arm on the slope, so every other size is an interpolation. It does
  not trust B_simple, at the price of two full-length sizes, one of them the slowest to reach
  the target.

Then, per batch size B (the effective batch: micro-batch × accumulation, the samples per update),
the time to the target is two factors, each from its own evidence:

    steps(B)    = S_min (1 + B_noise/B)            the convergence fit, over seeds
                  (or S_min max(1, B_noise/B))
    update_s(B) = B / samples_per_s(B)              the short runs, pooled
    seconds(B)  = steps(B) · update_s(B)

The steps' interval is a bootstrap: each calibration size's seeds and (one calibration size) the
noise measurements, summed per run, are resampled with replacement and the curve refit. The
time per update comes from the pooled model of log throughput that the throughput verdict
uses (``core.pooled``: one run-to-run variance over the batch sizes' runs, a noisy batch size
on its own), so the machine's noise is stated once: samples_per_s(B) is exp of its estimate
(the geometric mean of its runs), and each resample draws the batch sizes' log throughputs
from that model's posterior (Student t: a shared variance from its chi-square, a normal per
batch size). Seconds multiply the two factors' draws, so their interval carries both.

What judges and qualifies the prediction (the measured tie set for time to target, the pooled
B_simple, the cross-check of B_noise, Pollux's efficiency, the flags) is in
``core.prediction_checks``.

Plain NumPy: no torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from batchscope.core import pooled

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

#: train.predict_calibration's values (the schema holds the default).
STRATEGIES = ("noise_scale", "two_point", "corner", "late_noise")
#: The shape of S(B) each strategy fits (``Line.shape``).
SHAPES = {
    "noise_scale": "hyperbola",
    "two_point": "hyperbola",
    "corner": "corner",
    "late_noise": "corner",
}
#: The strategies that pin the curve on one batch size with B_noise from measured noise, and
#: which measurements: ``early``, every run's first predict_steps updates (the short runs');
#: ``late``, the calibration runs' last third before the target.
NOISE_FROM = {"noise_scale": "early", "late_noise": "late"}


def short_runs_measure_noise(strategy: str) -> bool:
    """Whether the short runs must train their predict_steps updates with the noise scale
    measured (B_noise comes from them); otherwise they measure the throughput only."""
    return NOISE_FROM.get(strategy) == "early"


class PredictionError(ValueError):
    """A prediction that cannot be made; the message is one line saying why."""


def calibration_sizes(batch_sizes: Sequence[int], strategy: str) -> tuple[int, ...]:
    """The batch sizes that get full-length runs under ``strategy``: ``corner``, the two nearest
    the log range's quartiles (``_quartile_sizes``); ``two_point``, the smallest and the
    largest; ``late_noise``, the one nearest the third quartile of the log range (128 on
    16-256); ``noise_scale``, the one nearest the geometric middle √(smallest·largest) (in log
    distance; on a tie the larger, which needs fewer updates). A grid of one size calibrates on
    it."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown calibration strategy {strategy!r}")
    sizes = sorted({int(b) for b in batch_sizes})
    if len(sizes) <= 1:
        return tuple(sizes)
    if strategy == "two_point":
        return (sizes[0], sizes[-1])
    if strategy == "corner":
        return _quartile_sizes(sizes)
    if strategy == "late_noise":
        return (_nearest_log_quantile(sizes, 0.75),)
    middle = math.sqrt(sizes[0] * sizes[-1])
    return (min(sizes, key=lambda b: (abs(math.log(b / middle)), -b)),)


def _nearest_log_quantile(sizes: list[int], q: float) -> int:
    """The size nearest the ``q`` quantile of the grid's log range, ties towards the middle."""
    lo, hi = math.log(sizes[0]), math.log(sizes[-1])
    mid, target = (lo + hi) / 2, lo + q * (hi - lo)
    return min(sizes, key=lambda b: (abs(math.log(b) - target), abs(math.log(b) - mid)))


def _quartile_sizes(sizes: list[int]) -> tuple[int, ...]:
    """``corner``'s two sizes: those nearest the first and third quartiles of the grid's log
    range (on 16-256: 32 and 128), ties towards the middle; the smallest and the largest when
    those coincide (a grid of two or three sizes)."""
    low, high = _nearest_log_quantile(sizes, 0.25), _nearest_log_quantile(sizes, 0.75)
    return (low, high) if low != high else (sizes[0], sizes[-1])


@dataclass(frozen=True)
class Line:
    """Steps to the target against the batch, fitted to (batch size, steps). ``hyperbola``:
    S(B) = S_min (1 + B_noise/B) (McCandlish et al.); ``corner``: S(B) = S_min max(1, B_noise/B),
    perfect scaling (E_min = S_min·B_noise samples whatever the batch) up to B_noise, no gain
    beyond: the sharp limit of the same trade-off, which a learning rate scaled linearly with
    the batch tends to give (Goyal et al. 2017: the rule holds up to a batch, then breaks)."""

    s_min: float
    b_noise: float
    shape: str = "hyperbola"

    def steps(self, batch: np.ndarray | float) -> np.ndarray | float:
        ratio = self.b_noise / np.asarray(batch, dtype=float)
        if self.shape == "corner":
            return self.s_min * np.maximum(1.0, ratio)
        return self.s_min * (1.0 + ratio)


def _fit_points(
    batch_sizes: Sequence[float], steps: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """The points of a fit as arrays; PredictionError unless there are two batch sizes or more,
    all positive, with positive finite steps."""
    batch = np.asarray(batch_sizes, dtype=float)
    s = np.asarray(steps, dtype=float)
    if len(np.unique(batch)) < 2:
        raise PredictionError("the fit needs steps to the target at two batch sizes or more")
    if not (np.all(batch > 0) and np.all(np.isfinite(s)) and np.all(s > 0)):
        raise PredictionError("the fit needs positive, finite batch sizes and steps")
    return batch, s


def fit_line(batch_sizes: Sequence[float], steps: Sequence[float]) -> Line:
    """Least squares of S = S_min + E_min/B over the points (exact through two); B_noise =
    E_min/S_min. Raises ``PredictionError`` when the points admit no such curve."""
    batch, s = _fit_points(batch_sizes, steps)
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


def fit_corner(batch_sizes: Sequence[float], steps: Sequence[float]) -> Line:
    """The corner S_min max(1, B_noise/B) through the smallest and the largest size: E_min =
    S(B_lo)·B_lo (the smaller size in perfect scaling), S_min = S(B_hi), or E_min/B_hi when
    the larger size still scaled perfectly (no corner seen: steps beyond it are extrapolated
    as perfect scaling, and flagged as extrapolated from 2× on). Raises ``PredictionError``
    as ``fit_line``."""
    batch, s = _fit_points(batch_sizes, steps)
    lo, hi = int(np.argmin(batch)), int(np.argmax(batch))
    if s[hi] > s[lo]:
        raise PredictionError(
            "the larger batch needed more steps to the target than the smaller one: no curve "
            "S_min max(1, B_noise/B) fits"
        )
    e_min = float(s[lo] * batch[lo])
    s_min = max(float(s[hi]), e_min / float(batch[hi]))
    return Line(s_min=s_min, b_noise=e_min / s_min, shape="corner")


def pin_line(batch: float, steps: float, b_noise: float, shape: str = "hyperbola") -> Line:
    """The curve of ``shape`` with a known B_noise through one point: S_min = S(B_c)/(1 +
    B_noise/B_c), or S(B_c)/max(1, B_noise/B_c) for the corner."""
    if not (batch > 0 and math.isfinite(steps) and steps > 0):
        raise PredictionError("the calibration needs positive, finite steps to the target")
    if not (math.isfinite(b_noise) and b_noise >= 0):
        raise PredictionError(f"the measured B_simple ({b_noise:.3g}) is not a noise scale")
    line = Line(s_min=1.0, b_noise=float(b_noise), shape=shape)
    return replace(line, s_min=steps / float(line.steps(batch)))


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
    update_s: float
    update_s_interval: tuple[float, float] | None
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
    #: The pooled run-to-run sd of log throughput behind the time per update, and its df.
    update_sd_log: float | None = None
    update_df: int = 0

    def at(self, batch: int) -> BatchPrediction:
        return next(p for p in self.batches if p.batch == batch)


@dataclass(frozen=True)
class _Calibrated:
    """The curve and its bootstrap resamples (NaN where a resample admitted no curve)."""

    line: Line
    s_min: np.ndarray
    b_noise: np.ndarray
    resampled: bool
    failed: int


def _resampled_means(values: Sequence[np.ndarray], resamples: int, rng) -> np.ndarray:
    """(resamples × len(values)): each column the means of one sample resampled with
    replacement."""
    return np.column_stack(
        [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in values]
    )


def _calibrate(
    cal: list[int],
    cal_values: list[np.ndarray],
    noise: tuple[Sequence[float], Sequence[float]] | None,
    resamples: int,
    rng,
    shape: str = "hyperbola",
) -> _Calibrated:
    """The fit of ``shape`` (two calibration sizes or more) or the noise-scale pin (one)."""
    boot_s_min, boot_b_noise = np.full(resamples, np.nan), np.full(resamples, np.nan)
    fit_curve = fit_corner if shape == "corner" else fit_line
    if len(cal) >= 2:
        line = fit_curve(cal, [v.mean() for v in cal_values])
        resampled = any(len(v) > 1 for v in cal_values)
        means = _resampled_means(cal_values, resamples, rng) if resampled else []

        def fit(r: int) -> Line:
            return fit_curve(cal, means[r])

    else:
        g2, trace = _noise_arrays(noise)
        b_noise = float(trace.sum() / g2.sum())
        line = pin_line(cal[0], float(cal_values[0].mean()), b_noise, shape)
        resampled = len(cal_values[0]) > 1 or len(g2) > 1
        steps = _resampled_means(cal_values, resamples, rng)[:, 0]
        idx = rng.integers(0, len(g2), size=(resamples, len(g2)))
        g_sum, t_sum = g2[idx].sum(axis=1), trace[idx].sum(axis=1)
        b_simple = np.where(g_sum > 0, t_sum / np.where(g_sum > 0, g_sum, 1.0), np.nan)

        def fit(r: int) -> Line:
            return pin_line(cal[0], steps[r], b_simple[r], shape)

    failed = 0
    for r in range(resamples if resampled else 0):
        try:
            fitted = fit(r)
        except PredictionError:
            failed += 1
            continue
        boot_s_min[r], boot_b_noise[r] = fitted.s_min, fitted.b_noise
    return _Calibrated(line, boot_s_min, boot_b_noise, resampled, failed)


def _noise_arrays(
    noise: tuple[Sequence[float], Sequence[float]] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The finite (|G|², tr Σ) measurements; PredictionError when they give no B_simple."""
    if noise is None:
        raise PredictionError(
            "one calibration batch size needs a measured noise scale, and none was given"
        )
    g2, trace = (np.asarray(a, dtype=float) for a in noise)
    keep = np.isfinite(g2) & np.isfinite(trace)
    g2, trace = g2[keep], trace[keep]
    if len(g2) == 0 or g2.sum() <= 0:
        raise PredictionError(
            "the runs measured no usable noise scale (none, or noise swamps |G|^2): "
            "set train.noise_scale_every_steps, or train.predict_calibration: corner"
        )
    return g2, trace


def _best(
    batches: list[int], seconds: np.ndarray, boot_seconds: np.ndarray, resampled: bool
) -> tuple[int, tuple[int, ...]]:
    """The batch with the fewest predicted seconds, and those best in ≥ 2.5% of resamples."""
    best = int(batches[int(np.argmin(seconds))])
    ok = np.all(np.isfinite(boot_seconds), axis=1)
    if not (resampled and ok.any()):
        return best, (best,)
    winners = np.asarray(batches)[np.argmin(boot_seconds[ok], axis=1)]
    share = {int(b): float(np.mean(winners == b)) for b in batches}
    return best, tuple(b for b in batches if share[b] >= (1 - CONFIDENCE) / 2 or b == best)


@dataclass(frozen=True)
class UpdateTimes:
    """The throughput factor: each batch size's log samples_per_s (the pooled model's estimate)
    and ``draws`` (resamples × batch sizes) from its posterior; None when the runs give no
    run-to-run spread (one run per batch size)."""

    log_speed: np.ndarray
    draws: np.ndarray | None
    sd_log: float | None
    df: int


def update_times(
    speeds: Sequence[np.ndarray], resamples: int, rng: np.random.Generator
) -> UpdateTimes:
    """The pooled model of the batch sizes' throughputs (``core.pooled.fit``) and draws of their
    log throughputs: estimate + se·z·√(df/χ²_df), the chi-square shared by the pooled batch
    sizes (one variance), its own for a noisy one."""
    fitted = pooled.fit(dict(enumerate(speeds)))
    estimate = np.asarray(fitted.estimate, dtype=float)
    if fitted.df < 1:
        return UpdateTimes(estimate, None, fitted.sd_log, fitted.df)
    se = np.sqrt(np.diag(fitted.cov))
    df = np.asarray(fitted.var_df, dtype=float)
    shared = np.sqrt(fitted.df / rng.chisquare(fitted.df, size=resamples))
    scale = np.column_stack(
        [
            shared if df[k] == fitted.df else np.sqrt(df[k] / rng.chisquare(df[k], resamples))
            for k in range(len(speeds))
        ]
    )
    z = rng.standard_normal((resamples, len(speeds)))
    return UpdateTimes(estimate, estimate + se * z * scale, fitted.sd_log, fitted.df)


def predict(
    calibration_steps: Mapping[int, Sequence[float]],
    speeds: Mapping[int, Sequence[float]],
    *,
    noise: tuple[Sequence[float], Sequence[float]] | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    shape: str = "hyperbola",
) -> Prediction:
    """Steps and seconds to the target at every batch size of ``speeds``.

    ``calibration_steps`` maps each calibration (effective) batch size to its seeds' steps to the
    target (every seed must have reached it): two sizes or more, the fit of ``shape`` (``Line``);
    one, the
    noise-scale pin, with ``noise`` the short runs' unbiased (|G|², tr Σ) measurements or their
    sums per run (the ratio of sums is B_noise; the bootstrap resamples these entries, so per-run
    sums resample runs). ``speeds`` maps every batch size to its runs' samples_per_s (each a
    process). Raises ``PredictionError`` (one line) when no prediction can be made.
    """
    cal = sorted(calibration_steps)
    cal_values = [np.asarray(calibration_steps[b], dtype=float) for b in cal]
    if not cal or any(len(v) == 0 for v in cal_values):
        raise PredictionError("a calibration batch size has no run that reached the target")
    batches = sorted(speeds)
    speed_values = [np.asarray(speeds[b], dtype=float) for b in batches]
    for b, v in zip(batches, speed_values, strict=True):
        if len(v) == 0 or not np.all(np.isfinite(v) & (v > 0)):
            raise PredictionError(f"batch size {b}: no measured samples_per_s")
    rng = np.random.default_rng(seed)
    fitted = _calibrate(cal, cal_values, noise, resamples, rng, shape)
    times = update_times(speed_values, resamples, rng)
    b_arr = np.asarray(batches, dtype=float)
    steps = np.asarray(fitted.line.steps(b_arr))
    update_s = b_arr * np.exp(-times.log_speed)
    seconds = steps * update_s
    if fitted.resampled:
        curves = Line(fitted.s_min[:, None], fitted.b_noise[:, None], fitted.line.shape)
        boot_steps = np.asarray(curves.steps(b_arr[None, :]))
    else:
        boot_steps = np.broadcast_to(steps, (resamples, len(batches)))
    boot_update = b_arr * np.exp(-times.draws) if times.draws is not None else None
    boot_seconds = boot_steps * (boot_update if boot_update is not None else update_s)
    either = fitted.resampled or boot_update is not None
    per_batch = tuple(
        BatchPrediction(
            batch=int(b),
            steps=float(steps[k]),
            steps_interval=_interval(boot_steps[:, k]) if fitted.resampled else None,
            samples_per_s=float(math.exp(times.log_speed[k])),
            update_s=float(update_s[k]),
            update_s_interval=_interval(boot_update[:, k]) if boot_update is not None else None,
            seconds=float(seconds[k]),
            seconds_interval=_interval(boot_seconds[:, k]) if either else None,
        )
        for k, b in enumerate(batches)
    )
    best, best_set = _best(batches, seconds, boot_seconds, either)
    notes = [] if fitted.resampled else ["one seed per calibration batch size: no steps interval"]
    if boot_update is None:
        notes.append("one run per batch size: no interval on the time per update")
    if fitted.failed:
        notes.append(f"{fitted.failed} of {resamples} bootstrap resamples admitted no curve")
    ok = fitted.resampled
    return Prediction(
        line=fitted.line,
        s_min_interval=_interval(fitted.s_min) if ok else None,
        b_noise_interval=_interval(fitted.b_noise) if ok else None,
        calibration=tuple(int(b) for b in cal),
        batches=per_batch,
        best=best,
        best_set=best_set,
        resamples=resamples if either else 0,
        failed_resamples=fitted.failed,
        notes=tuple(notes),
        update_sd_log=times.sd_log,
        update_df=times.df,
    )
