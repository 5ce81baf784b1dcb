"""The measured loop: one runner, a train step and an infer step.

A run iterates a DataLoader. Each step's time runs from the end of the previous step (the
device synchronised) to the end of this one, so it includes waiting for the next batch: the user
pays for the input pipeline. Within a step, the phases are timed apart: the runner's own
bookkeeping, waiting for data, the host-to-device copy, forward, backward and the optimizer step
(host clocks on the CPU, CUDA events on a GPU, so timing a phase never stalls the device). The
first ``warmup_steps`` steps are recorded but never enter the statistics; the measured steps are
split into ``repeats`` consecutive windows whose throughputs give the median and the spread.

An allocator failure ends the run with ``status: oom``, a non-finite training loss with
``status: diverged``; anything else propagates and fails the job. The batch size is never changed.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset

from batchscope.bench import measure
from batchscope.bench.models import logits_of
from batchscope.bench.seeding import loader_generator, seed_worker

#: Phases of a step the step functions time, after waiting for data.
TRAIN_PHASES = ("h2d", "forward", "backward", "optimizer")
INFER_PHASES = ("h2d", "forward")
#: Every column of the per-step breakdown, in step order ("runner" is our own bookkeeping).
BREAKDOWN = ("runner", "data_wait", *TRAIN_PHASES)

#: A point whose throughput windows spread more than this (IQR / median) is flagged ``noisy``,
#: the threshold torch.utils.benchmark uses.
NOISY_IQR_FRAC = 0.10

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


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
    repeats: int = 3
    min_steps: int = 0  # measured steps per window, at least (infer extends its run to reach it)
    min_seconds: float = 0.0  # measured seconds per window, at least (likewise)
    optimizer: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    val_batch_size: int = 512
    precision: str = "fp32"  # fp32 | bf16 | fp16 (autocast; fp16 training adds a grad scaler)
    channels_last: bool = False
    compile: bool = False
    compile_backend: str = "inductor"
    # convergence (training only)
    accumulation_steps: int = 1  # micro-batches of batch_size per optimizer update
    lr_scaling: str = "none"  # none | linear | sqrt, from base_batch_size to the effective batch
    base_batch_size: int | None = None  # None: lr is used as given
    lr_warmup_steps: int = 0
    lr_warmup_epochs: float | None = None  # instead of lr_warmup_steps: epochs of updates
    lr_decay: str = "constant"  # constant | cosine
    eval_every_samples: int | None = None  # validate during training (off the clock)
    target_accuracy: float | None = None
    target_loss: float | None = None
    noise_every_steps: int | None = None  # gradient noise scale measurements (off the clock)
    eval_samples: int | None = None  # evaluate during training on this many held-out samples
    stop_at_target: bool = False  # end the run at the first evaluation that meets the target
    loader: LoaderSettings = field(default_factory=LoaderSettings)


@dataclass
class StepLog:
    """Per-step records, flushed to the steps CSV."""

    rows: list[dict] = field(default_factory=list)

    def add(self, **row) -> None:
        self.rows.append(row)


class PhaseClock:
    """Marks phase boundaries inside a step: host clocks on the CPU, CUDA events on a GPU.

    Events are read only after the step's closing synchronisation, so timing the phases adds no
    stall. On the CPU every operation is synchronous and the host clock is exact.
    """

    def __init__(self, device: torch.device, phases: tuple[str, ...]):
        self.phases = phases
        self.cuda = device.type == "cuda"
        if self.cuda:
            self._events = [torch.cuda.Event(enable_timing=True) for _ in range(len(phases) + 1)]
        self._times = [0.0] * (len(phases) + 1)
        self._next = 0

    def start(self) -> None:
        self._next = 0
        self.mark()

    def mark(self) -> None:
        if self.cuda:
            self._events[self._next].record()
        else:
            self._times[self._next] = time.perf_counter()
        self._next += 1

    def durations_s(self) -> dict[str, float]:
        """Seconds per phase of the step just finished (call after synchronising)."""
        if self.cuda:
            ms = [a.elapsed_time(b) for a, b in itertools.pairwise(self._events)]
            return {p: t / 1000.0 for p, t in zip(self.phases, ms, strict=True)}
        return {
            p: b - a for p, (a, b) in zip(self.phases, itertools.pairwise(self._times), strict=True)
        }


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


def _autocast(device: torch.device, precision: str):
    dtype = PRECISIONS[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _to_device(x, y, device, cfg: RunConfig):
    non_blocking = cfg.loader.non_blocking and device.type == "cuda"
    fmt = torch.channels_last if cfg.channels_last and x.dim() == 4 else torch.preserve_format
    return (
        x.to(device, non_blocking=non_blocking, memory_format=fmt),
        y.to(device, non_blocking=non_blocking),
    )


def _train_step(model, optimizer, cfg: RunConfig, device: torch.device, scheduler=None):
    """One optimizer update over the loader's batch, in ``accumulation_steps`` micro-batches of
    ``batch_size`` (each loss weighted by its share, so the gradient is the big batch's)."""
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.precision == "fp16")

    def step(x: torch.Tensor, y: torch.Tensor, clock: PhaseClock) -> torch.Tensor:
        clock.start()
        x, y = _to_device(x, y, device, cfg)
        clock.mark()
        total = x.new_zeros((), dtype=torch.float32)
        chunks = list(zip(x.split(cfg.batch_size), y.split(cfg.batch_size), strict=True))
        for i, (xs, ys) in enumerate(chunks):
            with _autocast(device, cfg.precision):
                loss = F.cross_entropy(logits_of(model(xs)), ys) * (ys.shape[0] / y.shape[0])
            total += loss.detach().float()
            if i == len(chunks) - 1:
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


