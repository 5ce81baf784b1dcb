"""Convergence side of the batch-size question: learning-rate scaling, gradient accumulation,
steps to a target and the gradient noise scale. (The knee of the steps-to-target curve is
fitted where the curve is drawn, in the torch-free ``batchscope.convergence_report``.)

Pure logic, no Snakemake and no files: the runner calls these with plain numbers, tensors and
row dicts (the same rows ``runner.StepLog`` records).

References
----------
- Goyal et al. 2017, "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour": the linear
  scaling rule and gradual warm-up.
- McCandlish et al. 2018, "An Empirical Model of Large-Batch Training": the gradient noise scale
  B_simple = tr(Σ)/|G|², its unbiased two-batch-size estimators (appendix A.1) and the
  steps/samples trade-off S = S_min (1 + B_noise/B), E = E_min (1 + B/B_noise).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from batchscope.stats import t_critical  # noqa: F401 - part of this module's API

# --------------------------------------------------------------------------------------------
# 1. Learning-rate scaling and schedule
# --------------------------------------------------------------------------------------------

LR_RULES = ("none", "linear", "sqrt")
DECAYS = ("constant", "cosine")
#: Warm-up start as a fraction of the peak when no ``start_lr`` is given. Goyal et al. start
#: from the base batch's lr, i.e. ``peak_lr * B0/B`` under the linear rule: pass
#: ``start_lr=base_lr`` for exactly that.
DEFAULT_WARMUP_START_FRACTION = 0.1


def scaled_lr(base_lr: float, base_batch_size: int, batch_size: int, rule: str) -> float:
    """The learning rate for ``batch_size`` given one tuned at ``base_batch_size``.

    ``none``: lr = base_lr. ``linear`` (Goyal et al. 2017, for SGD): lr = base_lr · B/B0.
    ``sqrt`` (for Adam-type optimizers, whose update noise scales with the square root):
    lr = base_lr · sqrt(B/B0).
    """
    if rule not in LR_RULES:
        raise ValueError(f"unknown lr scaling rule {rule!r}; expected one of {', '.join(LR_RULES)}")
    if base_lr <= 0 or base_batch_size < 1 or batch_size < 1:
        raise ValueError(
            f"lr scaling needs base_lr > 0 and batch sizes >= 1, got base_lr={base_lr}, "
            f"base_batch_size={base_batch_size}, batch_size={batch_size}"
        )
    ratio = batch_size / base_batch_size
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    return base_lr


def epochs_to_steps(epochs: float, steps_per_epoch: int) -> int:
    """Optimizer steps in ``epochs`` epochs: the nearest whole number, at least 1 if epochs > 0."""
    if epochs < 0 or steps_per_epoch < 1:
        raise ValueError(
            f"need epochs >= 0 and steps_per_epoch >= 1, got {epochs} and {steps_per_epoch}"
        )
    if epochs == 0:
        return 0
    return max(1, round(epochs * steps_per_epoch))


def lr_at(
    step: int,
    *,
    peak_lr: float,
    warmup_steps: int,
    total_steps: int,
    decay: str = "constant",
    start_lr: float | None = None,
) -> float:
    """The learning rate for optimizer update number ``step`` (0-based: step 0 is the first).

    Warm-up (Goyal et al. 2017, gradual): for step < W = ``warmup_steps``,
    lr = start + (peak − start) · step/W, so the first update uses ``start_lr`` and update W
    (the first after warm-up) uses ``peak_lr``. ``start_lr`` defaults to
    ``DEFAULT_WARMUP_START_FRACTION · peak_lr``; Goyal et al. start from the base batch's lr.

    After warm-up, ``constant`` keeps ``peak_lr``; ``cosine`` follows
    lr = peak · ½ (1 + cos(π (step − W)/(T − W))) and reaches 0 at T = ``total_steps``
    (and stays 0 beyond).
    """
    if decay not in DECAYS:
        raise ValueError(f"unknown lr decay {decay!r}; expected one of {', '.join(DECAYS)}")
    if step < 0 or not 0 <= warmup_steps <= total_steps or total_steps < 1:
        raise ValueError(
            f"need step >= 0 and 0 <= warmup_steps <= total_steps >= 1, got step={step}, "
            f"warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    start = peak_lr * DEFAULT_WARMUP_START_FRACTION if start_lr is None else start_lr
    if not 0 <= start <= peak_lr:
        raise ValueError(f"warm-up start_lr {start} must lie in [0, peak_lr={peak_lr}]")
    if step < warmup_steps:
        return start + (peak_lr - start) * step / warmup_steps
    if decay == "constant":
        return peak_lr
    if step >= total_steps:
        return 0.0
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    total_steps: int,
    decay: str = "constant",
    start_lr: float | None = None,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` whose lr before update ``s`` equals ``lr_at(s, ...)``.

    The peak is the lr the optimizer holds now (set it to ``scaled_lr(...)`` first); the factor
    is lr_at(s)/peak. Call ``scheduler.step()`` after each ``optimizer.step()``. Further param
    groups get the same factor, so they keep their lr ratio to the first group.
    """
    peak_lr = optimizer.param_groups[0]["lr"]
    if peak_lr <= 0:
        raise ValueError(
            f"the optimizer's lr is the schedule's peak and must be > 0, got {peak_lr}"
        )
    # Validate now rather than on the first step.
    lr_at(
        0,
        peak_lr=peak_lr,
        warmup_steps=warmup_steps,
        total_steps=total_steps,
        decay=decay,
        start_lr=start_lr,
    )

    def factor(step: int) -> float:
        lr = lr_at(
            step,
            peak_lr=peak_lr,
            warmup_steps=warmup_steps,
            total_steps=total_steps,
            decay=decay,
            start_lr=start_lr,
        )
        return lr / peak_lr

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# --------------------------------------------------------------------------------------------
# 2. Gradient accumulation
# --------------------------------------------------------------------------------------------


