"""Gather per-run result files into tidy tables: the summary, the points over seeds, the curves.

``collect`` turns one result JSON per grid point into one row per grid point; ``collect_curves``
stacks the per-step CSVs with the grid keys added, so every step row says where it came from.
The reading (and the rows of absent results) is ``result_files``'s, the diagnosis and flags
``diagnosis``'s, the points table (seeds and rounds pooled) ``point_table``'s (all three in
``batchscope.report.summary``); this module puts the summary together and writes the tables.

Command line (every path is explicit; the steps CSV sits next to each result JSON)::

    python -m batchscope.report.summary.aggregate --results a.json b.json ... \\
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

from batchscope.core import results
from batchscope.report.summary import diagnosis, point_table, result_files
from batchscope.report.summary.result_files import LATER_GRID_KEYS, POINT_COLUMNS, SORT_KEYS

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


def _cell(value: Any) -> Any:
    """A value as a CSV cell: a list (the throughput windows) becomes ';'-joined text."""
    if isinstance(value, list | tuple):
        return ";".join("" if v is None else str(v) for v in value)
    return value


def _summary_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per record, FIRST_COLUMNS first, then other keys in first-seen order; lists as
    ';'-joined text; the diagnosis columns filled in."""
    columns = list(FIRST_COLUMNS)
    for record in records:
        columns.extend(key for key in record if key not in columns)
    cells = [{key: _cell(value) for key, value in record.items()} for record in records]
    frame = pd.DataFrame.from_records(cells, columns=columns)
    frame = diagnosis.diagnose(frame.drop(columns=["bound", "stall_removed_by_workers"]))[columns]
    return frame.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def collect(
    result_paths: Iterable[str | Path], absent: Sequence[Mapping[str, Any]] = ()
) -> pd.DataFrame:
    """The summary table: one row per result file (and per ``absent`` row), sorted by mode,
    model, batch_size, num_workers, seed. Duplicate grid points raise ``ValueError``."""
    records = [result for _, result in result_files.read_results(result_paths)]
    return _summary_frame([*records, *absent])


def add_scaling_efficiency(summary: pd.DataFrame) -> pd.DataFrame:
    """``scaling_efficiency`` on every row: the median throughput over the ok runs of the row's
    point divided by its devices × that of the same point on one device (the other point keys
    equal); 1 on one device; empty when either point has no ok run."""
    summary = result_files.with_grid_defaults(summary)
    ok = summary[(summary["status"] == "ok") & pd.to_numeric(summary["samples_per_s"]).notna()]
    keys = [k for k in POINT_COLUMNS if k != "devices"]

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


def _frame_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.summary.aggregate",
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
        required=True,
        help="sweep.foreign_cpu_limit_frac: flag runs whose foreign_cpu_frac exceeds it (1: none)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.logs is not None and len(args.logs) != len(args.results):
        parser.error(
            f"--logs has {len(args.logs)} path(s), --results {len(args.results)}: "
            "give one log per result, in the same order"
        )

    log_paths = args.logs
    if args.log_dir is not None:
        log_paths = [result_files.log_path(args.log_dir, path) for path in args.results]
    pairs, absent = result_files.read_grid(
        args.results, log_paths, allow_missing=args.allow_missing, dataset=args.dataset
    )
    summary = diagnosis.check_environment(
        _summary_frame([*(result for _, result in pairs), *absent]), results.read_json(args.env)
    )
    summary = diagnosis.add_ceiling(summary, args.ceilings)
    summary = diagnosis.flag_disturbed(summary, args.foreign_cpu_limit)
    summary = add_scaling_efficiency(summary)
    curves = collect_curves((result_files.steps_path(path), result) for path, result in pairs)
    results.write_text(args.summary, _frame_csv(summary))
    results.write_text(args.curves, _frame_csv(curves))
    if args.by_point:
        eliminated = result_files.read_eliminated(args.rounds)
        by_point = point_table.summarize_points(summary, eliminated)
        results.write_text(args.by_point, _frame_csv(by_point))
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