def _infer_step(model, cfg: RunConfig, device: torch.device):
    def step(x: torch.Tensor, y: torch.Tensor, clock: PhaseClock) -> None:
        clock.start()
        x, _ = _to_device(x, y, device, cfg)
        clock.mark()
        with torch.inference_mode(), _autocast(device, cfg.precision):
            model(x)
        clock.mark()

    return step


def _progress(total: int, desc: str):
    from tqdm import tqdm

    # Logs are files, not terminals: a line every few seconds is plenty.
    return tqdm(total=total, desc=desc, file=sys.stderr, mininterval=5.0, ascii=True)


def warmup_updates(cfg: RunConfig, updates_per_epoch: int) -> int:
    """The learning-rate warm-up in updates: ``lr_warmup_steps``, or ``lr_warmup_epochs`` of
    ``updates_per_epoch`` (Goyal et al. 2017 warm up over 5 epochs), rounded."""
    if cfg.lr_warmup_epochs is None:
        return cfg.lr_warmup_steps
    return round(cfg.lr_warmup_epochs * updates_per_epoch)


def planned_steps(cfg: RunConfig, steps_per_epoch: int) -> int:
    """Steps the run is planned for: epochs (train) or one pass (infer), capped by max_steps."""
    planned = steps_per_epoch * (cfg.epochs if cfg.mode == "train" else 1)
    return planned if cfg.max_steps is None else min(planned, cfg.max_steps)


def _batches(loader: DataLoader, stamps: dict) -> Iterator:
    """Batches of ``loader`` epoch after epoch; notes when the first iterator is set up."""
    for epoch in itertools.count():
        started = time.perf_counter()
        batches = iter(loader)  # starts the worker processes
        if epoch == 0:
            stamps["iter_started"] = started
            stamps["workers_started"] = time.perf_counter()
        yield from batches
        del batches


def window_stats(samples: list[int], seconds: list[float], repeats: int) -> dict:
    """Split the measured steps into ``repeats`` consecutive windows; median and IQR of their
    throughputs, and the ``noisy`` flag (None with one window: no spread to judge)."""
    n = min(repeats, len(samples))
    rates = [
        float(np.sum(s) / np.sum(t))
        for s, t in zip(np.array_split(samples, n), np.array_split(seconds, n), strict=True)
    ]
    p25, p50, p75 = np.percentile(rates, [25, 50, 75])
    iqr = float(p75 - p25)
    return {
        "samples_per_s": float(p50),
        "samples_per_s_iqr": iqr,
        "samples_per_s_windows": rates,
        "repeats": n,
        "noisy": bool(iqr / p50 > NOISY_IQR_FRAC) if n >= 2 else None,
    }


