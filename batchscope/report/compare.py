"""Compare two result folders: what differs in the environment, and which metrics moved by more
than the measurement noise.

    python -m batchscope compare results-a results-b     (folders holding summary.csv and env/)

The seed articles' story is the use case: an accuracy drop at one batch size that was really an
OpenBLAS-vs-MKL difference. Environment differences are listed first, so a metric difference is
read with its likely cause beside it.
"""

from __future__ import annotations

import math
import numbers
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import results
from batchscope.core.results import GRID_KEYS
from batchscope.report.summary.result_files import with_grid_defaults

#: Keys of environment.json not worth comparing (they differ on every run).
_VOLATILE = ("executable", "hostname", "conda_env_export", "torch_config", "torch_parallel_info")

#: Per-run settings that, when they differ, explain a metric difference.
SETTING_COLUMNS = ("device", "torch_threads", "omp_num_threads", "deterministic", "env_fingerprint")

#: Metrics compared, with the noise model of each (see :func:`_noise`).
METRICS = ("samples_per_s", "step_time_ms_p50", "peak_mem_mb", "final_loss", "val_accuracy")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            out.update(_flatten(sub, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _packages(env: Mapping[str, Any]) -> dict[str, str]:
    """name -> version from ``pip freeze`` lines (``name==version``), lower-cased names."""
    out = {}
    for line in env.get("pip_freeze") or []:
        name, sep, version = line.partition("==")
        if sep:
            out[name.lower()] = version
    return out


def environment_diff(env_a: Mapping[str, Any], env_b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every environment key (packages from ``pip freeze`` included) whose value differs."""
    flat_a = {k: v for k, v in _flatten(env_a).items() if not k.startswith(_VOLATILE)}
    flat_b = {k: v for k, v in _flatten(env_b).items() if not k.startswith(_VOLATILE)}
    flat_a.pop("pip_freeze", None)
    flat_b.pop("pip_freeze", None)
    for name, version in _packages(env_a).items():
        flat_a[f"pip.{name}"] = version
    for name, version in _packages(env_b).items():
        flat_b[f"pip.{name}"] = version
    rows = []
    for key in sorted(set(flat_a) | set(flat_b)):
        a, b = flat_a.get(key), flat_b.get(key)
        if a != b:
            rows.append({"key": key, "a": a, "b": b})
    return rows


def _windows(value: Any) -> list[float]:
    """A run's window throughputs from a ``summary.csv`` cell (``;``-joined) or a list."""
    if isinstance(value, str):
        return [float(v) for v in value.split(";") if v.strip()]
    if isinstance(value, list | tuple):
        return [float(v) for v in value]
    return []


def _standard_error(metric: str, row: pd.Series, side: str) -> float | None:
    """The standard error of ``metric`` for one run, in the metric's unit; None without a model.

    ``samples_per_s``: of the mean of the run's window throughputs, sd/√k over its k ≥ 2
    windows. ``step_time_ms_p50``: of a sample median of n steps, √(π/2)·σ/√n, σ estimated as
    IQR/1.349 (normal steps, taken as independent). ``val_accuracy``: binomial. All are within
    one run: the variation between processes (see the README's rounds) is not in them.
    """
    value = row.get(f"{metric}_{side}")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if metric == "samples_per_s":
        windows = _windows(row.get(f"samples_per_s_windows_{side}"))
        if len(windows) < 2:
            return None
        return statistics.stdev(windows) / math.sqrt(len(windows))
    if metric == "step_time_ms_p50":
        iqr, n = row.get(f"step_time_ms_iqr_{side}"), row.get(f"measured_steps_{side}")
        if iqr is None or n is None or pd.isna(iqr) or pd.isna(n) or n < 2:
            return None
        return math.sqrt(math.pi / 2) * (iqr / 1.349) / math.sqrt(n)
    if metric == "val_accuracy":
        n = row.get(f"val_samples_{side}")
        if n is None or pd.isna(n) or n <= 0:
            return None
        return math.sqrt(max(value * (1 - value), 1e-12) / n)  # binomial standard error
    return None  # peak memory and the loss: no noise model; any change is reported as it is


def metric_diff(summary_a: pd.DataFrame, summary_b: pd.DataFrame) -> pd.DataFrame:
    """Per grid point and metric: both values, the change, and whether it exceeds the noise.

    ``diff_se`` is the standard error of b - a, √(se_a² + se_b²) from ``_standard_error``;
    ``beyond_noise`` is True when |b - a| exceeds twice it, False when it does not, and empty
    when the metric has no noise model.
    """
    keep = [
        *GRID_KEYS,
        "status",
        *METRICS,
        "samples_per_s_windows",
        "step_time_ms_iqr",
        "measured_steps",
        "val_samples",
        *SETTING_COLUMNS,
    ]
    a, b = with_grid_defaults(summary_a), with_grid_defaults(summary_b)
    a = a[[c for c in keep if c in a]]
    b = b[[c for c in keep if c in b]]
    merged = a.merge(b, on=list(GRID_KEYS), how="outer", suffixes=("_a", "_b"), indicator=True)
    rows = []
    for _, row in merged.iterrows():
        grid = {key: row[key] for key in GRID_KEYS}
        if row["_merge"] != "both":
            only = "a" if row["_merge"] == "left_only" else "b"
            rows.append({**grid, "metric": "(grid point)", "note": f"only in {only}"})
            continue
        settings = [
            f"{c}: {row[f'{c}_a']} -> {row[f'{c}_b']}"
            for c in SETTING_COLUMNS
            if f"{c}_a" in row and str(row[f"{c}_a"]) != str(row[f"{c}_b"])
        ]
        if row["status_a"] != row["status_b"]:
            rows.append({**grid, "metric": "status", "a": row["status_a"], "b": row["status_b"],
                         "beyond_noise": True, "note": "; ".join(settings)})  # fmt: skip
        for metric in METRICS:
            va, vb = row.get(f"{metric}_a"), row.get(f"{metric}_b")
            if va is None or vb is None or pd.isna(va) or pd.isna(vb) or va == vb:
                continue
            na, nb = _standard_error(metric, row, "a"), _standard_error(metric, row, "b")
            diff_se = beyond = None
            if na is not None and nb is not None:
                diff_se = math.hypot(na, nb)
                beyond = bool(abs(vb - va) > 2 * diff_se)
            rows.append(
                {
                    **grid,
                    "metric": metric,
                    "a": va,
                    "b": vb,
                    "change_pct": 100 * (vb - va) / abs(va) if va else None,
                    "diff_se": diff_se,
                    "beyond_noise": beyond,
                    "note": "; ".join(settings),
                }
            )
    columns = [*GRID_KEYS, "metric", "a", "b", "change_pct", "diff_se", "beyond_noise", "note"]
    return pd.DataFrame(rows, columns=columns)


#: Significant digits kept where a number has no standard error (memory, loss).
PLAIN_DIGITS = 4


def round_to_noise(value: Any, se: float | None) -> str:
    """``value`` as text, to the decimal of the second significant digit of its standard error
    ``se`` (PLAIN_DIGITS significant digits without one): the digits beyond are noise."""
    if value is None or pd.isna(value):
        return ""
    value = float(value)
    if se is None or pd.isna(se) or not math.isfinite(se) or se <= 0:
        return f"{value:.{PLAIN_DIGITS}g}"
    decimals = 1 - math.floor(math.log10(se))
    if decimals > 0:
        return f"{value:.{decimals}f}"
    return f"{round(value, decimals):.0f}"


def metric_table(metrics: pd.DataFrame) -> pd.DataFrame:
    """``metric_diff``'s rows as printed: a and b rounded to the difference's standard error,
    ``change_pct`` to that error in percent of a, the error itself to two significant digits."""
    out = metrics.astype(object).copy()
    for index, row in metrics.iterrows():
        se = row["diff_se"]
        a = row["a"]
        se_pct = None
        numeric = isinstance(a, numbers.Real) and not isinstance(a, bool)
        if numeric and se is not None and not pd.isna(se) and a:
            se_pct = 100 * se / abs(a)
        if numeric:
            out.at[index, "a"] = round_to_noise(a, se)
            out.at[index, "b"] = round_to_noise(row["b"], se)
        out.at[index, "change_pct"] = round_to_noise(row["change_pct"], se_pct)
        out.at[index, "diff_se"] = "" if se is None or pd.isna(se) else f"{float(se):.2g}"
    return out


def _markdown(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "(none)\n"
    frame = frame.astype(object).where(frame.notna(), "")
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body]) + "\n"


def compare(folder_a: str | Path, folder_b: str | Path) -> str:
    """The comparison of two result folders as Markdown."""
    folder_a, folder_b = Path(folder_a), Path(folder_b)
    env_a = results.read_json(folder_a / "env" / "environment.json")
    env_b = results.read_json(folder_b / "env" / "environment.json")
    env_rows = pd.DataFrame(environment_diff(env_a, env_b), columns=["key", "a", "b"])
    metrics = metric_diff(
        pd.read_csv(folder_a / "summary.csv"), pd.read_csv(folder_b / "summary.csv")
    )
    beyond = metric_table(metrics[metrics["beyond_noise"] == True])  # noqa: E712 - None too
    lines = [
        f"# batchscope compare\n\n- a: `{folder_a}` (environment `{env_a.get('fingerprint')}`)",
        f"- b: `{folder_b}` (environment `{env_b.get('fingerprint')}`)\n",
        f"## Environment differences ({len(env_rows)})\n",
        _markdown(env_rows),
        f"## Metric differences beyond the noise ({len(beyond)})\n",
        _markdown(beyond),
        f"## All metric differences ({len(metrics)})\n",
        "`diff_se` is the standard error of b − a, and `beyond_noise` says whether |b − a| exceeds "
        "twice it (empty where the metric has no noise model: memory, loss). These errors are "
        "within one run (samples/s: over its throughput windows; the median step time: from its "
        "IQR and step count; accuracy: binomial): the variation between processes, often larger, "
        "is not in them, so compare points measured in several rounds before trusting a "
        "difference. Numbers are rounded to the second significant digit of `diff_se`.\n",
        _markdown(metric_table(metrics)),
    ]
    return "\n".join(lines)
