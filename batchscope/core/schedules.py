"""Learning-rate rules and schedules, and the counting rules every floor shares.

Pure arithmetic: the benchmark process turns these into a torch scheduler
(``batchscope.bench.training``) and the reports quote the same numbers.

- Goyal et al. 2017, "Accurate, Large Minibatch SGD": the linear scaling rule and warm-up.
"""

from __future__ import annotations

import math

# --------------------------------------------------------------------------------------------
# 1. Learning-rate scaling and schedule
# --------------------------------------------------------------------------------------------

LR_RULES = ("none", "linear", "sqrt")
DECAYS = ("constant", "cosine")
#: Warm-up start as a fraction of the peak when no ``start_lr`` is given. Goyal et al. start
#: from the base batch's lr, i.e. ``peak_lr * B0/B`` under the linear rule: pass
#: ``start_lr=base_lr`` for exactly that.
DEFAULT_WARMUP_START_FRACTION = 0.1


def scaled_lr(base_lr: float, base_batch_size: int, global_batch_size: int, rule: str) -> float:
    """The learning rate for a global batch (the samples of one update over every device and
    micro-batch: ``RunSpec.global_batch_size``) given one tuned at ``base_batch_size``.

    ``none``: lr = base_lr. ``linear`` (Goyal et al. 2017, for SGD): lr = base_lr · B/B0.
    ``sqrt`` (for Adam-type optimizers, whose update noise scales with the square root):
    lr = base_lr · sqrt(B/B0).
    """
    if rule not in LR_RULES:
        raise ValueError(f"unknown lr scaling rule {rule!r}; expected one of {', '.join(LR_RULES)}")
    if base_lr <= 0 or base_batch_size < 1 or global_batch_size < 1:
        raise ValueError(
            f"lr scaling needs base_lr > 0 and batch sizes >= 1, got base_lr={base_lr}, "
            f"base_batch_size={base_batch_size}, global_batch_size={global_batch_size}"
        )
    ratio = global_batch_size / base_batch_size
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
