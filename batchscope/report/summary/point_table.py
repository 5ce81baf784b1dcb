"""The points table: one row per mode x model x dataset x batch size x workers (and the other
point keys), its seeds and rounds pooled: the mean with a 95% Student-t confidence interval of
throughput, accuracy and loss, the median over runs with its interval and run-to-run CV, energy
medians, and the diagnosis.

This module imports pandas only, never a plotting library (nor torch).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from batchscope.core import grid, pooled
from batchscope.core.stats import mean_ci
from batchscope.report.summary.diagnosis import diagnose
from batchscope.report.summary.result_files import POINT_COLUMNS

#: Points-table metrics given as mean and confidence interval over the ok seeds.
CI_METRICS = ("samples_per_s", "tokens_per_s", "val_accuracy", "final_loss")

#: Points-table metrics given as the mean over the ok seeds (when the summary has them).
MEAN_METRICS = (
    "samples_per_s_iqr",
    "peak_mem_mb",
    "data_wait_frac",
    "achieved_tflops",
    "mfu",
    "step_time_ms_mean",
    "time_runner_ms",
    "time_data_wait_ms",
    "time_h2d_ms",
    "time_forward_ms",
    "time_backward_ms",
    "time_optimizer_ms",
    "time_other_ms",
    "ceiling_samples_per_s",
    "frac_of_ceiling",
)

#: Points-table energy metrics given as the median over the ok runs that measured them
#: (``<metric>_median``): a run with a disturbed window weighs no more than any other.
ENERGY_METRICS = ("energy_j_per_sample", "mean_power_w")


def _mean_name(column: str) -> str:
    return column if column.endswith("_mean") else f"{column}_mean"


def any_noisy(values: Iterable[Any]) -> bool | None:
    """Any seed noisy -> True; all known and quiet -> False; none known -> None."""
    flags = [str(v).strip().lower() for v in values if not pd.isna(v) and str(v).strip()]
    if not flags:
        return None
    return any(flag == "true" for flag in flags)


#: Columns of a point's spread over its runs (each its own process: seeds x rounds).
ROUND_COLUMNS = (
    "n_rounds",
    "samples_per_s_median",
    "samples_per_s_median_ci95_low",
    "samples_per_s_median_ci95_high",
    "samples_per_s_cv",
    "eliminated_at_round",
)


def summarize_points(
    summary: pd.DataFrame, eliminated: Mapping[tuple, int] | None = None
) -> pd.DataFrame:
    """One row per mode x model x dataset x batch_size x num_workers, seeds and rounds pooled.

    Columns: the POINT_COLUMNS; ``n_seeds`` (distinct seeds), ``n_runs`` (rows of the point: seeds
    x rounds, whatever their status) and ``n_ok``; ``status`` (the runs' one status, or
    ``mixed``); ``failed_seeds`` (``seed:status;...`` of the runs that did not run ok, with
    ``seed:round:status`` once there are rounds beyond the first);
    ``bound`` and ``stall_removed_by_workers`` (from the mean data wait over ok runs, compared
    across worker counts at the same batch size); ``noisy`` (some ok run's throughput windows
    spread over 10%); for each of CI_METRICS ``<metric>_mean``, ``<metric>_ci95_low`` and
    ``<metric>_ci95_high`` (Student t over the ok runs; empty with fewer than two); the
    ROUND_COLUMNS:
    rounds with an ok run, the median throughput over the ok runs with a 95% interval
    (``batchscope.core.pooled.point_stats``: the t interval of the mean log throughput), the
    run-to-run coefficient of variation, and the round after which the race dropped the point
    (``eliminated``, from ``results/rounds/``; empty if it never was); for each of MEAN_METRICS
    the summary has, its mean over the ok runs (``<metric>_mean``); ``energy_source`` and,
    for each of ENERGY_METRICS, its median over the ok runs that measured it
    (``<metric>_median``; empty where energy was unavailable), and ``power_limit_w`` (the
    largest of the runs').
    """
    eliminated = eliminated or {}
    means = [m for m in MEAN_METRICS if m in summary]
    columns = [
        *POINT_COLUMNS,
        "n_seeds",
        "n_runs",
        "n_ok",
        "status",
        "failed_seeds",
        "bound",
        "stall_removed_by_workers",
        "noisy",
        "n_foreign_load",
        "above_ceiling",
        *(f"{m}_{part}" for m in CI_METRICS for part in ("mean", "ci95_low", "ci95_high")),
        *ROUND_COLUMNS,
        "scaling_efficiency",
        *(_mean_name(m) for m in means),
        "energy_source",
        *(f"{m}_median" for m in ENERGY_METRICS),
        "power_limit_w",
    ]
    rows = [
        _point_row(key, group, means, eliminated)
        for key, group in summary.groupby(POINT_COLUMNS, sort=True, dropna=False)
    ]
    if not rows:
        return pd.DataFrame(columns=columns)
    points = pd.DataFrame(rows)
    points["point_status"] = points["status"].where(points["n_ok"] == 0, "ok")
    points = diagnose(points, wait_column="data_wait_frac_mean", status_column="point_status")
    return points[columns].reset_index(drop=True)


def _point_row(key: tuple, group: pd.DataFrame, means: list[str], eliminated: Mapping) -> dict:
    ok = group[group["status"] == "ok"]
    statuses = sorted(set(group["status"]))
    rounds_of = group["round"] if "round" in group else pd.Series(1, index=group.index)
    failed = group.assign(round=rounds_of)[group["status"] != "ok"].sort_values(["seed", "round"])
    row = dict(zip(POINT_COLUMNS, key, strict=True))
    row.update(
        n_seeds=group["seed"].nunique(),
        n_runs=len(group),
        n_ok=len(ok),
        status=statuses[0] if len(statuses) == 1 else "mixed",
        failed_seeds=";".join(
            f"{int(r.seed)}:{r.status}"
            if rounds_of.max() == 1
            else f"{int(r.seed)}:{int(r.round)}:{r.status}"
            for r in failed.itertuples()
        )
        or None,
        noisy=any_noisy(ok["noisy"]) if "noisy" in ok else None,
        n_foreign_load=int(ok["foreign_load"].fillna(False).sum()) if "foreign_load" in ok else 0,
        above_ceiling=any_noisy(ok["above_ceiling"]) if "above_ceiling" in ok else None,
    )
    for metric in CI_METRICS:
        mean, low, high = mean_ci(ok.get(metric, []))
        row.update({f"{metric}_mean": mean, f"{metric}_ci95_low": low})
        row[f"{metric}_ci95_high"] = high
    row.update(_round_spread(ok, rounds_of[ok.index] if len(ok) else rounds_of.iloc[:0]))
    row["eliminated_at_round"] = eliminated.get(grid.point_of({"devices": 1, **row}))
    row["scaling_efficiency"] = _first(group.get("scaling_efficiency", pd.Series(dtype=float)))
    for metric in means:
        row[_mean_name(metric)] = pd.to_numeric(ok[metric]).mean() if len(ok) else math.nan
    row.update(_energy(ok))
    return row


def _energy(ok: pd.DataFrame) -> dict[str, Any]:
    """The point's ``energy_source`` (its ok runs' sources, ';'-joined when they differ), the
    median of each of ENERGY_METRICS over its ok runs, and the largest ``power_limit_w``."""
    sources = sorted({str(v) for v in ok.get("energy_source", pd.Series()).dropna()})
    row: dict[str, Any] = {"energy_source": ";".join(sources) or None}

    def numbers(metric: str) -> pd.Series:
        return pd.to_numeric(ok.get(metric, pd.Series(dtype=float))).dropna()

    for metric in ENERGY_METRICS:
        values = numbers(metric)
        row[f"{metric}_median"] = values.median() if len(values) else math.nan
    limits = numbers("power_limit_w")
    row["power_limit_w"] = limits.max() if len(limits) else math.nan
    return row


def _first(values: pd.Series) -> float:
    """The first known value (the point's rows share it), else NaN."""
    known = pd.to_numeric(values).dropna()
    return float(known.iloc[0]) if len(known) else math.nan


def _round_spread(ok: pd.DataFrame, rounds_of: pd.Series) -> dict[str, Any]:
    """Median, its interval and the run-to-run CV of the ok runs' throughputs."""
    values = [float(v) for v in pd.to_numeric(ok.get("samples_per_s", [])) if v == v and v > 0]
    out = dict.fromkeys(ROUND_COLUMNS[:-1])
    out["n_rounds"] = int(rounds_of.nunique())
    if values:
        stats = pooled.point_stats(values)
        out.update(
            samples_per_s_median=stats["median"],
            samples_per_s_median_ci95_low=stats["ci_low"],
            samples_per_s_median_ci95_high=stats["ci_high"],
            samples_per_s_cv=stats["cv"],
        )
    return out