def accumulation_steps(effective_batch_size: int, micro_batch_size: int) -> int:
    """k = effective / micro: how many micro-batches make one optimizer step's batch."""
    if micro_batch_size < 1 or effective_batch_size < 1:
        raise ValueError(
            f"batch sizes must be >= 1, got effective batch size {effective_batch_size} and "
            f"micro-batch size {micro_batch_size}"
        )
    if effective_batch_size % micro_batch_size:
        raise ValueError(
            f"effective batch size {effective_batch_size} is not a multiple of micro-batch size "
            f"{micro_batch_size}"
        )
    return effective_batch_size // micro_batch_size


def accumulate_gradients(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> torch.Tensor:
    """Leave in ``.grad`` the gradient of the mean loss over all micro-batches; return that loss.

    ``loss_fn`` must average over its batch. Micro-batch i (n_i samples of N in all) contributes
    its loss × n_i/N, which is 1/k for k equal micro-batches, so the sum of the k backward passes
    equals the gradient of one batch of N = k·b samples (to float rounding).

    Exactness needs per-sample independence: BatchNorm in training mode normalises each
    micro-batch with its own statistics (and updates its running averages k times), and dropout
    draws other masks, so such models only match in distribution. Use eval-mode BatchNorm, or
    GroupNorm/LayerNorm, when the equality matters.
    """
    if not micro_batches:
        raise ValueError("accumulation needs at least one micro-batch")
    total = sum(int(y.shape[0]) for _, y in micro_batches)
    model.zero_grad(set_to_none=True)
    mean_loss = None
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) * (int(y.shape[0]) / total)
        loss.backward()
        part = loss.detach()
        mean_loss = part if mean_loss is None else mean_loss + part
    return mean_loss


def accumulated_step(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    optimizer: torch.optim.Optimizer,
) -> torch.Tensor:
    """One optimizer step on the batch made of ``micro_batches``; returns its mean loss."""
    loss = accumulate_gradients(model, loss_fn, micro_batches)
    optimizer.step()
    return loss


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
    mean = ci95 = None
    if reached:
        mean = float(np.mean(reached))
    if len(reached) >= 2:
        half = (
            t_critical(len(reached) - 1) * float(np.std(reached, ddof=1)) / math.sqrt(len(reached))
        )
        ci95 = (mean - half, mean + half)
    return SeedSummary(
        quantity=quantity,
        n_seeds=len(results),
        n_reached=len(reached),
        n_not_reached=len(results) - len(reached),
        mean=mean,
        ci95=ci95,
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


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> list[torch.Tensor]:
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads, strict=True)]


def _sq_norm(tensors: Iterable[torch.Tensor]) -> float:
    return float(sum(t.detach().double().pow(2).sum() for t in tensors))


def _mean_grads(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    chunk: int | None,
) -> list[torch.Tensor]:
    """The mean gradient over ``x`` from backward passes of at most ``chunk`` samples each,
    each weighted by its share (``loss_fn`` averages over its batch)."""
    n = int(x.shape[0])
    size = n if chunk is None else max(1, chunk)
    total: list[torch.Tensor] = []
    for start in range(0, n, size):
        part = slice(start, start + size)
        weight = x[part].shape[0] / n
        grads = _grads(model, loss_fn(model(x[part]), y[part]))
        total = (
            [weight * g for g in grads]
            if not total
            else [t + weight * g for t, g in zip(total, grads, strict=True)]
        )
    return total


def gradient_sq_norms(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_small: int,
    chunk: int | None = None,
) -> tuple[float, float]:
    """(|G_small|², |G_big|²) from one batch: its first ``batch_small`` samples, and all of it.

    Two backward passes over disjoint parts, x[:b] and x[b:], cost about one step on the whole
    batch; the big batch's mean gradient is G_big = (b·G_small + (B−b)·G_rest)/B (``loss_fn``
    must average over its batch). The small gradient is part of the big one; each still has
    E|G_B|² = |G|² + tr(Σ)/B, so ``noise_estimates`` stays unbiased.

    With ``chunk`` (the micro-batch of an accumulating run), no backward pass takes more than
    that many samples: the measurement needs no more memory than a training step.

    Leaves the model as it found it: gradients go through ``torch.autograd.grad`` (``.grad`` is
    untouched), buffers (BatchNorm running statistics) are restored and the RNG is forked
    (dropout draws do not shift the training run's random stream). Runs in the model's current
    mode: in training mode BatchNorm normalises each part with its own statistics.
    """
    batch_big = int(x.shape[0])
    noise_estimates(0.0, 0.0, batch_small, batch_big)  # validates the sizes
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    devices = [] if x.device.type == "cpu" else [x.device]
    device_type = None if x.device.type == "cpu" else x.device.type
    try:
        with torch.random.fork_rng(devices=devices, device_type=device_type):
            g_small = _mean_grads(model, loss_fn, x[:batch_small], y[:batch_small], chunk)
            g_rest = _mean_grads(model, loss_fn, x[batch_small:], y[batch_small:], chunk)
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
    w_small = batch_small / batch_big
    g_big = [w_small * s + (1 - w_small) * r for s, r in zip(g_small, g_rest, strict=True)]
    return _sq_norm(g_small), _sq_norm(g_big)
