"""The prediction's checks, beside its math (``core.prediction``): the measured tie set for time
to target that judges it, the noise scale measured in the runs (pooled B_simple), the
cross-check of B_noise against it, Pollux's efficiency, and the honesty flags of each batch
size's prediction, one phrase each.

Plain NumPy: no torch, no pandas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from batchscope.core import pooled, verdict
from batchscope.core.prediction import BOOTSTRAP_SEED, CONFIDENCE, NOISE_FROM, Prediction

#: A batch size more than this factor outside the calibrated range is flagged as extrapolated.
EXTRAPOLATION_FACTOR = 2.0


def time_tie_set(
    seconds: Mapping[int, Sequence[float]], level: float = 1 - CONFIDENCE
) -> tuple[int, ...]:
    """The batch sizes that could be fastest to the target, by the test the throughput verdict
    uses: Hsu's multiple comparisons with the best on the log of 1/seconds (targets per second),
    one run-to-run variance pooled over the batch sizes (``core.pooled``, ``core.verdict``).
    Fastest estimate first; every batch size when the runs give no spread (one per size)."""
    keys = [b for b in sorted(seconds) if len(seconds[b])]
    rates = {b: [1.0 / float(s) for s in seconds[b]] for b in keys}
    found = verdict.compare(pooled.fit(rates), level)
    if found is None:
        return tuple(keys)
    return tuple(keys[i] for i in found.tie)


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


def cross_check(prediction: Prediction, strategy: str, measured: NoiseEstimate | None) -> str:
    """One line on B_noise. Under ``noise_scale`` and ``late_noise`` it *is* the measured
    B_simple (early, or near the target), said with where it came from; under the fits it is
    compared with ``measured``, the calibration runs' B_simple near the target (their last
    third), where B_simple is meant to stand for the critical batch."""
    fit = prediction.line.b_noise
    source = NOISE_FROM.get(strategy)
    if source is not None:
        where = (
            "the short runs' B_simple early in training"
            if source == "early"
            else "the calibration runs' B_simple near the target (their last third)"
        )
        return (
            f"B_noise is {where}: {fit:.3g} {_text(prediction.b_noise_interval)} ({strategy} "
            "calibration; corner or two_point fit it from the steps instead)."
        )
    if measured is None:
        return "Cross-check: no noise scale measured near the target."
    text = (
        f"Cross-check: fitted B_noise {fit:.3g} {_text(prediction.b_noise_interval)} vs "
        f"B_simple near the target {measured.value:.3g} {_text(measured.interval)}"
    )
    agree = overlap(prediction.b_noise_interval, measured.interval)
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
        where = f"the calibrated {low}-{high}" if low != high else f"the calibration size {low}"
        out.append(f"extrapolated x{factor:.3g} beyond {where}")
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
