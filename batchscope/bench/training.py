"""The torch side of training: the lr scheduler, gradient accumulation and the two-batch
gradient norms the noise scale is estimated from (``batchscope.core.convergence``), with
BatchNorm held at the whole batch's statistics while they are measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from batchscope.core.convergence import noise_estimates
from batchscope.core.schedules import lr_at


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


def _batch_statistic_norms(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The BatchNorm layers that normalise with the batch's own statistics: those in training
    mode, and those that keep no running statistics."""
    return [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
        and (m.training or m.running_mean is None)
    ]


def _pooled(
    parts: list[tuple[int, torch.Tensor, torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and (biased) variance of all samples from each part's count, mean and
    variance (the law of total variance)."""
    total = sum(n for n, _, _ in parts)
    mean = sum(n * m for n, m, _ in parts) / total
    var = sum(n * (v + (m - mean) ** 2) for n, m, v in parts) / total
    return mean, var


@contextmanager
def full_batch_statistics(
    model: torch.nn.Module, x: torch.Tensor, chunk: int | None = None
) -> Iterator[None]:
    """Inside: every BatchNorm that would normalise with its batch's statistics normalises with
    those of all of ``x`` instead, held fixed (constants: no gradient flows through them).

    Then a sample's gradient depends on that sample alone, so the mean gradient over any part
    of ``x`` is a mean of per-sample gradients, as the two-batch noise estimator assumes. The
    statistics come from one forward pass over ``x`` without gradients (per channel: the mean
    and the biased variance, as training-mode BatchNorm uses); with ``chunk``, in passes of at
    most ``chunk`` samples whose statistics are pooled per layer, each layer's input then
    having been normalised per chunk by the layers before it, as in an accumulating step.
    The pass may update running statistics and draw dropout masks: restore and fork around it.
    """
    norms = _batch_statistic_norms(model)
    if not norms:
        yield
        return
    parts: dict[torch.nn.Module, list] = {m: [] for m in norms}

    def capture(module: torch.nn.Module, inputs: tuple) -> None:
        z = inputs[0].detach().double()
        dims = [d for d in range(z.dim()) if d != 1]
        var, mean = torch.var_mean(z, dim=dims, correction=0)
        parts[module].append((z.numel() // z.shape[1], mean, var))

    handles = [m.register_forward_pre_hook(capture) for m in norms]
    n = int(x.shape[0])
    size = n if chunk is None else max(1, chunk)
    try:
        with torch.no_grad():
            for start in range(0, n, size):
                model(x[start : start + size])
    finally:
        for handle in handles:
            handle.remove()
    saved = {m: m.__dict__.get("forward") for m in norms}
    for m in norms:
        mean, var = _pooled(parts[m])
        m.forward = _fixed_norm(m, mean, var)
    try:
        yield
    finally:
        for m, forward in saved.items():
            del m.forward
            if forward is not None:
                m.forward = forward


def _fixed_norm(
    module: torch.nn.Module, mean: torch.Tensor, var: torch.Tensor
) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(z: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(
            z,
            mean.to(z.dtype),
            var.to(z.dtype),
            module.weight,
            module.bias,
            training=False,
            momentum=0.0,
            eps=module.eps,
        )

    return forward


@contextmanager
def _measuring(model: torch.nn.Module, x: torch.Tensor, chunk: int | None) -> Iterator[None]:
    """Inside: BatchNorm at the statistics of all of ``x`` (:func:`full_batch_statistics`) and
    the RNG forked (dropout draws do not shift the training run's random stream); on leaving,
    the model's buffers (BatchNorm running statistics) are restored, whatever happened."""
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    devices = [] if x.device.type == "cpu" else [x.device]
    device_type = None if x.device.type == "cpu" else x.device.type
    try:
        with (
            torch.random.fork_rng(devices=devices, device_type=device_type),
            full_batch_statistics(model, x, chunk),
        ):
            yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)


def rank_gradient_sq_norms(
    model: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    mean_over_ranks: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    chunk: int | None = None,
) -> tuple[float, float]:
    """(|G_small|², |G_big|²) of a data-parallel step: the small batch is this rank's own
    (``x``, b samples), the big one every rank's (N·b), its gradient the ranks' mean gradient
    (``mean_over_ranks``: an all-reduce) — the gradients a DDP step computes anyway.

    ``model`` is the module itself, not its DDP wrapper: the passes here must not all-reduce.
    BatchNorm, buffers and the RNG are handled as in :func:`gradient_sq_norms` (each rank
    normalises with its own batch's statistics, as DDP without SyncBatchNorm does).
    """
    with _measuring(model, x, chunk):
        g_rank = _mean_grads(model, loss_fn, x, y, chunk)
    small = _sq_norm(g_rank)
    g_all = mean_over_ranks([g.detach().clone() for g in g_rank])
    return small, _sq_norm(g_all)


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

    That identity needs the mean gradient of a part to be a mean of per-sample gradients.
    Training-mode BatchNorm breaks it (each part would be normalised by its own statistics, down
    to a few samples): here such layers use the whole batch's statistics, held fixed, for
    every part (``full_batch_statistics``), at the cost of one more forward pass without
    gradients. Dropout is per sample and stays as it is.

    With ``chunk`` (the micro-batch of an accumulating run), no pass takes more than that many
    samples: the measurement needs no more memory than a training step.

    Leaves the model as it found it: gradients go through ``torch.autograd.grad`` (``.grad`` is
    untouched), buffers (BatchNorm running statistics) are restored and the RNG is forked
    (dropout draws do not shift the training run's random stream).
    """
    batch_big = int(x.shape[0])
    noise_estimates(0.0, 0.0, batch_small, batch_big)  # validates the sizes
    with _measuring(model, x, chunk):
        g_small = _mean_grads(model, loss_fn, x[:batch_small], y[:batch_small], chunk)
        g_rest = _mean_grads(model, loss_fn, x[batch_small:], y[batch_small:], chunk)
    w_small = batch_small / batch_big
    g_big = [w_small * s + (1 - w_small) * r for s, r in zip(g_small, g_rest, strict=True)]
    return _sq_norm(g_small), _sq_norm(g_big)
