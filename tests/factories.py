"""Factories tests share: run specs built the way the workflow builds them, from a config whose
missing keys take the schema's defaults; and fake results (:func:`fake_result`, a run's result
valid against the result schema, and :func:`summary_row`, a row of ``summary.csv``), the one
place tests make them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from batchscope.core import config as config_module
from batchscope.core import results
from batchscope.core import spec as spec_module

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = config_module.load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")

#: A tiny synthetic sweep: what a unit test measures unless it says otherwise.
BASE_CONFIG = {
    "dataset": {
        "name": "synthetic",
        "channels": 1,
        "image_size": 12,
        "num_classes": 4,
        "num_samples": 96,
    },
    "models": ["small_cnn"],
    "modes": ["train", "infer"],
    "batch_sizes": [8],
    "num_workers": [0],
    "seeds": [0],
    "device": "cpu",
    # step-based windows of 5 steps (the schema's default is 2): unit tests measure a handful
    # of steps, not seconds, and count them
    "measure": {"warmup_steps": 2, "ceiling": False, "min_seconds": 0, "min_steps": 5},
}


def design(**changes: Any):
    """The race's design (batchscope.core.verdict.Design) from the schema's defaults, with
    ``changes`` (its field names: level, margin, strategy, first_look, max_rounds)."""
    import dataclasses

    from batchscope.core import verdict

    defaults = config_module.with_defaults({}, SCHEMA)
    return dataclasses.replace(verdict.Design.from_config(defaults), **changes)


def _merge(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def sweep_config(**changes: Any) -> dict:
    """``BASE_CONFIG`` with ``changes`` merged in (sections key by key), checked and with the
    schema's defaults filled, as the workflow has it after ``validate``."""
    config = _merge(BASE_CONFIG, changes)
    config_module.check(config, SCHEMA)
    return config_module.with_defaults(config, SCHEMA)


def make_spec(
    mode: str = "train",
    *,
    kind: str = "bench",
    model: str = "small_cnn",
    batch_size: int = 8,
    accumulation_steps: int = 1,
    num_workers: int = 0,
    seed: int = 0,
    devices: int = 1,
    sequence_length: int | None = None,
    round: int = 1,
    short: bool = False,
    **config_changes: Any,
) -> spec_module.RunSpec:
    """The run spec of one grid point of ``sweep_config(**config_changes)``; token data takes
    ``sequence_length``, by default its config's first; ``short``: train.predict's short run."""
    config = sweep_config(**config_changes)
    if sequence_length is None and config["dataset"]["name"] in ("tokens", "text"):
        sequence_length = config["sequence_lengths"][0]
    return spec_module.build(
        config,
        sequence_length=sequence_length,
        kind=kind,
        mode=mode,
        model=model,
        batch_size=batch_size,
        accumulation_steps=accumulation_steps,
        num_workers=num_workers,
        seed=seed,
        devices=devices,
        round=round,
        short=short,
    )


def settings(mode: str = "train", **values: Any) -> dict:
    """Config changes from flat setting names (``lr=0.01, warmup_steps=2, max_steps=6``), each
    put in the config section whose spec section has that field (``max_steps``: the mode's)."""
    sections = {
        "train": spec_module.TrainSpec,
        "measure": spec_module.MeasureSpec,
        "compute": spec_module.ComputeSpec,
        "loader": spec_module.LoaderSpec,
    }
    changes: dict[str, dict] = {}
    for name, value in values.items():
        if name == "max_steps":
            section = mode
        else:
            found = [s for s, cls in sections.items() if name in cls.__dataclass_fields__]
            if not found:
                raise KeyError(f"no config section has a setting {name!r}")
            section = found[0]
        changes.setdefault(section, {})[name] = value
    return changes


#: What an end-to-end test's sweep measures unless rounds are its subject: one round, windows
#: of a few steps rather than seconds (the default sweep races 0.5 s windows over 2-8 rounds) ...
ONE_ROUND = {"rounds": 1, "min_seconds": 0}
#: ... and no race after it (with the race, measure.rounds is only where its first look is).
NO_RACE = {"strategy": "full"}


# --------------------------------------------------------------------------- fake results

#: The environment fingerprint of every fake result.
FINGERPRINT = "0123456789ab"

