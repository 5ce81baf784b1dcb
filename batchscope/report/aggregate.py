"""Gather per-run result files into tidy tables: a summary, the points over seeds, the curves.

``collect`` turns one result JSON per grid point into one row per grid point; ``collect_curves``
stacks the per-step CSVs with the grid keys added, so every step row says where it came from.
``summarize_points`` pools the seeds of each mode x model x dataset x batch size x workers: the
mean with a 95% Student-t confidence interval of throughput, accuracy and loss, and the
diagnosis. ``check_environment`` compares each row's environment fingerprint with the captured
environment and flags (does not reject) rows measured elsewhere.

Diagnosis: a point that ran ok is ``input``-bound when it spent more than ``INPUT_BOUND_FRAC``
of its measured step time waiting for data, else ``compute``-bound. An input-bound point's
``stall_removed_by_workers`` is the smallest larger worker count at the same mode, model,
dataset, batch size (and seed, in the summary) whose point is compute-bound, or ``none``.

Partial results (``--allow-missing``): a result file that does not exist becomes a row with
status ``missing``, or ``failed`` when its job's log exists (``--logs``, one per result in the
same order, or ``--log-dir``, a folder laid out as the results), with ``error`` the log's last
non-empty line. The grid point is read from the file name the workflow gives results
(``batchscope.core.paths``).

Command line (every path is explicit; the steps CSV sits next to each result JSON)::

    python -m batchscope.report.aggregate --results a.json b.json ... \\
        --env results/env/environment.json \\
        --summary results/summary.csv --curves results/curves.csv \\
        [--by-point results/summary_by_point.csv] [--rounds results/rounds/*.json] \\
        [--allow-missing (--logs a.log b.log ... | --log-dir logs/bench) --dataset NAME]

This module imports pandas only, never a plotting library (nor torch).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from batchscope.core import results, rounds, verdict
from batchscope.core.paths import grid_of_path
from batchscope.core.stats import mean_ci

#: The columns a reader looks at first, in this order; every other result key follows.
FIRST_COLUMNS = (
    *results.GRID_KEYS,
    "device",
    "status",
    "samples_per_s",
    "tokens_per_s",
    "step_time_ms_p50",
    "peak_mem_mb",
    "data_wait_frac",
    "bound",
    "stall_removed_by_workers",
    "final_loss",
    "val_accuracy",
    "env_fingerprint",
)

#: Order of the rows: by grid point, then seed and round.
SORT_KEYS = [k for k in results.GRID_KEYS if k != "dataset"]

#: A point of the points table: a grid point with its seeds and rounds pooled.
POINT_KEYS = [k for k in results.GRID_KEYS if k not in ("seed", "round")]

#: Keys a result must carry for its row to mean anything (a result from before rounds has no
#: ``round``: it is round 1; one from before token data no ``sequence_length``: it is images).
REQUIRED_KEYS = (
    *(k for k in results.GRID_KEYS if k not in ("round", "sequence_length")),
    "status",
    "env_fingerprint",
    "schema_version",
)

#: Column added by ``check_environment``.
ENV_MATCH_COLUMN = "env_matches_capture"

#: Share of the measured step time spent waiting for data above which a point is input-bound.
INPUT_BOUND_FRAC = 0.2

#: Statuses of grid points without a result file (``--allow-missing``): no log, or a log.
MISSING, FAILED = "missing", "failed"
ABSENT_STATUSES = (MISSING, FAILED)

#: ``stall_removed_by_workers`` of an input-bound point that no larger worker count fixed.
NO_WORKERS = "none"

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

#: Grid keys added after the first results were written, and what an older result meant by
#: leaving them out: one micro-batch per update, one round, one device.
LATER_GRID_KEYS = {"accumulation_steps": 1, "round": 1, "devices": 1}


def with_grid_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with integer ``accumulation_steps``, ``round`` and ``devices`` columns. Tables
    from before each was an axis (and rows that lack them) ran one micro-batch per update, in
    one round, on one device. A table from before token data has no ``sequence_length``: its
    rows are images (empty)."""
    filled = {}
    seq = frame.get("sequence_length", pd.Series(pd.NA, index=frame.index, dtype="Int64"))
    filled["sequence_length"] = pd.to_numeric(seq).astype("Int64")
    for key, value in LATER_GRID_KEYS.items():
        column = frame.get(key, pd.Series(value, index=frame.index))
        filled[key] = pd.to_numeric(column).fillna(value).astype(results.FIELDS[key].dtype)
    return frame.assign(**filled)


