"""What one step does: the loaders, the optimizer, a training step, an inference step and the
validation pass, each built from a :class:`~batchscope.core.spec.RunSpec`.

A step function takes ``(x, y, clock)`` and marks the boundaries of its phases on ``clock``
(``batchscope.bench.loop.PhaseClock``): host-to-device copy, forward, backward, optimizer.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from batchscope.bench.models import logits_of
from batchscope.bench.seeding import loader_generator, seed_worker
from batchscope.core.spec import RunSpec

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def make_loader(
    dataset: Dataset,
    spec: RunSpec,
    device: torch.device,
    *,
    batch_size: int,
    shuffle: bool,
    drop_last: bool,
    sampler=None,
) -> DataLoader:
    """A DataLoader over ``dataset`` with the spec's workers and loader settings; with
    ``sampler`` (a rank's ``DistributedSampler``, which shuffles itself), over its share."""
    workers = spec.num_workers
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle and sampler is None,
        sampler=sampler,
        drop_last=drop_last,
        num_workers=workers,
        pin_memory=spec.loader.pin_memory and device.type == "cuda",
        prefetch_factor=spec.loader.prefetch_factor if workers > 0 else None,
        persistent_workers=spec.loader.persistent_workers and workers > 0,
        generator=loader_generator(spec.seed),
        worker_init_fn=seed_worker,
    )


def make_optimizer(model: torch.nn.Module, spec: RunSpec, lr: float) -> torch.optim.Optimizer:
    """The spec's optimizer at learning rate ``lr`` (the scaled peak, see ``runner``)."""
    train = spec.train
    if train.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=lr, momentum=train.momentum, weight_decay=train.weight_decay
        )
    if train.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=train.weight_decay)
    raise ValueError(f"unknown optimizer {train.optimizer!r}")


def autocast(device: torch.device, precision: str):
    """Autocast to the precision's dtype; fp32 runs without autocast."""
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def to_device(x, y, device: torch.device, spec: RunSpec):
    """A batch on the device, channels-last where the spec asks for it."""
    non_blocking = spec.loader.non_blocking and device.type == "cuda"
    channels_last = spec.compute.channels_last and x.dim() == 4
    fmt = torch.channels_last if channels_last else torch.preserve_format
    return (
        x.to(device, non_blocking=non_blocking, memory_format=fmt),
        y.to(device, non_blocking=non_blocking),
    )


def train_step(model, optimizer, spec: RunSpec, device: torch.device, scheduler=None, loss_of=None):
    """One optimizer update over the loader's batch (``effective_batch_size`` samples), in
    ``accumulation_steps`` micro-batches of ``batch_size`` (each loss weighted by its share, so
    the gradient is the whole batch's). Under DDP the gradients are all-reduced once per
    update: the micro-batches before the last run under ``no_sync``. ``loss_of``: the
    forward pass and its loss (default: ``train.loss``'s, ``batchscope.bench.losses``)."""
    from batchscope.bench.losses import forward_loss

    precision = spec.compute.precision
    no_sync = getattr(model, "no_sync", None)  # DDP (a compiled DDP forwards it too)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    if loss_of is None:
        loss_of = forward_loss(model, spec.train.loss)

    def step(x: torch.Tensor, y: torch.Tensor, clock) -> torch.Tensor:
        clock.start()
        x, y = to_device(x, y, device, spec)
        clock.mark()
        total = x.new_zeros((), dtype=torch.float32)
        chunks = list(zip(x.split(spec.batch_size), y.split(spec.batch_size), strict=True))
        for i, (xs, ys) in enumerate(chunks):
            last = i == len(chunks) - 1
            sync = no_sync() if no_sync is not None and not last else contextlib.nullcontext()
            with sync:
                with autocast(device, precision):
                    loss = loss_of(xs, ys) * (ys.shape[0] / y.shape[0])
                total += loss.detach().float()
                if last:
                    # with accumulation, the earlier micro-batches' forward and backward passes
                    # are counted in this "forward" phase
                    clock.mark()
                scaler.scale(loss).backward()
        clock.mark()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None:
            scheduler.step()
        clock.mark()
        return total

    return step


def infer_step(model, spec: RunSpec, device: torch.device):
    """One forward pass under ``inference_mode``."""

    def step(x: torch.Tensor, y: torch.Tensor, clock) -> None:
        clock.start()
        x, _ = to_device(x, y, device, spec)
        clock.mark()
        with torch.inference_mode(), autocast(device, spec.compute.precision):
            model(x)
        clock.mark()

    return step


@torch.inference_mode()
def evaluate(
    model, loader: DataLoader, device: torch.device, spec: RunSpec
) -> tuple[float, float, int]:
    """Top-1 accuracy and mean loss (cross-entropy) of ``model`` over ``loader``, and the
    samples it saw. Sequence outputs (``B x L x V``, a language model's) are scored on the
    next id at each position (``batchscope.bench.losses.next_token``), each sample weighing
    one.

    The model is put back in training mode if it was in it."""
    was_training = model.training
    model.eval()
    correct = seen = 0
    loss_sum = 0.0
    for x, y in loader:
        x, y = to_device(x, y, device, spec)
        with autocast(device, spec.compute.precision):
            logits = logits_of(model(x))
        if logits.dim() > 2:  # the next id at each position; each sample weighs one
            from batchscope.bench.losses import next_token

            predicted, ids = next_token(logits, y)
            shape = (y.shape[0], y.shape[1] - 1)
            per_position = F.cross_entropy(predicted.float(), ids, reduction="none").view(shape)
            loss_sum += float(per_position.mean(dim=1).sum())
            hits = (predicted.argmax(dim=-1) == ids).float().view(shape)
            correct += float(hits.mean(dim=1).sum())
        else:
            loss_sum += float(F.cross_entropy(logits.float(), y, reduction="sum"))
            correct += int((logits.argmax(dim=1) == y).sum())
        seen += y.shape[0]
    model.train(was_training)
    return correct / seen, loss_sum / seen, seen