#: The keys a result has only with a training target, and only with noise-scale measurements
#: (each group is all there or not at all).
TARGET_KEYS = tuple(
    name for name, f in results.FIELDS.items() if not f.required and "noise_scale" not in name
)
NOISE_SCALE_KEYS = tuple(
    name for name, f in results.FIELDS.items() if not f.required and "noise_scale" in name
)

#: Statuses of summary rows without a result file.
ABSENT_STATUSES = ("failed", "missing")

#: The per-step time breakdown of a fake ok run: it adds up to its mean step time (64 ms).
_BREAKDOWN = {
    "train": {"runner": 0.5, "data_wait": 6.4, "h2d": 0.1, "forward": 25.0, "backward": 27.0,
              "optimizer": 4.0, "other": 1.0},
    "infer": {"runner": 0.5, "data_wait": 6.4, "h2d": 0.1, "forward": 56.0, "backward": None,
              "optimizer": None, "other": 1.0},
}  # fmt: skip


def fake_result(
    mode: str = "train",
    *,
    status: str = "ok",
    target: bool = False,
    noise_scale: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """One run's result as the benchmark job writes it, valid against the result schema, with
    plausible numbers for a small CPU run (64 samples per step, 1000 samples/s).

    ``mode`` decides what training adds (inference has none of it), ``status`` which
    measurements exist (``oom`` and ``diverged``: no statistics, as the loop leaves them);
    ``target`` and ``noise_scale`` add those groups of keys, as does overriding any key of a
    group. ``overrides`` replace keys last; a key the schema lacks makes the result invalid.
    ``effective_batch_size`` and ``pythonhashseed`` follow the overridden grid keys.
    """
    train = mode == "train"
    grid = {
        "mode": mode,
        "model": "small_cnn",
        "dataset": "synthetic",
        "sequence_length": None,
        "batch_size": 64,
        "accumulation_steps": 1,
        "num_workers": 0,
        "devices": 1,
        "seed": 0,
        "round": 1,
    }
    grid.update({key: overrides[key] for key in results.GRID_KEYS if key in overrides})
    batch = grid["batch_size"] * grid["accumulation_steps"]
    ok, measured = status == "ok", status in ("ok", "diverged")
    result = {
        "schema_version": results.SCHEMA_VERSION,
        **grid,
        "status": status,
        "error": "DefaultCPUAllocator: can't allocate memory" if status == "oom" else None,
        "oom_rank": 0 if status == "oom" else None,
        "oom_step": 1 if status == "oom" else None,
        "stopped_early": False,
        "samples_per_s": 1000.0 if ok else None,
        "tokens_per_s": 1000.0 * grid["sequence_length"]
        if ok and grid["sequence_length"]
        else None,
        "samples_per_s_iqr": 20.0 if ok else None,
        "samples_per_s_windows": [990.0, 1000.0, 1030.0] if ok else None,
        "samples_per_s_per_rank": [1000.0 / grid["devices"]] * grid["devices"] if ok else None,
        "repeats": 3 if ok else 0,
        "noisy": False if ok else None,
        "steps_run": 12 if ok else 5 if measured else 0,
        "warmup_steps": 2,
        "measured_steps": 10 if ok else 3 if measured else 0,
        "measured_samples": (10 if ok else 3 if measured else 0) * batch,
        "measured_s": 0.64 if ok else 0.19 if measured else 0.0,
        "diagnostic_steps": 0,
        "flops_per_sample": 8.0e6,
        "achieved_tflops": 0.008 if ok else None,
        "math_mode": None,
        "peak_tflops": None,
        "mfu": None,
        "gpu_util_pct_mean": None,
        "energy_source": "unavailable: no RAPL energy counter",
        "energy_j_per_sample": None,
        "mean_power_w": None,
        "power_limit_w": None,
        "step_time_ms_p50": 64.0 if ok else None,
        "step_time_ms_p90": 70.0 if ok else None,
        "step_time_ms_p99": 75.0 if ok else None,
        "step_time_ms_iqr": 2.0 if ok else None,
        "step_time_ms_mean": 64.0 if ok else None,
        "data_wait_frac": 0.1 if measured else None,
        **{f"time_{phase}_ms": value if ok else None for phase, value in _BREAKDOWN[mode].items()},
        "worker_startup_s": 0.0001,
        "time_to_first_batch_s": 0.01,
        "first_step_s": 0.1 if measured else None,
        "compile_s": None,
        "wall_s": 1.0,
        "launch": "forked",
        "process_s": 2.0,
        "phase_startup_s": 1.0,
        "phase_setup_s": 0.05,
        "phase_data_s": 0.1,
        "phase_model_s": 0.01,
        "phase_flops_s": 0.01,
        "phase_prepare_s": 0.01,
        "phase_workers_s": 0.01,
        "phase_warmup_s": 0.1,
        "phase_measured_s": 0.64 if ok else 0.19 if measured else 0.0,
        "phase_paused_s": 0.0,
        "phase_diagnostic_s": 0.0,
        "phase_validation_s": 0.0,
        "phase_write_s": 0.01,
        "phase_other_s": 0.06,
        "peak_mem_mb": 100.0,
        "peak_rss_mb": 100.0,
        "workers_uss_mb": 0.0,
        "cuda_max_allocated_mb": None,
        "cuda_max_reserved_mb": None,
        "cuda_peak_device_mb": None,
        "dry_run_peak_mem_mb": 95.0 if measured else None,
        "cpu_memory_budget_mb": None,
        "effective_batch_size": batch,
        "global_batch_size": batch * grid["devices"],
        "world_size": grid["devices"],
        "epochs": 1,
        "max_steps": 12,
        "short_run": False,
        "optimizer": "sgd" if train else None,
        "lr": 0.1 if train else None,
        "base_lr": 0.1 if train else None,
        "lr_scaling": "none" if train else None,
        "lr_warmup_steps": 0 if train else None,
        "loss_used": "cross_entropy" if train else None,
        "batchnorm_layers": 0 if train else None,
        "final_loss": 1.5 if train and ok else None,
        "val_accuracy": 0.4 if train and ok else None,
        "val_loss": 1.6 if train and ok else None,
        "val_samples": 512 if train and ok else None,
        "precision": "fp32",
        "channels_last": False,
        "compile": False,
        "image_size": 16,
        "channels": 1,
        "images_skipped": 0,
        "decoder": None,
        "preprocessing": None,
        "pin_memory": True,
        "non_blocking": True,
        "prefetch_factor": 2,
        "persistent_workers": False,
        "device": "cpu",
        "device_name": "test cpu",
        "torch_version": "2.14.1",
        "env_fingerprint": FINGERPRINT,
        "torch_threads": 2,
        "omp_num_threads": "2",
        "cuda_visible_devices": None,
        "slurm_job_id": None,
        "deterministic": True,
        "pythonhashseed": str(grid["seed"]),
        "started_at": "2026-01-01T00:00:00+00:00",
        "model_source": "builtin",
        "model_id": "small_cnn",
        "model_kwargs": "{}",
        "weights_sha256": None,
        "num_parameters": 136_000,
        "foreign_cpu_s": 0.0,
        "foreign_cpu_frac": 0.0,
        "loadavg_1m": 0.5,
    }
    if target or any(key in overrides for key in TARGET_KEYS):
        result.update(
            target_metric="val_accuracy",
            target=0.8,
            target_reached=False,
            steps_to_target=None,
            samples_to_target=None,
            seconds_to_target=None,
            best_val_metric=0.4 if measured else None,
        )
    if noise_scale or any(key in overrides for key in NOISE_SCALE_KEYS):
        result.update(
            noise_scale_b_simple=70.0,
            noise_scale_ci95_low=35.0,
            noise_scale_ci95_high=140.0,
            noise_scale_grad_sq_norm=1.0,
            noise_scale_trace_cov=70.0,
            noise_scale_measurements=40,
            noise_scale_batch_small=max(1, batch // 4),
            noise_scale_batch_big=batch,
            noise_scale_unmeasured_reason=None,
        )
    result.update(overrides)
    return result


def summary_row(mode: str = "train", *, status: str = "ok", **overrides: Any) -> dict[str, Any]:
    """One row of ``summary.csv`` as the reporting modules read it: a :func:`fake_result` with
    its lists joined by ';'; for a grid point without a result (status ``failed`` or
    ``missing``), only its grid keys, status and ``error``, then ``overrides``."""
    if status in ABSENT_STATUSES:
        grid = fake_result(mode, **{k: v for k, v in overrides.items() if k in results.GRID_KEYS})
        row = {key: grid[key] for key in results.GRID_KEYS}
        return {**row, "status": status, "error": None, **overrides}
    result = fake_result(mode, status=status, **overrides)
    return {k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in result.items()}