def steps_path(result_path: str | Path) -> Path:
    """The steps CSV written next to a result JSON: ``x.json`` -> ``x.steps.csv``."""
    path = Path(result_path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: a result file must end in .json")
    return path.with_suffix(".steps.csv")


def _check_result(path: Path, result: Mapping[str, Any]) -> None:
    missing = [key for key in REQUIRED_KEYS if key not in result]
    if missing:
        raise ValueError(f"{path}: result lacks key(s) {', '.join(missing)}")
    if result["schema_version"] != results.SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version {result['schema_version']!r}, "
            f"this code reads {results.SCHEMA_VERSION}"
        )
    if result["status"] not in results.STATUSES:
        raise ValueError(f"{path}: unknown status {result['status']!r}")


def _check_unique(records: Iterable[tuple[Path, Mapping[str, Any]]]) -> None:
    """Raise ``ValueError`` for two files of the same grid point (one per point and seed)."""
    seen: dict[tuple, Path] = {}
    for path, record in records:
        grid = tuple(record.get(key, LATER_GRID_KEYS.get(key)) for key in results.GRID_KEYS)
        if grid in seen:
            point = ", ".join(f"{k}={v}" for k, v in zip(results.GRID_KEYS, grid, strict=True))
            raise ValueError(f"duplicate grid point ({point}) in {seen[grid]} and {path}")
        seen[grid] = path


