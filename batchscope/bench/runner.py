"""One grid point's run: the model, loaders, optimizer and schedule built from the run spec,
validation and the noise scale hooked in off the clock, then the measured loop
(``batchscope.bench.loop``) and what the result adds to its timing.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset, Subset

from batchscope.bench import measure
from batchscope.bench.loop import StepLog, measured_loop, planned_steps
from batchscope.bench.steps import (
    PRECISIONS,
    evaluate,
    infer_step,
    make_loader,
    make_optimizer,
    to_device,
    train_step,
)
from batchscope.core.schedules import epochs_to_steps, scaled_lr
from batchscope.core.spec import RunSpec

#: torch.compile's backend when ``compute.compile`` is on.
COMPILE_BACKEND = "inductor"


def warmup_updates(spec: RunSpec, updates_per_epoch: int) -> int:
    """The learning-rate warm-up in updates: ``lr_warmup_steps``, or ``lr_warmup_epochs`` of
    ``updates_per_epoch`` (Goyal et al. 2017 warm up over 5 epochs)."""
    train = spec.train
    if train.lr_warmup_epochs is None:
        return train.lr_warmup_steps
    return epochs_to_steps(train.lr_warmup_epochs, updates_per_epoch)


def effective_lr(spec: RunSpec) -> float:
    """The peak learning rate: ``lr`` scaled from ``base_batch_size`` to the global batch (the
    effective batch × devices: one update's samples over every device)."""
    train = spec.train
    if train.lr_scaling == "none" or train.base_batch_size is None:
        return train.lr
    return scaled_lr(train.lr, train.base_batch_size, spec.global_batch_size, train.lr_scaling)


def eval_subset(size: int, samples: int) -> list[int]:
    """The held-out samples evaluated during training: the same fixed random ``samples`` of
    ``size`` for every run (a generator seeded with 0), in index order."""
    generator = torch.Generator().manual_seed(0)
    return sorted(torch.randperm(size, generator=generator)[:samples].tolist())


def _meets_target(spec: RunSpec, row: dict) -> bool:
    train = spec.train
    if train.target_accuracy is not None:
        value = row.get("val_accuracy")
        return value is not None and value >= train.target_accuracy
    if train.target_loss is not None:
        value = row.get("val_loss")
        return value is not None and value <= train.target_loss
    return False


def convergence_hooks(model, spec: RunSpec, device, val_loader, noise, group=None):
    """Validation every ``eval_every_samples``, after the step that reaches it, and noise-scale
    measurements every ``noise_scale_every_steps``, on that step's batch before its update
    (a batch the model has just been updated on reads |G|² low): both off the clock, recorded
    in the step's row. Returns (before_step, after_step); with ``stop_at_target``,
    ``after_step.reached()`` says whether the last evaluation met the target."""
    from batchscope.bench.training import gradient_sq_norms, rank_gradient_sq_norms

    train = spec.train

    from batchscope.bench.losses import output_loss

    # from the output: the noise scale's passes do not hand a model its labels
    loss_fn = output_loss(train.loss)

    state = {"next_eval": train.eval_every_samples}

    def validate(step: int, samples_seen: int, x: torch.Tensor, y: torch.Tensor) -> dict | None:
        if val_loader is None or not state["next_eval"] or samples_seen < state["next_eval"]:
            return None
        extra = {}
        extra["val_accuracy"], extra["val_loss"], _ = evaluate(model, val_loader, device, spec)
        while state["next_eval"] <= samples_seen:
            state["next_eval"] += train.eval_every_samples
        state["reached"] = _meets_target(spec, extra)
        return extra

    def measure_noise(step: int, samples_seen: int, x: torch.Tensor, y: torch.Tensor):
        if noise is None or step % train.noise_scale_every_steps != 0:
            return None
        xd, yd = to_device(x, y, device, spec)
        if group is not None:  # small: this rank's batch; big: every rank's
            small, big = rank_gradient_sq_norms(
                model, loss_fn, xd, yd, mean_over_ranks=group.mean_, chunk=spec.batch_size
            )
        else:
            small, big = gradient_sq_norms(
                model, loss_fn, xd, yd, batch_small=noise.batch_small, chunk=spec.batch_size
            )
        noise.update(small, big)
        return {"noise_sq_small": small, "noise_sq_big": big}

    validate.reached = lambda: bool(state.get("reached"))
    return measure_noise, validate


def noise_scale_unmeasurable(batch: int) -> dict:
    """The noise-scale fields of a run whose effective batch cannot be split into two sizes."""
    return {
        "noise_scale_b_simple": None,
        "noise_scale_ci95_low": None,
        "noise_scale_ci95_high": None,
        "noise_scale_grad_sq_norm": None,
        "noise_scale_trace_cov": None,
        "noise_scale_measurements": 0,
        "noise_scale_batch_small": batch,
        "noise_scale_batch_big": batch,
        "noise_scale_unmeasured_reason": (
            f"an effective batch of {batch} sample(s): the two-batch estimator needs a smaller "
            "batch and a bigger one"
        ),
    }


class _Training:
    """What a training run adds around the loop: optimizer, schedule, validation loaders,
    the noise scale and the convergence hook."""

    def __init__(self, model, runnable, spec: RunSpec, device, loader, val_data, group=None):
        train = spec.train
        self.val_loader = self.eval_loader = None
        if val_data is not None and train.validate:
            self._val_loaders(spec, device, val_data)
        self.lr = effective_lr(spec)
        self.warmup = warmup_updates(spec, len(loader))
        self.optimizer = make_optimizer(model, spec, self.lr)
        scheduler = None
        if self.warmup or train.lr_decay != "constant":
            from batchscope.bench.training import make_scheduler

            scheduler = make_scheduler(
                self.optimizer,
                warmup_steps=self.warmup,
                total_steps=planned_steps(spec, len(loader)),
                decay=train.lr_decay,
            )
        self.noise = self.before = self.after = None
        self.noise_fields = {}
        big = spec.effective_batch_size
        # several devices: a rank's batch is the small one, every rank's the big one
        small = big if group is not None else max(1, big // 4)
        big = spec.global_batch_size
        if train.noise_scale_every_steps and big < 2:
            self.noise_fields = noise_scale_unmeasurable(big)
        elif train.noise_scale_every_steps:
            from batchscope.core.convergence import GradientNoiseScale

            self.noise = GradientNoiseScale(small, big)
        if train.eval_every_samples or self.noise is not None:
            self.before, self.after = convergence_hooks(
                model, spec, device, self.eval_loader, self.noise, group
            )
        from batchscope.bench.losses import forward_loss

        # asked of the model inside the DDP and compile wrappers: whether it takes labels
        self.loss_of = forward_loss(runnable, train.loss)
        self.step_fn = train_step(
            runnable, self.optimizer, spec, device, scheduler, loss_of=self.loss_of
        )

    def _val_loaders(self, spec: RunSpec, device, val_data) -> None:
        train = spec.train
        options = {"batch_size": train.val_batch_size, "shuffle": False, "drop_last": False}
        self.val_loader = self.eval_loader = make_loader(val_data, spec, device, **options)
        if train.eval_samples is not None and train.eval_samples < len(val_data):
            subset = Subset(val_data, eval_subset(len(val_data), train.eval_samples))
            self.eval_loader = make_loader(subset, spec, device, **options)

    def lr_of(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def finish(self, model, spec: RunSpec, device, result: dict, rows: list[dict]) -> None:
        """Validate after training (off the clock; a throughput run in its point's first round
        only) and add the training fields to ``result``."""
        result["lr"] = self.lr
        result["base_lr"] = spec.train.lr
        result["lr_scaling"] = spec.train.lr_scaling
        result["lr_warmup_steps"] = self.warmup
        result["loss_used"] = self.loss_of.used
        result["batchnorm_layers"] = sum(
            isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()
        )
        if result["status"] == "ok" and self.val_loader is not None and spec.once_per_point:
            started = time.perf_counter()
            self._validate(model, spec, device, result, rows)
            result["phase_validation_s"] = time.perf_counter() - started
        result.update(_target_fields(spec, rows))
        if self.noise is not None:
            result.update(self.noise.summary(), noise_scale_unmeasured_reason=None)
        result.update(self.noise_fields)

    def _validate(self, model, spec: RunSpec, device, result: dict, rows: list[dict]) -> None:
        try:
            # the uncompiled module (same parameters): validation is not timed, and a
            # compiled model would recompile for eval mode
            accuracy, loss, seen = evaluate(model, self.val_loader, device, spec)
        except Exception as exc:  # noqa: BLE001
            if not measure.is_oom(exc):
                raise
            result["status"], result["error"] = "oom", f"validation: {str(exc).splitlines()[0]}"
            return
        result.update(val_accuracy=accuracy, val_loss=loss, val_samples=seen)
        last = rows[-1]
        if self.eval_loader is self.val_loader:
            last.update(val_accuracy=accuracy, val_loss=loss)  # the curve's last point
        elif last.get("val_accuracy") is None:  # the curve evaluates its subset only
            sub_accuracy, sub_loss, _ = evaluate(model, self.eval_loader, device, spec)
            last.update(val_accuracy=sub_accuracy, val_loss=sub_loss)


def _prepare_model(model: torch.nn.Module, spec: RunSpec, device: torch.device, group=None):
    """The model on the device in the mode's train/eval state, and what the loop calls:
    the model under DDP when training on several devices, compiled when ``compute.compile``
    is on."""
    model = model.to(device)
    if spec.compute.channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train(spec.mode == "train")
    runnable = model
    if group is not None and spec.mode == "train":
        from batchscope.bench import ddp

        runnable = ddp.wrap(model, device)
    if spec.compute.compile:
        return model, torch.compile(runnable, backend=COMPILE_BACKEND)
    return model, runnable


def run(
    model: torch.nn.Module,
    spec: RunSpec,
    device: torch.device,
    data: Dataset,
    val_data: Dataset | None = None,
    *,
    batches=None,
    group=None,
) -> tuple[dict, list[dict]]:
    """Measure ``spec.mode`` on ``data``; return (result fields, per-step rows).

    ``batches``: ready batches to step over instead of a DataLoader over ``data`` (the
    compute-only ceiling's :class:`batchscope.bench.data.DeviceBatches`). ``group``: this
    rank's :class:`batchscope.bench.ddp.Group` in a run on several devices (each rank steps
    over its share of the data; the ranks agree on when the loop ends)."""
    if spec.compute.precision not in PRECISIONS:
        raise ValueError(f"unknown precision {spec.compute.precision!r}")
    started = time.perf_counter()
    model, runnable = _prepare_model(model, spec, device, group)
    loader = batches
    if loader is None:
        from batchscope.bench import ddp

        shuffle = spec.mode == "train"
        loader = make_loader(
            data, spec, device, batch_size=spec.effective_batch_size,
            shuffle=shuffle, drop_last=True,
            sampler=ddp.sampler(data, group, shuffle=shuffle, seed=spec.seed),
        )  # fmt: skip
    training = None
    if spec.mode == "train":
        training = _Training(model, runnable, spec, device, loader, val_data, group)
    step_fn = training.step_fn if training else infer_step(runnable, spec, device)
    if group is not None:
        from batchscope.bench import ddp

        step_fn = ddp.injected_oom(step_fn, group.rank)
    log = StepLog()
    host = measure.HostMemory()
    if spec.num_workers > 0 and batches is None:  # no workers, no thread beside the steps
        host.start()  # before the budget, which would count its thread
    if spec.cpu_memory_budget_mb is not None and device.type == "cpu":
        measure.limit_cpu_memory(spec.cpu_memory_budget_mb)
    measure.reset_peak_memory(device)
    after = training.after if training else None
    stop = after.reached if after is not None and spec.train.stop_at_target else None
    with measure.GpuUtilisation(device) as utilisation, host.sampling():
        ready = time.perf_counter()
        result = measured_loop(
            loader,
            step_fn,
            spec,
            device,
            log,
            lr_of=training.lr_of if training else None,
            before_step=training.before if training else None,
            after_step=after,
            should_stop=stop,
            utilisation=utilisation,
            agree=group.agree if group is not None else None,
        )
    result["phase_prepare_s"] += ready - started  # the loop's own set-up, and ours before it
    result["gpu_util_pct_mean"] = utilisation.mean_pct
    result.update(measure.peak_memory(device, host))
    # the first step from holding its batch: compilation and other first-call costs, without
    # the worker start-up and the first batch's loading
    first_compute_s = result.pop("first_step_compute_s")
    result["compile_s"] = first_compute_s if spec.compute.compile else None
    result.update(lr=None, base_lr=None, lr_scaling=None, lr_warmup_steps=None, loss_used=None)
    result["batchnorm_layers"] = None
    result["accumulation_steps"] = spec.accumulation_steps
    result["effective_batch_size"] = spec.effective_batch_size
    result["val_accuracy"] = result["val_loss"] = result["val_samples"] = None
    if training is None:
        result["final_loss"] = None
    else:
        training.finish(model, spec, device, result, log.rows)
    return result, log.rows


def _target_fields(spec: RunSpec, rows: list[dict]) -> dict:
    """Steps, samples and seconds to the configured target, or ``reached: False``."""
    train = spec.train
    if train.target_accuracy is None and train.target_loss is None:
        return {}
    from batchscope.core.convergence import steps_to_target

    if train.target_accuracy is not None:
        outcome = steps_to_target(rows, target_accuracy=train.target_accuracy)
    else:
        outcome = steps_to_target(rows, target_loss=train.target_loss)
    return {
        "target_metric": outcome.metric,
        "target": outcome.target,
        "target_reached": outcome.reached,
        "steps_to_target": outcome.steps,
        "samples_to_target": outcome.samples,
        "seconds_to_target": outcome.seconds,
        "best_val_metric": outcome.best,
    }