def measured_loop(
    loader: DataLoader,
    step_fn: Callable,
    cfg: RunConfig,
    device: torch.device,
    log: StepLog,
    *,
    lr_of: Callable[[], float] | None = None,
    after_step: Callable[[int, int, torch.Tensor, torch.Tensor], dict | None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Run ``step_fn`` over ``loader`` and return the timing summary and status.

    ``after_step(step, samples_seen, x, y)`` runs after each step, off the clock (validation,
    noise-scale measurements); what it returns is added to that step's row. When
    ``should_stop()`` then says so, the run ends there (``stopped_early`` in the result).
    """
    planned = planned_steps(cfg, len(loader))
    if planned <= cfg.warmup_steps:
        raise NothingToMeasure(
            f"batch_size {cfg.batch_size} gives {planned} steps, not more than the "
            f"{cfg.warmup_steps} warm-up steps: nothing would be measured"
        )
    phases = TRAIN_PHASES if cfg.mode == "train" else INFER_PHASES
    clock = PhaseClock(device, phases)
    want_steps = cfg.repeats * cfg.min_steps
    want_s = cfg.repeats * cfg.min_seconds

    def finished(step: int, measured_s: float) -> bool:
        if step < planned:
            return False
        if cfg.mode == "train" or (cfg.max_steps is not None and step >= cfg.max_steps):
            return True
        return step - cfg.warmup_steps >= want_steps and measured_s >= want_s

    status, error, last_loss = "ok", None, None
    step_s: list[float] = []
    samples: list[int] = []
    sums = dict.fromkeys(BREAKDOWN, 0.0)
    stamps: dict[str, float] = {}
    workers_mb = dry_run_mb = first_step_s = None
    stopped_early = False
    samples_seen = step = 0
    train_s = 0.0  # time on the clock, warm-up included: a run's seconds, evaluations excluded
    bar = _progress(planned, f"{cfg.mode} bs={cfg.batch_size} nw={cfg.num_workers}")
    t_prev = t_ready = measure.device_clock(device)  # end of the last step, end of bookkeeping
    batches = _batches(loader, stamps)
    try:
        for x, y in batches:
            t_data = time.perf_counter()
            stamps.setdefault("first_batch", t_data)
            loss = step_fn(x, y, clock)
            t_end = measure.device_clock(device)
            # --- bookkeeping: on the clock (as "runner"), off the phases it reports ---
            step += 1
            samples_seen += x.shape[0]
            measured = step > cfg.warmup_steps
            parts = {"runner": t_ready - t_prev, "data_wait": t_data - t_ready}
            parts.update(clock.durations_s())
            if measured:
                step_s.append(t_end - t_prev)
                samples.append(x.shape[0])
                for name, seconds in parts.items():
                    sums[name] += seconds
            train_s += t_end - t_prev
            loss_value = None if loss is None else float(loss.item())
            log.add(
                step=step,
                phase="measured" if measured else "warmup",
                samples_seen=samples_seen,
                elapsed_s=train_s,
                step_time_ms=(t_end - t_prev) * 1000.0,
                data_wait_ms=parts["data_wait"] * 1000.0,
                loss=loss_value,
                lr=lr_of() if lr_of else None,
            )
            bar.update()
            if step == 1:  # the memory dry run: the peak of one whole step
                first_step_s = t_end - t_prev
                dry_run_mb = measure.peak_memory(device)["peak_mem_mb"]
            if loss_value is not None:
                last_loss = loss_value
                if not math.isfinite(loss_value):
                    status = "diverged"
            done = status != "ok" or finished(step, sum(step_s))
            if done and cfg.num_workers > 0:
                workers_mb = measure.workers_pss_mb()  # the workers are still alive
            t_prev = t_end
            extra = after_step(step, samples_seen, x, y) if after_step and not done else None
            if extra:
                log.rows[-1].update(extra)
                t_prev = measure.device_clock(device)  # what the hook took is off the clock
            if not done and should_stop is not None and should_stop():
                done = stopped_early = True
                if cfg.num_workers > 0:
                    workers_mb = measure.workers_pss_mb()
            t_ready = time.perf_counter()
            if done:
                break
    except Exception as exc:  # noqa: BLE001 - only allocator failures are results
        if not measure.is_oom(exc):
            raise
        status, error = "oom", str(exc).strip().splitlines()[0][:500]
    finally:
        batches.close()  # shuts the workers down
        bar.close()
    if status == "oom":
        measure.release_cached_memory(device)
    measured_s = float(sum(step_s))
    ok = status == "ok" and measured_s > 0
    result = {
        "status": status,
        "error": error,
        "steps_run": step,
        "warmup_steps": cfg.warmup_steps,
        "measured_steps": len(step_s),
        "measured_samples": int(sum(samples)),
        "measured_s": measured_s,
        "data_wait_frac": sums["data_wait"] / measured_s if measured_s > 0 else None,
        "worker_startup_s": stamps["workers_started"] - stamps["iter_started"] if stamps else None,
        "time_to_first_batch_s": (
            stamps["first_batch"] - stamps["iter_started"] if "first_batch" in stamps else None
        ),
        "first_step_s": first_step_s,
        "dry_run_peak_mem_mb": dry_run_mb,
        "final_loss": last_loss,
        "stopped_early": stopped_early,
        "workers_pss_mb": workers_mb or 0.0,
        **{
            f"time_{name}_ms": 1000.0 * sums[name] / len(step_s)
            if ok and name in ("runner", "data_wait", *phases)
            else None
            for name in BREAKDOWN
        },
        **measure.step_stats(step_s if ok else []),
    }
    if ok:
        result.update(window_stats(samples, step_s, cfg.repeats))
        accounted = sum(sums.values())
        result["time_other_ms"] = 1000.0 * (measured_s - accounted) / len(step_s)
    else:
        result.update(samples_per_s=None, samples_per_s_iqr=None, repeats=0, noisy=None)
        result.update(samples_per_s_windows=None, time_other_ms=None)
    return result


@torch.inference_mode()
def evaluate(
    model, loader: DataLoader, device: torch.device, cfg: RunConfig
) -> tuple[float, float, int]:
    """Top-1 accuracy and mean loss of ``model`` over ``loader``, and the samples it saw.

    The model is put back in training mode if it was in it."""
    was_training = model.training
    model.eval()
    correct = seen = 0
    loss_sum = 0.0
    for x, y in loader:
        x, y = _to_device(x, y, device, cfg)
        with _autocast(device, cfg.precision):
            logits = logits_of(model(x))
        loss_sum += float(F.cross_entropy(logits.float(), y, reduction="sum"))
        correct += int((logits.argmax(dim=1) == y).sum())
        seen += y.shape[0]
    model.train(was_training)
    return correct / seen, loss_sum / seen, seen


def effective_lr(cfg: RunConfig) -> float:
    """The peak learning rate: ``lr`` scaled from ``base_batch_size`` to the effective batch."""
    if cfg.lr_scaling == "none" or cfg.base_batch_size is None:
        return cfg.lr
    from batchscope.core.schedules import scaled_lr

    effective = cfg.batch_size * cfg.accumulation_steps
    return scaled_lr(cfg.lr, cfg.base_batch_size, effective, cfg.lr_scaling)


def eval_subset(size: int, samples: int) -> list[int]:
    """The held-out samples evaluated during training: the same fixed random ``samples`` of
    ``size`` for every run (a generator seeded with 0), in index order."""
    generator = torch.Generator().manual_seed(0)
    return sorted(torch.randperm(size, generator=generator)[:samples].tolist())


def _meets_target(cfg: RunConfig, row: dict) -> bool:
    if cfg.target_accuracy is not None:
        value = row.get("val_accuracy")
        return value is not None and value >= cfg.target_accuracy
    if cfg.target_loss is not None:
        value = row.get("val_loss")
        return value is not None and value <= cfg.target_loss
    return False


def _convergence_hook(model, cfg: RunConfig, device, val_loader, noise):
    """Validation every ``eval_every_samples`` and noise-scale measurements every
    ``noise_every_steps``: both off the clock, recorded in the step's row. With
    ``stop_at_target``, ``hook.reached()`` says whether the last evaluation met the target."""
    from batchscope.bench.training import gradient_sq_norms

    def loss_fn(logits, y):
        return F.cross_entropy(logits_of(logits), y)

    state = {"next_eval": cfg.eval_every_samples}

    def hook(step: int, samples_seen: int, x: torch.Tensor, y: torch.Tensor) -> dict | None:
        extra = {}
        if val_loader is not None and state["next_eval"] and samples_seen >= state["next_eval"]:
            extra["val_accuracy"], extra["val_loss"], _ = evaluate(model, val_loader, device, cfg)
            while state["next_eval"] <= samples_seen:
                state["next_eval"] += cfg.eval_every_samples
            state["reached"] = _meets_target(cfg, extra)
        if noise is not None and step % cfg.noise_every_steps == 0:
            xd, yd = _to_device(x, y, device, cfg)
            small, big = gradient_sq_norms(
                model, loss_fn, xd, yd, batch_small=noise.batch_small, chunk=cfg.batch_size
            )
            noise.update(small, big)
            extra["noise_sq_small"], extra["noise_sq_big"] = small, big
        return extra or None

    hook.reached = lambda: bool(state.get("reached"))
    return hook


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
    if cfg.precision not in PRECISIONS:
        raise ValueError(f"unknown precision {cfg.precision!r}")
    model = model.to(device)
    if cfg.channels_last:
        model = model.to(memory_format=torch.channels_last)
    train = cfg.mode == "train"
    model.train(train)
    runnable = torch.compile(model, backend=cfg.compile_backend) if cfg.compile else model
    accumulation = cfg.accumulation_steps if train else 1
    loader_cfg = replace(cfg, batch_size=cfg.batch_size * accumulation)
    loader = make_loader(data, loader_cfg, device, shuffle=train, drop_last=True)
    val_loader = eval_loader = None
    if train and val_data is not None:
        val_cfg = replace(cfg, batch_size=cfg.val_batch_size)
        val_loader = eval_loader = make_loader(
            val_data, val_cfg, device, shuffle=False, drop_last=False
        )
        if cfg.eval_samples is not None and cfg.eval_samples < len(val_data):
            subset = Subset(val_data, eval_subset(len(val_data), cfg.eval_samples))
            eval_loader = make_loader(subset, val_cfg, device, shuffle=False, drop_last=False)
    optimizer = scheduler = hook = noise = None
    lr = effective_lr(cfg) if train else None
    warmup = warmup_updates(cfg, len(loader)) if train else None
    if train:
        optimizer = make_optimizer(model, replace(cfg, lr=lr))
        if warmup or cfg.lr_decay != "constant":
            from batchscope.bench.training import make_scheduler

            scheduler = make_scheduler(
                optimizer,
                warmup_steps=warmup,
                total_steps=planned_steps(loader_cfg, len(loader)),
                decay=cfg.lr_decay,
            )
        if cfg.noise_every_steps:
            from batchscope.core.convergence import GradientNoiseScale

            big = cfg.batch_size * accumulation
            noise = GradientNoiseScale(max(1, big // 4), big)
        if cfg.eval_every_samples or noise is not None:
            hook = _convergence_hook(model, cfg, device, eval_loader, noise)
    step_fn = (
        _train_step(runnable, optimizer, cfg, device, scheduler)
        if train
        else _infer_step(runnable, cfg, device)
    )
    lr_of = (lambda: optimizer.param_groups[0]["lr"]) if train else None
    log = StepLog()
    if cpu_memory_budget_mb is not None and device.type == "cpu":
        measure.limit_cpu_memory(cpu_memory_budget_mb)
    measure.reset_peak_memory(device)
    with measure.GpuUtilisation(device) as utilisation:
        stop = hook.reached if hook is not None and cfg.stop_at_target else None
        result = measured_loop(
            loader,
            step_fn,
            loader_cfg,
            device,
            log,
            lr_of=lr_of,
            after_step=hook,
            should_stop=stop,
        )
    result["gpu_util_pct_mean"] = utilisation.mean_pct
    result.update(measure.peak_memory(device, result.pop("workers_pss_mb")))
    result["compile_s"] = result["first_step_s"] if cfg.compile else None
    result["lr"] = lr
    result["base_lr"] = cfg.lr if train else None
    result["lr_scaling"] = cfg.lr_scaling if train else None
    result["lr_warmup_steps"] = warmup
    result["accumulation_steps"] = accumulation
    result["effective_batch_size"] = cfg.batch_size * accumulation
    result["val_accuracy"] = result["val_loss"] = result["val_samples"] = None
    if not train:
        result["final_loss"] = None
    elif result["status"] == "ok" and val_loader is not None:
        try:
            # the uncompiled module (same parameters): validation is not timed, and a
            # compiled model would recompile for eval mode
            accuracy, loss, seen = evaluate(model, val_loader, device, cfg)
        except Exception as exc:  # noqa: BLE001
            if not measure.is_oom(exc):
                raise
            result["status"], result["error"] = "oom", f"validation: {str(exc).splitlines()[0]}"
        else:
            result.update(val_accuracy=accuracy, val_loss=loss, val_samples=seen)
            last = log.rows[-1]
            if eval_loader is val_loader:
                last.update(val_accuracy=accuracy, val_loss=loss)  # the curve's last point
            elif last.get("val_accuracy") is None:  # the curve evaluates its subset only
                sub_accuracy, sub_loss, _ = evaluate(model, eval_loader, device, cfg)
                last.update(val_accuracy=sub_accuracy, val_loss=sub_loss)
    if train:
        result.update(_target_fields(cfg, log.rows))
        if noise is not None:
            result.update(noise.summary())
    return result, log.rows


def _target_fields(cfg: RunConfig, rows: list[dict]) -> dict:
    """Steps, samples and seconds to the configured target, or ``reached: False``."""
    if cfg.target_accuracy is None and cfg.target_loss is None:
        return {}
    from batchscope.core.convergence import steps_to_target

    if cfg.target_accuracy is not None:
        outcome = steps_to_target(rows, target_accuracy=cfg.target_accuracy)
    else:
        outcome = steps_to_target(rows, target_loss=cfg.target_loss)
    return {
        "target_metric": outcome.metric,
        "target": outcome.target,
        "target_reached": outcome.reached,
        "steps_to_target": outcome.steps,
        "samples_to_target": outcome.samples,
        "seconds_to_target": outcome.seconds,
        "best_val_metric": outcome.best,
    }