def read_results(result_paths: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Read and validate result JSONs; returns ``(path, result)`` pairs in input order.

    Raises ``ValueError`` for a missing key, an unknown status, another schema version, or two
    files for the same grid point (a sweep measures each point once per seed).
    """
    pairs = []
    for raw_path in result_paths:
        path = Path(raw_path)
        result = results.read_json(path)
        for key in ("round", "devices"):  # results from before these axes
            result.setdefault(key, LATER_GRID_KEYS[key])
        result.setdefault("sequence_length", None)
        _check_result(path, result)
        pairs.append((path, result))
    _check_unique(pairs)
    return pairs


def log_path(log_dir: str | Path, result_path: str | Path) -> Path:
    """The log of a result in ``log_dir``, laid out as the results are:
    ``.../<mode>/<model>/<name>.json`` -> ``<log_dir>/<mode>/<model>/<name>.log``."""
    grid_of_path(result_path)  # the name must be one the workflow gives
    path = Path(result_path)
    return Path(log_dir, path.parent.parent.name, path.parent.name, path.stem + ".log")


def last_line(log: str | Path) -> str | None:
    """The last non-empty line of a log, trimmed (carriage returns split lines, as progress
    bars use them); None for an empty log."""
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def absent_result(
    result_path: str | Path, log: str | Path | None = None, dataset: str = "unknown"
) -> dict[str, Any]:
    """The row of a grid point whose result file does not exist: ``failed`` with the last line
    of its ``log`` as ``error`` when that log exists, else ``missing``."""
    grid = grid_of_path(result_path)
    record = {**grid, "dataset": dataset, "status": MISSING, "error": None}
    if log is not None and Path(log).exists():
        record.update(status=FAILED, error=last_line(log))
    return {key: record[key] for key in (*results.GRID_KEYS, "status", "error")}


def read_grid(
    result_paths: Sequence[str | Path],
    log_paths: Sequence[str | Path] | None = None,
    *,
    allow_missing: bool = False,
    dataset: str | None = None,
) -> tuple[list[tuple[Path, dict[str, Any]]], list[dict[str, Any]]]:
    """Read the results that exist and, with ``allow_missing``, make a row for each that does
    not (see ``absent_result``). Returns ``(pairs, absent)``: ``(path, result)`` pairs of the
    results read, and the absent rows.

    ``log_paths``, when given, holds one log per result path, in the same order. The dataset of
    an absent row is ``dataset``, else the one dataset of the results read (``unknown`` when they
    have none or several). Without ``allow_missing`` a missing file raises FileNotFoundError.
    """
    if log_paths is not None and len(log_paths) != len(result_paths):
        raise ValueError(
            f"{len(log_paths)} log(s) for {len(result_paths)} result(s): "
            "give one log per result, in the same order"
        )
    logs = list(log_paths) if log_paths is not None else [None] * len(result_paths)
    present = [Path(p) for p in result_paths if not allow_missing or Path(p).exists()]
    pairs = read_results(present)
    if dataset is None:
        datasets = {result["dataset"] for _, result in pairs}
        dataset = datasets.pop() if len(datasets) == 1 else "unknown"
    absent = [
        (Path(path), absent_result(path, log, dataset))
        for path, log in zip(result_paths, logs, strict=True)
        if allow_missing and not Path(path).exists()
    ]
    _check_unique([*pairs, *absent])
    return pairs, [record for _, record in absent]


def _cell(value: Any) -> Any:
    """A value as a CSV cell: a list (the throughput windows) becomes ';'-joined text."""
    if isinstance(value, list | tuple):
        return ";".join("" if v is None else str(v) for v in value)
    return value


def _bound(status: Any, wait: Any) -> str | None:
    if status != "ok" or pd.isna(wait):
        return None
    return "input" if float(wait) > INPUT_BOUND_FRAC else "compute"


def diagnose(
    frame: pd.DataFrame, wait_column: str = "data_wait_frac", status_column: str = "status"
) -> pd.DataFrame:
    """A copy of ``frame`` with ``bound`` and ``stall_removed_by_workers`` set per row.

    Rows are compared with the rows that share every key column except ``num_workers`` (the
    GRID_KEYS and POINT_KEYS present in ``frame``): an input-bound row gets the smallest larger
    worker count among them that is compute-bound, or ``none``. Rows that did not run ok get
    neither (empty).
    """
    out = frame.copy()
    waits = pd.to_numeric(out[wait_column]) if wait_column in out else pd.Series(index=out.index)
    out["bound"] = [_bound(s, w) for s, w in zip(out[status_column], waits, strict=True)]
    out["stall_removed_by_workers"] = pd.Series(None, index=out.index, dtype=object)
    if out.empty:
        return out
    keys = [k for k in dict.fromkeys([*results.GRID_KEYS, *POINT_KEYS]) if k in out]
    keys.remove("num_workers")
    for _, group in out.groupby(keys, sort=False, dropna=False):
        fixed = sorted(int(w) for w in group.loc[group["bound"] == "compute", "num_workers"])
        for index in group.index[group["bound"] == "input"]:
            workers = int(out.at[index, "num_workers"])
            larger = [w for w in fixed if w > workers]
            out.at[index, "stall_removed_by_workers"] = larger[0] if larger else NO_WORKERS
    return out


def _summary_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per record, FIRST_COLUMNS first, then other keys in first-seen order; lists as
    ';'-joined text; the diagnosis columns filled in."""
    columns = list(FIRST_COLUMNS)
    for record in records:
        columns.extend(key for key in record if key not in columns)
    cells = [{key: _cell(value) for key, value in record.items()} for record in records]
    frame = pd.DataFrame.from_records(cells, columns=columns)
    frame = diagnose(frame.drop(columns=["bound", "stall_removed_by_workers"]))[columns]
    return frame.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def collect(
    result_paths: Iterable[str | Path], absent: Sequence[Mapping[str, Any]] = ()
) -> pd.DataFrame:
    """The summary table: one row per result file (and per ``absent`` row), sorted by mode,
    model, batch_size, num_workers, seed. Duplicate grid points raise ``ValueError``."""
    records = [result for _, result in read_results(result_paths)]
    return _summary_frame([*records, *absent])


def _mean_name(column: str) -> str:
    return column if column.endswith("_mean") else f"{column}_mean"


def any_noisy(values: Iterable[Any]) -> bool | None:
    """Any seed noisy -> True; all known and quiet -> False; none known -> None."""
    flags = [str(v).strip().lower() for v in values if not pd.isna(v) and str(v).strip()]
    if not flags:
        return None
    return any(flag == "true" for flag in flags)


#: Columns of a point's spread over its runs (each a fresh process: seeds x rounds).
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

    Columns: the POINT_KEYS; ``n_seeds`` (distinct seeds), ``n_runs`` (rows of the point: seeds
    x rounds, whatever their status) and ``n_ok``; ``status`` (the runs' one status, or
    ``mixed``); ``failed_seeds`` (``seed:status;...`` of the runs that did not run ok, with
    ``seed:round:status`` once there are rounds beyond the first);
    ``bound`` and ``stall_removed_by_workers`` (from the mean data wait over ok runs, compared
    across worker counts at the same batch size); ``noisy`` (some ok run's throughput windows
    spread over 10%); for each of CI_METRICS ``<metric>_mean``, ``<metric>_ci95_low`` and
    ``<metric>_ci95_high`` (Student t over the ok runs; empty with fewer than two); the
    ROUND_COLUMNS:
    rounds with an ok run, the median throughput over the ok runs with a 95% interval
    (``batchscope.core.verdict.point_stats``: the t interval of the mean log throughput), the
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
        *POINT_KEYS,
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
        for key, group in summary.groupby(POINT_KEYS, sort=True, dropna=False)
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
    row = dict(zip(POINT_KEYS, key, strict=True))
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
    row["eliminated_at_round"] = eliminated.get(rounds.point_of({"devices": 1, **row}))
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


def add_scaling_efficiency(summary: pd.DataFrame) -> pd.DataFrame:
    """``scaling_efficiency`` on every row: the median throughput over the ok runs of the row's
    point divided by its devices × that of the same point on one device (the other point keys
    equal); 1 on one device; empty when either point has no ok run."""
    summary = with_grid_defaults(summary)
    ok = summary[(summary["status"] == "ok") & pd.to_numeric(summary["samples_per_s"]).notna()]
    keys = [k for k in POINT_KEYS if k != "devices"]

    def point(row) -> tuple:  # an empty sequence length (images) as None, which equals itself
        return tuple(None if pd.isna(row[k]) else row[k] for k in keys)

    throughputs: dict[tuple, list[float]] = {}
    for _, row in ok.iterrows():
        throughputs.setdefault((point(row), int(row["devices"])), []).append(
            float(row["samples_per_s"])
        )
    medians = {key: float(np.median(values)) for key, values in throughputs.items()}

    def efficiency(row: pd.Series) -> float:
        own = medians.get((point(row), int(row["devices"])))
        base = medians.get((point(row), 1))
        if own is None or not base:
            return math.nan
        return own / (int(row["devices"]) * base)

    values = summary.apply(efficiency, axis=1) if len(summary) else pd.Series(dtype=float)
    return summary.assign(scaling_efficiency=pd.to_numeric(values, errors="coerce"))


def _round_spread(ok: pd.DataFrame, rounds_of: pd.Series) -> dict[str, Any]:
    """Median, its interval and the run-to-run CV of the ok runs' throughputs."""
    values = [float(v) for v in pd.to_numeric(ok.get("samples_per_s", [])) if v == v and v > 0]
    out = dict.fromkeys(ROUND_COLUMNS[:-1])
    out["n_rounds"] = int(rounds_of.nunique())
    if values:
        stats = verdict.point_stats(values)
        out.update(
            samples_per_s_median=stats["median"],
            samples_per_s_median_ci95_low=stats["ci_low"],
            samples_per_s_median_ci95_high=stats["ci_high"],
            samples_per_s_cv=stats["cv"],
        )
    return out


def read_eliminated(round_files: Iterable[str | Path]) -> dict[tuple, int]:
    """A point (``batchscope.core.rounds.point_of``) -> the round after which the race dropped
    it, from the decisions in ``results/rounds/``."""
    out: dict[tuple, int] = {}
    for path in round_files:
        for entry in results.read_json(path)["eliminated"]:
            out[rounds.point_of(entry)] = int(entry["eliminated_at_round"])
    return out


def collect_curves(
    steps_paths_with_grid: Iterable[tuple[str | Path, Mapping[str, Any]]],
) -> pd.DataFrame:
    """All rows of the given steps CSVs, each with the grid keys of its run in front.

    ``steps_paths_with_grid`` holds ``(steps_csv_path, grid)`` pairs, where ``grid`` is any mapping
    with the GRID_KEYS (a whole result dict will do). A run that stopped before its first step
    contributes no rows. Rows are sorted by grid point, then step.
    """
    columns = [*results.GRID_KEYS, *results.STEP_COLUMNS]
    step_dtypes = {c: t for c, t in results.curve_dtypes().items() if c in results.STEP_COLUMNS}
    frames = []
    for raw_path, grid in steps_paths_with_grid:
        steps = pd.read_csv(raw_path, dtype=step_dtypes)
        missing = [c for c in results.STEP_COLUMNS if c not in steps.columns]
        if missing:
            raise ValueError(f"{raw_path}: steps CSV lacks column(s) {', '.join(missing)}")
        if steps.empty:
            continue
        for key in results.GRID_KEYS:
            steps[key] = grid.get(key, LATER_GRID_KEYS.get(key))
        frames.append(steps[columns])
    if not frames:
        return pd.DataFrame(columns=columns)
    curves = pd.concat(frames, ignore_index=True)
    return curves.sort_values([*SORT_KEYS, "step"], kind="stable").reset_index(drop=True)


def check_environment(
    summary: pd.DataFrame, env: Mapping[str, Any], *, stream=None
) -> pd.DataFrame:
    """Return a copy of ``summary`` with an ``env_matches_capture`` column.

    A row whose ``env_fingerprint`` differs from ``env["fingerprint"]`` gets False and one warning
    line (for all such rows together) is printed to ``stream`` (stderr by default). Not an error:
    the numbers are still real, only measured in another environment than the one captured. A
    row without a result (missing, failed) has no fingerprint and gets an empty cell.
    """
    stream = sys.stderr if stream is None else stream
    expected = env["fingerprint"]
    checked = summary.copy()
    measured = checked["env_fingerprint"].notna()
    matches = checked["env_fingerprint"] == expected
    position = checked.columns.get_loc("env_fingerprint") + 1
    column = matches.astype(bool) if measured.all() else matches.astype(object).where(measured)
    checked.insert(position, ENV_MATCH_COLUMN, column)
    odd = checked.loc[measured & ~matches]
    if len(odd):
        found = ", ".join(sorted(str(f) for f in odd["env_fingerprint"].unique()))
        points = "; ".join(
            " ".join(f"{k}={row[k]}" for k in results.GRID_KEYS) for _, row in odd.iterrows()
        )
        print(
            f"WARNING: {len(odd)} of {int(measured.sum())} results have env fingerprint(s) "
            f"{found}, not the captured {expected}: {points}",
            file=stream,
        )
    return checked


def add_ceiling(summary: pd.DataFrame, ceiling_paths: Iterable[str | Path]) -> pd.DataFrame:
    """Hold each row against the compute-only ceiling of its mode x model x batch size.

    ``ceiling_samples_per_s`` is the same model's throughput on synthetic tensors with no
    workers; ``frac_of_ceiling`` how much of it the real-data run reached (1: the input pipeline
    costs nothing).
    """
    rows = []
    for path in ceiling_paths:
        result = results.read_json(path)
        rows.append(
            {
                "mode": result["mode"],
                "model": result["model"],
                "batch_size": result["batch_size"],
                "ceiling_samples_per_s": result.get("samples_per_s"),
            }
        )
    if not rows:
        return summary
    ceiling = pd.DataFrame(rows)
    merged = summary.merge(ceiling, on=["mode", "model", "batch_size"], how="left")
    merged["frac_of_ceiling"] = merged["samples_per_s"] / merged["ceiling_samples_per_s"]
    return merged


def flag_disturbed(summary: pd.DataFrame, foreign_cpu_limit: float) -> pd.DataFrame:
    """Flag the rows whose measurement was disturbed.

    ``foreign_load``: other processes took more than ``foreign_cpu_limit`` of the machine's CPU
    during the run (``batchscope.core.verdict.under_foreign_load``; empty without a result).
    ``above_ceiling`` (with ceiling runs): the real-data run beat its compute-only ceiling, which
    only noise can do: one of the two was measured disturbed.
    """
    out = summary.copy()
    has_result = out["status"].isin(results.STATUSES)
    frac = out.get("foreign_cpu_frac", pd.Series(None, index=out.index))
    loaded = frac.map(lambda value: verdict.under_foreign_load(value, foreign_cpu_limit))
    out["foreign_load"] = loaded.astype("boolean").where(has_result, pd.NA)
    if "frac_of_ceiling" in out:
        above = pd.to_numeric(out["frac_of_ceiling"]) > 1.0
        out["above_ceiling"] = above.astype("boolean").where(out["frac_of_ceiling"].notna(), pd.NA)
    return out


def _frame_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.aggregate",
        description="Gather per-run result JSONs (and their steps CSVs) into summary, "
        "points and curves CSVs.",
    )
    parser.add_argument("--results", nargs="+", required=True, help="result JSON files")
    parser.add_argument("--env", required=True, help="captured environment JSON")
    parser.add_argument("--summary", required=True, help="output: one row per grid point (CSV)")
    parser.add_argument("--curves", required=True, help="output: every step of every run (CSV)")
    parser.add_argument(
        "--by-point",
        help="output: one row per mode x model x dataset x batch size x workers, seeds and "
        "rounds pooled (CSV)",
    )
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="list a result file that does not exist as a missing (or, with its log, failed) "
        "row instead of stopping",
    )
    logs = parser.add_mutually_exclusive_group()
    logs.add_argument("--logs", nargs="+", help="each result's job log, in the order of --results")
    logs.add_argument(
        "--log-dir",
        help="folder of the job logs, laid out as the results: the log of "
        "<mode>/<model>/<name>.json is DIR/<mode>/<model>/<name>.log",
    )
    parser.add_argument(
        "--dataset", help="dataset of missing rows (default: the one of the results read)"
    )
    parser.add_argument(
        "--ceilings", nargs="*", default=[], help="compute-only ceiling results (synthetic data)"
    )
    parser.add_argument(
        "--rounds", nargs="*", default=[], help="the decisions after each round (results/rounds/)"
    )
    parser.add_argument(
        "--foreign-cpu-limit",
        type=float,
        default=1.0,
        help="sweep.foreign_cpu_limit: flag runs whose foreign_cpu_frac exceeds it (1: none)",
    )
    args = parser.parse_args(argv)
    if args.logs is not None and len(args.logs) != len(args.results):
        parser.error(
            f"--logs has {len(args.logs)} path(s), --results {len(args.results)}: "
            "give one log per result, in the same order"
        )

    log_paths = args.logs
    if args.log_dir is not None:
        log_paths = [log_path(args.log_dir, path) for path in args.results]
    pairs, absent = read_grid(
        args.results, log_paths, allow_missing=args.allow_missing, dataset=args.dataset
    )
    summary = check_environment(
        _summary_frame([*(result for _, result in pairs), *absent]), results.read_json(args.env)
    )
    summary = flag_disturbed(add_ceiling(summary, args.ceilings), args.foreign_cpu_limit)
    summary = add_scaling_efficiency(summary)
    curves = collect_curves((steps_path(path), result) for path, result in pairs)
    results.write_text(args.summary, _frame_csv(summary))
    results.write_text(args.curves, _frame_csv(curves))
    if args.by_point:
        points = summarize_points(summary, read_eliminated(args.rounds))
        results.write_text(args.by_point, _frame_csv(points))
    lacking = ""
    if absent:
        counts = pd.Series([a["status"] for a in absent]).value_counts()
        lacking = " (" + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")"
    print(
        f"aggregated {len(pairs)} results{lacking}, {len(curves)} steps",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
