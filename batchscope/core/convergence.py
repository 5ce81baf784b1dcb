"""Steps, samples and seconds to a target, and the gradient noise scale estimators.

Pure logic on plain numbers and row dicts (the rows a benchmark run writes to its steps CSV).

- McCandlish et al. 2018, "An Empirical Model of Large-Batch Training": the gradient noise scale
  B_simple = tr(Σ)/|G|², its unbiased two-batch-size estimators (appendix A.1) and the
  steps/samples trade-off S = S_min (1 + B_noise/B), E = E_min (1 + B/B_noise).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from batchscope.core.stats import mean_ci

# --------------------------------------------------------------------------------------------
# 3. Steps, samples and seconds to a target
# --------------------------------------------------------------------------------------------


QUANTITIES = ("steps", "samples", "seconds")


@dataclass(frozen=True)
class TargetResult:
    """When a run first reached its target, or that it did not (``reached`` False).

    ``steps``/``samples``/``seconds`` are the curve's ``step``/``samples_seen``/``elapsed_s`` at
    the first evaluation that met the target, None when not reached. ``budget_*`` are the same
    keys at the curve's last row: what the run spent in all, a lower bound on its time to the
    target when it was not reached. ``best`` is the best metric value seen (None: never measured).
    """

    reached: bool
    metric: str
    target: float
    steps: int | None
    samples: int | None
    seconds: float | None
    budget_steps: int
    budget_samples: int
    budget_seconds: float
    best: float | None

    def value(self, quantity: str) -> float | None:
        """``steps``, ``samples`` or ``seconds`` to the target (None when not reached)."""
        return getattr(self, _check_quantity(quantity))

    def budget(self, quantity: str) -> float:
        """What the run spent of ``quantity`` in all (its last row)."""
        return getattr(self, f"budget_{_check_quantity(quantity)}")


def _check_quantity(quantity: str) -> str:
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; expected one of {', '.join(QUANTITIES)}")
    return quantity


def _measured(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def steps_to_target(
    curve: Iterable[Mapping],
    *,
    target_accuracy: float | None = None,
    target_loss: float | None = None,
    metric: str | None = None,
) -> TargetResult:
    """First row of ``curve`` whose ``metric`` meets the target.

    Give exactly one target: ``target_accuracy`` is met by metric ≥ target (metric defaults to
    ``val_accuracy``), ``target_loss`` by metric ≤ target (defaults to ``val_loss``). Rows carry
    ``step``, ``samples_seen`` and ``elapsed_s``; rows without the metric (None or NaN: steps
    between evaluations) are skipped. Rows are taken in order of ``step``.
    """
    if (target_accuracy is None) == (target_loss is None):
        raise ValueError("give exactly one of target_accuracy and target_loss")
    higher_is_better = target_accuracy is not None
    target = target_accuracy if higher_is_better else target_loss
    metric = metric or ("val_accuracy" if higher_is_better else "val_loss")
    rows = sorted(curve, key=lambda row: row["step"])
    if not rows:
        raise ValueError("steps_to_target needs a curve with at least one row")
    better = max if higher_is_better else min
    best = None
    hit = None
    for row in rows:
        value = row.get(metric)
        if not _measured(value):
            continue
        value = float(value)
        best = value if best is None else better(best, value)
        if value >= target if higher_is_better else value <= target:
            hit = row
            break
    last = rows[-1]
    return TargetResult(
        reached=hit is not None,
        metric=metric,
        target=float(target),
        steps=None if hit is None else int(hit["step"]),
        samples=None if hit is None else int(hit["samples_seen"]),
        seconds=None if hit is None else float(hit["elapsed_s"]),
        budget_steps=int(last["step"]),
        budget_samples=int(last["samples_seen"]),
        budget_seconds=float(last["elapsed_s"]),
        best=best,
    )


@dataclass(frozen=True)
class SeedSummary:
    """Steps (samples, seconds) to the target across seeds.

    ``mean`` and ``ci95`` (Student t, 95%) are over the seeds that reached the target; ``ci95``
    is None with fewer than two of them, ``mean`` None with none. Seeds that did not reach it
    are never dropped silently: ``n_not_reached`` counts them, and ``mean_lower_bound`` is the
    mean over all seeds with each of those counted at its budget (it would have needed more), a
    lower bound on the true mean. When ``n_not_reached`` > 0, ``mean`` is conditional on reaching
    and biased low: report "k of n seeds did not reach" beside it.
    """

    quantity: str
    n_seeds: int
    n_reached: int
    n_not_reached: int
    mean: float | None
    ci95: tuple[float, float] | None
    mean_lower_bound: float
    values: tuple[float, ...]


def summarize_seeds(results: Sequence[TargetResult], quantity: str = "steps") -> SeedSummary:
    """Mean, Student-t 95% interval and not-reached count of ``quantity`` over seeds' results."""
    _check_quantity(quantity)
    if not results:
        raise ValueError("summarize_seeds needs at least one seed's result")
    reached = [float(r.value(quantity)) for r in results if r.reached]
    censored = [r.value(quantity) if r.reached else r.budget(quantity) for r in results]
    mean, low, high = mean_ci(reached)
    return SeedSummary(
        quantity=quantity,
        n_seeds=len(results),
        n_reached=len(reached),
        n_not_reached=len(results) - len(reached),
        mean=mean if reached else None,
        ci95=(low, high) if len(reached) >= 2 else None,
        mean_lower_bound=float(np.mean(censored)),
        values=tuple(reached),
    )


# --------------------------------------------------------------------------------------------
# 4. Gradient noise scale (McCandlish et al. 2018)
# --------------------------------------------------------------------------------------------


