"""What a row's numbers say about how it was measured: its diagnosis and its flags.

Diagnosis (``diagnose``): a point that ran ok is ``input``-bound when it spent more than
``INPUT_BOUND_FRAC`` of its measured step time waiting for data, else ``compute``-bound. An
input-bound point's ``stall_removed_by_workers`` is the smallest larger worker count at the
same mode, model, dataset, batch size (and seed, in the summary) whose point is compute-bound,
or ``none``.

Flags: ``check_environment`` compares each row's environment fingerprint with the captured
environment and flags (does not reject) rows measured elsewhere; ``add_ceiling`` holds each row
against its compute-only ceiling; ``flag_disturbed`` marks runs measured beside other work or
above their ceiling.

This module imports pandas only, never a plotting library (nor torch).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import results, verdict
from batchscope.report.summary.result_files import POINT_COLUMNS

#: Column added by ``check_environment``.
ENV_MATCH_COLUMN = "env_matches_capture"

#: Share of the measured step time spent waiting for data above which a point is input-bound.
INPUT_BOUND_FRAC = 0.2

#: ``stall_removed_by_workers`` of an input-bound point that no larger worker count fixed.
NO_WORKERS = "none"


def _bound(status: Any, wait: Any) -> str | None:
    if status != "ok" or pd.isna(wait):
        return None
    return "input" if float(wait) > INPUT_BOUND_FRAC else "compute"


def diagnose(
    frame: pd.DataFrame, wait_column: str = "data_wait_frac", status_column: str = "status"
) -> pd.DataFrame:
    """A copy of ``frame`` with ``bound`` and ``stall_removed_by_workers`` set per row.

    Rows are compared with the rows that share every key column except ``num_workers`` (the
    GRID_KEYS and POINT_COLUMNS present in ``frame``): an input-bound row gets the smallest larger
    worker count among them that is compute-bound, or ``none``. Rows that did not run ok get
    neither (empty).
    """
    out = frame.copy()
    waits = pd.to_numeric(out[wait_column]) if wait_column in out else pd.Series(index=out.index)
    out["bound"] = [_bound(s, w) for s, w in zip(out[status_column], waits, strict=True)]
    out["stall_removed_by_workers"] = pd.Series(None, index=out.index, dtype=object)
    if out.empty:
        return out
    keys = [k for k in dict.fromkeys([*results.GRID_KEYS, *POINT_COLUMNS]) if k in out]
    keys.remove("num_workers")
    for _, group in out.groupby(keys, sort=False, dropna=False):
        fixed = sorted(int(w) for w in group.loc[group["bound"] == "compute", "num_workers"])
        for index in group.index[group["bound"] == "input"]:
            workers = int(out.at[index, "num_workers"])
            larger = [w for w in fixed if w > workers]
            out.at[index, "stall_removed_by_workers"] = larger[0] if larger else NO_WORKERS
    return out


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
