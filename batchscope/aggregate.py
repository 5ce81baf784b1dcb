"""Gather per-run result files into two tidy tables: a summary and the step curves.

``collect`` turns one result JSON per grid point into one row per grid point; ``collect_curves``
stacks the per-step CSVs with the grid keys added, so every step row says where it came from.
``check_environment`` compares each row's environment fingerprint with the captured environment
and flags (does not reject) rows measured elsewhere.

Command line (every path is explicit; the steps CSV sits next to each result JSON)::

    python -m batchscope.aggregate --results a.json b.json ... \\
        --env results/env/environment.json \\
        --summary results/summary.csv --curves results/curves.csv

This module imports pandas only, never a plotting library.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope import results

#: The columns a reader looks at first, in this order; every other result key follows.
FIRST_COLUMNS = (
    "mode",
    "model",
    "dataset",
    "batch_size",
    "num_workers",
    "seed",
    "device",
    "status",
    "samples_per_s",
    "step_time_ms_p50",
    "peak_mem_mb",
    "data_wait_frac",
    "final_loss",
    "val_accuracy",
    "env_fingerprint",
)

#: Order of the rows: by grid point, seeds last.
SORT_KEYS = ["mode", "model", "batch_size", "num_workers", "seed"]

#: Keys a result must carry for its row to mean anything.
REQUIRED_KEYS = (*results.GRID_KEYS, "status", "env_fingerprint", "schema_version")

#: Column added by ``check_environment``.
ENV_MATCH_COLUMN = "env_matches_capture"


def steps_path(result_path: str | Path) -> Path:
    """The steps CSV written next to a result JSON: ``x.json`` -> ``x.steps.csv``."""
    path = Path(result_path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: a result file must end in .json")
    return path.with_suffix(".steps.csv")


def read_results(result_paths: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Read and validate result JSONs; returns ``(path, result)`` pairs in input order.

    Raises ``ValueError`` for a missing key, an unknown status, another schema version, or two
    files for the same grid point (a sweep measures each point once per seed).
    """
    pairs = []
    seen: dict[tuple, Path] = {}
    for raw_path in result_paths:
        path = Path(raw_path)
        result = results.read_json(path)
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
        grid = tuple(result[key] for key in results.GRID_KEYS)
        if grid in seen:
            point = ", ".join(f"{k}={v}" for k, v in zip(results.GRID_KEYS, grid, strict=True))
            raise ValueError(f"duplicate grid point ({point}) in {seen[grid]} and {path}")
        seen[grid] = path
        pairs.append((path, result))
    return pairs


def _summary_frame(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per record, FIRST_COLUMNS first, then other keys in first-seen order."""
    columns = list(FIRST_COLUMNS)
    for record in records:
        columns.extend(key for key in record if key not in columns)
    frame = pd.DataFrame.from_records(list(records), columns=columns)
    return frame.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def collect(result_paths: Iterable[str | Path]) -> pd.DataFrame:
    """The summary table: one row per result file, sorted by mode, model, batch_size, num_workers,
    seed. Duplicate grid points raise ``ValueError``."""
    return _summary_frame([result for _, result in read_results(result_paths)])


def collect_curves(
    steps_paths_with_grid: Iterable[tuple[str | Path, Mapping[str, Any]]],
) -> pd.DataFrame:
    """All rows of the given steps CSVs, each with the grid keys of its run in front.

    ``steps_paths_with_grid`` holds ``(steps_csv_path, grid)`` pairs, where ``grid`` is any mapping
    with the GRID_KEYS (a whole result dict will do). A run that stopped before its first step
    contributes no rows. Rows are sorted by grid point, then step.
    """
    columns = [*results.GRID_KEYS, *results.STEP_COLUMNS]
    frames = []
    for raw_path, grid in steps_paths_with_grid:
        steps = pd.read_csv(raw_path)
        missing = [c for c in results.STEP_COLUMNS if c not in steps.columns]
        if missing:
            raise ValueError(f"{raw_path}: steps CSV lacks column(s) {', '.join(missing)}")
        if steps.empty:
            continue
        for key in results.GRID_KEYS:
            steps[key] = grid[key]
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
    the numbers are still real, only measured in another environment than the one captured.
    """
    stream = sys.stderr if stream is None else stream
    expected = env["fingerprint"]
    checked = summary.copy()
    matches = checked["env_fingerprint"] == expected
    position = checked.columns.get_loc("env_fingerprint") + 1
    checked.insert(position, ENV_MATCH_COLUMN, matches.astype(bool))
    if not matches.all():
        odd = checked.loc[~matches]
        found = ", ".join(sorted(str(f) for f in odd["env_fingerprint"].unique()))
        points = "; ".join(
            " ".join(f"{k}={row[k]}" for k in results.GRID_KEYS) for _, row in odd.iterrows()
        )
        print(
            f"WARNING: {len(odd)} of {len(checked)} results have env fingerprint(s) {found}, "
            f"not the captured {expected}: {points}",
            file=stream,
        )
    return checked


def _frame_csv(frame: pd.DataFrame) -> str:
    return frame.to_csv(index=False, lineterminator="\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.aggregate",
        description="Gather per-run result JSONs (and their steps CSVs) into summary/curves CSVs.",
    )
    parser.add_argument("--results", nargs="+", required=True, help="result JSON files")
    parser.add_argument("--env", required=True, help="captured environment JSON")
    parser.add_argument("--summary", required=True, help="output: one row per grid point (CSV)")
    parser.add_argument("--curves", required=True, help="output: every step of every run (CSV)")
    args = parser.parse_args(argv)

    pairs = read_results(args.results)
    summary = check_environment(
        _summary_frame([result for _, result in pairs]), results.read_json(args.env)
    )
    curves = collect_curves((steps_path(path), result) for path, result in pairs)
    results.write_text(args.summary, _frame_csv(summary))
    results.write_text(args.curves, _frame_csv(curves))
    print(f"aggregated {len(summary)} results, {len(curves)} steps", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