def noise_estimates(
    sq_norm_small: float, sq_norm_big: float, batch_small: int, batch_big: int
) -> tuple[float, float]:
    """Unbiased (|G|², tr Σ) from squared norms of mean gradients at two batch sizes.

    With E|G_B|² = |G|² + tr(Σ)/B (McCandlish et al. 2018, appendix A.1):
    |G|² ≈ (B_big·|G_big|² − B_small·|G_small|²)/(B_big − B_small),
    tr(Σ) ≈ (|G_small|² − |G_big|²)/(1/B_small − 1/B_big).
    Either can come out negative on one measurement; only averages are meaningful.
    """
    if not 1 <= batch_small < batch_big:
        raise ValueError(f"need 1 <= batch_small < batch_big, got {batch_small} and {batch_big}")
    g2 = (batch_big * sq_norm_big - batch_small * sq_norm_small) / (batch_big - batch_small)
    trace = (sq_norm_small - sq_norm_big) / (1.0 / batch_small - 1.0 / batch_big)
    return g2, trace


class GradientNoiseScale:
    """Running estimate of the simple noise scale B_simple = tr(Σ)/|G|².

    Feed ``update`` the squared norms of the mean gradient at ``batch_small`` and
    ``batch_big`` (``gradient_sq_norms`` computes both from one batch). Each update turns them
    into unbiased |G|² and tr(Σ) estimates (``noise_estimates``); each of the two keeps its own
    exponential moving average (decay β, Adam-style bias correction), and
    B_simple = EMA(tr Σ)/EMA(|G|²): the ratio of the averages, never the average of per-step
    ratios, whose noisy denominators would bias it.

    ``interval`` is a percentile bootstrap of the same ratio of means over the trailing
    measurements the EMA effectively averages (Kish's n_eff = (1+β)/(1−β), 39 for β = 0.95),
    resampling (|G|², tr Σ) pairs together because they come from the same two norms. It
    treats those measurements as independent and the training state as fixed over the window,
    so it shows measurement noise, not drift: read it as a lower bound on the uncertainty.
    """

    def __init__(self, batch_small: int, batch_big: int, *, ema_decay: float = 0.95) -> None:
        noise_estimates(0.0, 0.0, batch_small, batch_big)  # validates the sizes
        if not 0 <= ema_decay < 1:
            raise ValueError(f"ema_decay must lie in [0, 1), got {ema_decay}")
        self.batch_small = batch_small
        self.batch_big = batch_big
        self.ema_decay = ema_decay
        self._ema_g2 = 0.0
        self._ema_trace = 0.0
        self.history: list[tuple[float, float]] = []  # per-update (|G|², tr Σ) estimates

    def update(self, sq_norm_small: float, sq_norm_big: float) -> tuple[float, float]:
        """Record one measurement; returns its (|G|², tr Σ) estimates."""
        g2, trace = noise_estimates(sq_norm_small, sq_norm_big, self.batch_small, self.batch_big)
        beta = self.ema_decay
        self._ema_g2 = beta * self._ema_g2 + (1 - beta) * g2
        self._ema_trace = beta * self._ema_trace + (1 - beta) * trace
        self.history.append((g2, trace))
        return g2, trace

    def _bias_correction(self) -> float:
        return 1.0 - self.ema_decay ** len(self.history)

    @property
    def grad_sq_norm(self) -> float | None:
        """EMA of the |G|² estimates (bias-corrected); None before any update."""
        return self._ema_g2 / self._bias_correction() if self.history else None

    @property
    def trace_cov(self) -> float | None:
        """EMA of the tr(Σ) estimates (bias-corrected); None before any update."""
        return self._ema_trace / self._bias_correction() if self.history else None

    @property
    def b_simple(self) -> float | None:
        """EMA(tr Σ)/EMA(|G|²), in samples; None before any update or while EMA(|G|²) ≤ 0."""
        if not self.history or self._ema_g2 <= 0:
            return None
        return self._ema_trace / self._ema_g2  # the bias corrections cancel

    @property
    def window(self) -> int:
        """Trailing measurements the interval resamples: the EMA's effective count, (1+β)/(1−β)."""
        beta = self.ema_decay
        return max(2, round((1 + beta) / (1 - beta)))

    def interval(
        self, confidence: float = 0.95, *, n_boot: int = 2000, seed: int = 0
    ) -> tuple[float, float] | None:
        """Bootstrap interval for B_simple (see the class); None with fewer than 2 measurements.

        A resample whose mean |G|² is ≤ 0 counts as B_simple = +inf (noise swamps the signal),
        so the upper end can be inf.
        """
        recent = np.asarray(self.history[-self.window :], dtype=float)
        if len(recent) < 2:
            return None
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(recent), size=(n_boot, len(recent)))
        g2 = recent[picks, 0].mean(axis=1)
        trace = recent[picks, 1].mean(axis=1)
        ratio = np.full(n_boot, np.inf)
        positive = g2 > 0
        ratio[positive] = trace[positive] / g2[positive]
        tail = (1 - confidence) / 2
        low = float(np.quantile(ratio, tail, method="lower"))
        high = float(np.quantile(ratio, 1 - tail, method="higher"))
        return low, high

    def summary(self) -> dict[str, float | int | None]:
        """Flat result fields: B_simple, its interval, the two EMAs and the measurement count."""
        bounds = self.interval()
        return {
            "noise_scale_b_simple": self.b_simple,
            "noise_scale_ci95_low": None if bounds is None else bounds[0],
            "noise_scale_ci95_high": None if bounds is None else bounds[1],
            "noise_scale_grad_sq_norm": self.grad_sq_norm,
            "noise_scale_trace_cov": self.trace_cov,
            "noise_scale_measurements": len(self.history),
            "noise_scale_batch_small": self.batch_small,
            "noise_scale_batch_big": self.batch_big,
        }
