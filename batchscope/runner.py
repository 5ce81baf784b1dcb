"""The measured loop: one runner, a train step and an infer step.

A run iterates a DataLoader for at most ``max_steps`` steps. Each step's time runs from the end
of the previous step (the device synchronised) to the end of this one, so it includes waiting for
the next batch: the user pays for the input pipeline. The wait itself is timed apart
(``data_wait``). The first ``warmup_steps`` steps are recorded but never enter the statistics.

An allocator failure ends the run with ``status: oom``, a non-finite training loss with
``status: diverged``; anything else propagates and fails the job. The batch size is never changed.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from batchscope import measure
from batchscope.models import logits_of
from batchscope.seeding import loader_generator, seed_worker


class NothingToMeasure(ValueError):
    """The grid point leaves no step to time (a batch size too large for the data, say)."""


@dataclass(frozen=True)
class LoaderSettings:
    """DataLoader knobs; ``pin_memory``/``non_blocking`` only act on CUDA, the rest with workers."""

    pin_memory: bool = True
    non_blocking: bool = True
    prefetch_factor: int = 2
    persistent_workers: bool = False


@dataclass(frozen=True)
class RunConfig:
    mode: str  # "train" | "infer"
    batch_size: int
    num_workers: int
    seed: int
    epochs: int = 1
    max_steps: int | None = None
    warmup_steps: int = 5
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    val_batch_size: int = 512
    loader: LoaderSettings = field(default_factory=LoaderSettings)


@dataclass
class StepLog:
    """Per-step records, flushed to the steps CSV."""

    rows: list[dict] = field(default_factory=list)

    def add(self, **row) -> None:
        self.rows.append(row)


def make_loader(
    dataset: Dataset, cfg: RunConfig, device: torch.device, *, shuffle: bool, drop_last: bool
) -> DataLoader:
    workers = cfg.num_workers
    return DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=shuffle,
        drop_last=drop_last,
        num_workers=workers,
        pin_memory=cfg.loader.pin_memory and device.type == "cuda",
        prefetch_factor=cfg.loader.prefetch_factor if workers > 0 else None,
        persistent_workers=cfg.loader.persistent_workers and workers > 0,
        generator=loader_generator(cfg.seed),
        worker_init_fn=seed_worker,
    )


def make_optimizer(model: torch.nn.Module, cfg: RunConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )
    if cfg.optimizer == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise ValueError(f"unknown optimizer {cfg.optimizer!r}")


def _train_step(model, optimizer) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(logits_of(model(x)), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _infer_step(model) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        with torch.inference_mode():
            model(x)

    return step


def _progress(total: int, desc: str):
    from tqdm import tqdm

    # Logs are files, not terminals: a line every few seconds is plenty.
    return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=5.0, ascii=True)


def measured_loop(
    loader: DataLoader,
    step_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None],
    cfg: RunConfig,
    device: torch.device,
    log: StepLog,
    *,
    lr_of: Callable[[], float] | None = None,
) -> dict:
    """Run ``step_fn`` over ``loader`` and return the timing summary and status."""
    non_blocking = cfg.loader.non_blocking and device.type == "cuda"
    per_epoch = len(loader)
    total = per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    if total <= cfg.warmup_steps:
        raise NothingToMeasure(
            f"batch_size {cfg.batch_size} gives {total} steps, not more than the "
            f"{cfg.warmup_steps} warm-up steps: nothing would be measured"
        )
    status, error, last_loss = "ok", None, None
    step_times: list[float] = []
    waits: list[float] = []
    samples = 0
    samples_seen = 0
    first_batch_s = None
    workers_mb = 0.0
    step = 0
    bar = _progress(total, f"{cfg.mode} bs={cfg.batch_size} nw={cfg.num_workers}")
    t_start = measure.device_clock(device)
    t_prev = t_start
    try:
        for _epoch in range(cfg.epochs):
            batches = iter(loader)
            while step < total:
                try:
                    x, y = next(batches)
                except StopIteration:
                    break
                t_data = time.perf_counter()
                if first_batch_s is None:
                    first_batch_s = t_data - t_start
                x = x.to(device, non_blocking=non_blocking)
                y = y.to(device, non_blocking=non_blocking)
                loss = step_fn(x, y)
                t_end = measure.device_clock(device)
                step += 1
                samples_seen += x.shape[0]
                step_s, wait_s = t_end - t_prev, t_data - t_prev
                t_prev = t_end
                phase = "warmup" if step <= cfg.warmup_steps else "measured"
                if phase == "measured":
                    step_times.append(step_s)
                    waits.append(wait_s)
                    samples += x.shape[0]
                loss_value = None if loss is None else float(loss.item())
                log.add(
                    step=step,
                    phase=phase,
                    samples_seen=samples_seen,
                    elapsed_s=t_end - t_start,
                    step_time_ms=step_s * 1000.0,
                    data_wait_ms=wait_s * 1000.0,
                    loss=loss_value,
                    lr=lr_of() if lr_of else None,
                )
                bar.update()
                if step == total and cfg.num_workers > 0:
                    # the workers are still alive: their memory belongs to the peak
                    workers_mb = measure.workers_pss_mb()
                if loss_value is not None:
                    last_loss = loss_value
                    if not math.isfinite(loss_value):
                        status = "diverged"
                        break
            del batches
            if status != "ok" or step >= total:
                break
    except Exception as exc:  # noqa: BLE001 - only allocator failures are results
        if not measure.is_oom(exc):
            raise
        status, error = "oom", str(exc).strip().splitlines()[0][:500]
    finally:
        bar.close()
    if status == "oom":
        measure.release_cached_memory(device)
    measured_s = sum(step_times)
    return {
        "status": status,
        "error": error,
        "steps_run": step,
        "warmup_steps": cfg.warmup_steps,
        "measured_steps": len(step_times),
        "measured_samples": samples,
        "measured_s": measured_s,
        "samples_per_s": samples / measured_s if status == "ok" and measured_s > 0 else None,
        "data_wait_frac": sum(waits) / measured_s if measured_s > 0 else None,
        "time_to_first_batch_s": first_batch_s,
        "final_loss": last_loss,
        "workers_pss_mb": workers_mb,
        **measure.step_stats(step_times if status == "ok" else []),
    }


@torch.inference_mode()
def evaluate(model, loader: DataLoader, device: torch.device) -> tuple[float, int]:
    """Top-1 accuracy of ``model`` on every batch of ``loader``, and the samples it saw."""
    model.eval()
    correct = seen = 0
    for x, y in loader:
        logits = logits_of(model(x.to(device)))
        correct += int((logits.argmax(dim=1).cpu() == y).sum())
        seen += y.shape[0]
    return correct / seen, seen


def run(
    model: torch.nn.Module,
    cfg: RunConfig,
    device: torch.device,
    data: Dataset,
    val_data: Dataset | None = None,
    *,
    cpu_memory_budget_mb: float | None = None,
) -> tuple[dict, list[dict]]:
    """Measure ``cfg.mode`` on ``data``; return (result fields, per-step rows)."""
    model = model.to(device)
    train = cfg.mode == "train"
    model.train(train)
    loader = make_loader(data, cfg, device, shuffle=train, drop_last=True)
    optimizer = make_optimizer(model, cfg) if train else None
    step_fn = _train_step(model, optimizer) if train else _infer_step(model)
    lr_of = (lambda: optimizer.param_groups[0]["lr"]) if train else None
    log = StepLog()
    if cpu_memory_budget_mb is not None and device.type == "cpu":
        measure.limit_cpu_memory(cpu_memory_budget_mb)
    measure.reset_peak_memory(device)
    result = measured_loop(loader, step_fn, cfg, device, log, lr_of=lr_of)
    result.update(measure.peak_memory(device, result.pop("workers_pss_mb")))
    result["lr"] = cfg.lr if train else None
    result["val_accuracy"] = result["val_samples"] = None
    if not train:
        result["final_loss"] = None
    elif result["status"] == "ok" and val_data is not None:
        val_cfg = replace(cfg, batch_size=cfg.val_batch_size)
        val_loader = make_loader(val_data, val_cfg, device, shuffle=False, drop_last=False)
        try:
            result["val_accuracy"], result["val_samples"] = evaluate(model, val_loader, device)
        except Exception as exc:  # noqa: BLE001
            if not measure.is_oom(exc):
                raise
            result["status"], result["error"] = "oom", f"validation: {str(exc).splitlines()[0]}"
    return result, log.rows
