"""Turn the sweep's summary table into a recommendation, with its evidence.

``recommend`` picks, per mode x model, the (batch_size, num_workers) with the highest throughput
among runs that finished ok (mean over seeds), compares it with the runner-up against the measured
spread, and lists what failed. ``render_markdown`` and ``render_html`` write the same content as a
document (Markdown for people, standalone HTML for the Snakemake report).

Spread of a configuration: with two or more seeds, the range of samples_per_s over seeds as a
percentage of its mean; with one seed, the step-time interquartile range as a percentage of the
median step time. The runner-up is "within noise" when its gap to the best is smaller than the
larger of the two spreads.

Command line::

    python -m batchscope.recommend --summary results/summary.csv \\
        --env results/env/environment.json \\
        --markdown results/recommendation.md --html results/recommendation.html
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from batchscope import results

#: A rec is made per distinct value of these (dataset is one per model in a usual sweep).
GROUP_KEYS = ["mode", "model", "dataset"]

#: Spread (%) above which a measurement is called noisy (STYLE: IQR over 10% of the median).
NOISY_PCT = 10.0

#: Data wait share of the step above which the input pipeline is called the bottleneck.
LOADER_BOUND_FRAC = 0.25

NUMERIC_COLUMNS = (
    "batch_size",
    "num_workers",
    "seed",
    "samples_per_s",
    "step_time_ms_p50",
    "step_time_ms_iqr",
    "peak_mem_mb",
    "data_wait_frac",
    "val_accuracy",
    "final_loss",
)

#: Evidence table columns, and how each value is printed.
EVIDENCE_FORMATS = {
    "batch_size": "{:d}",
    "num_workers": "{:d}",
    "seed": "{:d}",
    "status": "{}",
    "samples_per_s": "{:.1f}",
    "step_time_ms_p50": "{:.2f}",
    "step_iqr_pct": "{:.1f}",
    "peak_mem_mb": "{:.0f}",
    "data_wait_frac": "{:.3f}",
    "val_accuracy": "{:.3f}",
    "final_loss": "{:.4f}",
    "note": "{}",
    "error": "{}",
}
TRAIN_ONLY_COLUMNS = ("val_accuracy", "final_loss")

#: Error messages (a CUDA OOM message is long) are cut to this many characters in the table.
ERROR_CHARS = 80


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _prepare(summary: pd.DataFrame) -> pd.DataFrame:
    """Copy with the numeric columns numeric (absent ones as NaN) and ``error`` present."""
    frame = summary.copy()
    for column in NUMERIC_COLUMNS:
        frame[column] = pd.to_numeric(frame[column]) if column in frame else float("nan")
    if "error" not in frame:
        frame["error"] = None
    return frame


def _points(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (batch_size, num_workers) that ran ok, seeds pooled, fastest first."""
    ok = rows[(rows["status"] == "ok") & rows["samples_per_s"].notna()]
    if ok.empty:
        return pd.DataFrame()
    points = (
        ok.assign(iqr_pct=100 * ok["step_time_ms_iqr"] / ok["step_time_ms_p50"])
        .groupby(["batch_size", "num_workers"], as_index=False)
        .agg(
            samples_per_s=("samples_per_s", "mean"),
            samples_per_s_min=("samples_per_s", "min"),
            samples_per_s_max=("samples_per_s", "max"),
            n_seeds=("samples_per_s", "size"),
            iqr_pct=("iqr_pct", "mean"),
            step_time_ms_p50=("step_time_ms_p50", "mean"),
            peak_mem_mb=("peak_mem_mb", "max"),
            data_wait_frac=("data_wait_frac", "mean"),
            val_accuracy=("val_accuracy", "mean"),
            final_loss=("final_loss", "mean"),
        )
    )
    seed_range_pct = (
        100 * (points["samples_per_s_max"] - points["samples_per_s_min"]) / points["samples_per_s"]
    )
    failed = rows[rows["status"] != "ok"].groupby(["batch_size", "num_workers"]).size()
    points = points.merge(failed.rename("n_failed").reset_index(), how="left")
    points["n_failed"] = points["n_failed"].fillna(0).astype(int)
    several = points["n_seeds"] >= 2
    points["spread_pct"] = seed_range_pct.where(several, points["iqr_pct"])
    points["spread_source"] = several.map({True: "seed range", False: "step-time IQR"})
    return points.sort_values(
        ["samples_per_s", "batch_size", "num_workers"], ascending=[False, True, True]
    ).reset_index(drop=True)


def _point(row: pd.Series) -> dict[str, Any]:
    """A plain dict for one pooled configuration (ints as int, NaN as None)."""
    point = {}
    for key, value in row.items():
        if key in ("batch_size", "num_workers", "n_seeds", "n_failed"):
            point[key] = int(value)
        elif isinstance(value, float):
            point[key] = None if math.isnan(value) else float(value)
        else:
            point[key] = value
    return point


def _sorted_sizes(rows: pd.DataFrame, status: str) -> list[int]:
    return sorted({int(b) for b in rows.loc[rows["status"] == status, "batch_size"]})


def _recommend_group(key: tuple, rows: pd.DataFrame) -> dict[str, Any]:
    mode, model, dataset = key
    points = _points(rows)
    best = _point(points.iloc[0]) if len(points) else None
    runner_up = _point(points.iloc[1]) if len(points) > 1 else None
    gap_pct = noise_pct = within_noise = None
    if runner_up:
        gap_pct = 100 * (best["samples_per_s"] / runner_up["samples_per_s"] - 1)
        spreads = [p["spread_pct"] for p in (best, runner_up) if p["spread_pct"] is not None]
        noise_pct = max(spreads) if spreads else None
        within_noise = None if noise_pct is None else gap_pct < noise_pct
    best_accuracy = None
    if mode == "train" and len(points) and points["val_accuracy"].notna().any():
        top = _point(points.loc[points["val_accuracy"].idxmax()])
        if (top["batch_size"], top["num_workers"]) != (best["batch_size"], best["num_workers"]):
            best_accuracy = top
    ok_sizes = _sorted_sizes(rows, "ok")
    rec = {
        "mode": mode,
        "model": model,
        "dataset": dataset,
        "devices": sorted({str(d) for d in rows.get("device", pd.Series()).dropna()}),
        "n_runs": len(rows),
        "n_ok": int((rows["status"] == "ok").sum()),
        "best": best,
        "runner_up": runner_up,
        "gap_pct": gap_pct,
        "noise_pct": noise_pct,
        "within_noise": within_noise,
        "largest_ok_batch_size": ok_sizes[-1] if ok_sizes else None,
        "oom_batch_sizes": _sorted_sizes(rows, "oom"),
        "diverged_batch_sizes": _sorted_sizes(rows, "diverged"),
        "best_accuracy": best_accuracy,
        "env_mismatch_runs": _env_mismatches(rows),
        "evidence": _evidence(rows, best, runner_up, best_accuracy),
    }
    rec["recommendation"] = _sentence(rec)
    rec["notes"] = _notes(rec)
    return rec


def _env_mismatches(rows: pd.DataFrame) -> int:
    if "env_matches_capture" not in rows:
        return 0
    matches = rows["env_matches_capture"].astype(str).str.lower() == "true"
    return int((~matches).sum())


def recommend(summary_df: pd.DataFrame) -> list[dict[str, Any]]:
    """One recommendation dict per mode x model (x dataset), sorted by those keys.

    Keys: mode, model, dataset, devices, n_runs, n_ok; best and runner_up (pooled configuration
    dicts: batch_size, num_workers, samples_per_s, samples_per_s_min/_max over seeds, n_seeds,
    n_failed (runs of it that did not finish ok), spread_pct, spread_source, step_time_ms_p50,
    peak_mem_mb, data_wait_frac, val_accuracy, final_loss; None when absent); gap_pct (best vs
    runner-up, % of the runner-up); noise_pct; within_noise; largest_ok_batch_size;
    oom_batch_sizes; diverged_batch_sizes; best_accuracy (train, only when another configuration
    than the best); env_mismatch_runs; evidence (one dict per run); recommendation (a sentence);
    notes (more sentences).
    """
    if summary_df.empty:
        return []
    frame = _prepare(summary_df)
    return [
        _recommend_group(key, rows)
        for key, rows in frame.groupby(GROUP_KEYS, sort=True, dropna=False)
    ]


def _config(point: Mapping[str, Any]) -> str:
    return f"batch_size={point['batch_size']}, num_workers={point['num_workers']}"


def _pct(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.1f}%"


def _seed_text(point: Mapping[str, Any]) -> str:
    if point["n_seeds"] >= 2:
        return (
            f"mean of {point['n_seeds']} seeds, {point['samples_per_s_min']:.1f}"
            f"-{point['samples_per_s_max']:.1f} samples/s, spread {_pct(point['spread_pct'])}"
        )
    return f"1 seed, step-time IQR {_pct(point['spread_pct'])} of the median"


def _sentence(rec: Mapping[str, Any]) -> str:
    """The one-sentence recommendation (two when the runner-up needs comparing)."""
    best, runner = rec["best"], rec["runner_up"]
    if best is None:
        return (
            f"No grid point ran ok for {rec['mode']} / {rec['model']} "
            f"({rec['n_runs']} runs: {len(rec['oom_batch_sizes'])} batch size(s) hit OOM, "
            f"{len(rec['diverged_batch_sizes'])} diverged), so there is no recommendation."
        )
    text = f"Use {_config(best)}: {best['samples_per_s']:.1f} samples/s ({_seed_text(best)})."
    if runner is None:
        return text + " It is the only configuration that ran ok, so nothing was compared."
    versus = f"the runner-up ({_config(runner)}, {runner['samples_per_s']:.1f} samples/s)"
    if rec["within_noise"] is None:
        return text + f" It is {rec['gap_pct']:.1f}% faster than {versus}; spread unknown."
    if rec["within_noise"]:
        return text + (
            f" But {versus} is within noise: the gap of {rec['gap_pct']:.1f}% is smaller than "
            f"the measured spread of {rec['noise_pct']:.1f}%, so treat them as equal."
        )
    return text + (
        f" It is {rec['gap_pct']:.1f}% faster than {versus}, more than the measured spread "
        f"of {rec['noise_pct']:.1f}%."
    )


def _quality(point: Mapping[str, Any]) -> str:
    acc, loss = point.get("val_accuracy"), point.get("final_loss")
    acc_text = "n/a" if acc is None else f"{acc:.3f}"
    loss_text = "n/a" if loss is None else f"{loss:.4f}"
    return f"validation accuracy {acc_text}, final loss {loss_text}"


def _notes(rec: Mapping[str, Any]) -> list[str]:
    """Supporting facts, one sentence each."""
    notes = []
    largest = rec["largest_ok_batch_size"]
    notes.append(
        f"Largest batch size that ran ok: {largest}." if largest else "No batch size ran ok."
    )
    for status, label in (("oom", "Out of memory (OOM)"), ("diverged", "Diverged")):
        sizes = rec[f"{status}_batch_sizes"]
        if sizes:
            notes.append(f"{label} at batch size(s): {', '.join(str(s) for s in sizes)}.")
    best = rec["best"]
    if best:
        mem = "n/a" if best["peak_mem_mb"] is None else f"{best['peak_mem_mb']:.0f} MB"
        wait = best["data_wait_frac"]
        wait_text = "n/a" if wait is None else f"{wait:.3f} of the step time"
        note = f"At the recommended point: peak memory {mem}, data wait {wait_text}"
        if wait is not None and wait >= LOADER_BOUND_FRAC:
            note += " (the input pipeline is a bottleneck: more workers may help)"
        notes.append(note + ".")
        if best["n_failed"]:
            notes.append(
                f"Caution: {best['n_failed']} other run(s) of the recommended configuration "
                "(other seeds) did not finish ok; see the evidence table."
            )
        if best["spread_pct"] is not None and best["spread_pct"] > NOISY_PCT:
            notes.append(
                f"Its spread ({best['spread_pct']:.1f}%) is over {NOISY_PCT:.0f}%: a noisy "
                "measurement; more measured steps or seeds would firm it up."
            )
        if rec["mode"] == "train":
            notes.append(f"Model quality at the recommended point: {_quality(best)}.")
    top = rec["best_accuracy"]
    if top:
        slower = 100 * (1 - top["samples_per_s"] / best["samples_per_s"])
        notes.append(
            f"Best validation accuracy is at {_config(top)}: {_quality(top)}; "
            f"{top['samples_per_s']:.1f} samples/s, {slower:.1f}% slower than the recommended "
            "point."
        )
    if rec["env_mismatch_runs"]:
        notes.append(
            f"{rec['env_mismatch_runs']} run(s) were measured in another environment than the "
            "captured one (env fingerprint differs)."
        )
    return notes


def _evidence(rows: pd.DataFrame, best, runner_up, best_accuracy) -> list[dict[str, Any]]:
    """Every run of the group, with its step-time IQR in % and a note on the chosen ones."""
    labels: dict[tuple, list[str]] = {}
    for name, point in (("best", best), ("runner-up", runner_up), ("best accuracy", best_accuracy)):
        if point:
            labels.setdefault((point["batch_size"], point["num_workers"]), []).append(name)
    table = rows.sort_values(["batch_size", "num_workers", "seed"]).assign(
        step_iqr_pct=lambda d: 100 * d["step_time_ms_iqr"] / d["step_time_ms_p50"]
    )
    evidence = []
    for _, row in table.iterrows():
        entry = {c: row[c] for c in EVIDENCE_FORMATS if c in row.index}
        entry = {k: None if _is_missing(v) else v for k, v in entry.items()}
        ok = row["status"] == "ok"
        grid = (int(row["batch_size"]), int(row["num_workers"]))
        entry["note"] = ", ".join(labels.get(grid, [])) if ok else ""
        evidence.append(entry)
    return evidence


def _evidence_table(rec: Mapping[str, Any]) -> pd.DataFrame:
    """The evidence as a frame of display strings ("-" where there is no value)."""
    columns = [c for c in EVIDENCE_FORMATS if rec["mode"] == "train" or c not in TRAIN_ONLY_COLUMNS]
    rows = []
    for entry in rec["evidence"]:
        row = {}
        for column in columns:
            value = entry.get(column)
            if _is_missing(value) or value == "":
                row[column] = "-"
            elif EVIDENCE_FORMATS[column] == "{:d}":
                row[column] = str(int(value))
            elif column == "error" and len(str(value)) > ERROR_CHARS:
                row[column] = str(value)[: ERROR_CHARS - 3] + "..."
            else:
                row[column] = EVIDENCE_FORMATS[column].format(value)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _title(rec: Mapping[str, Any]) -> str:
    return f"{rec['mode']} / {rec['model']} ({rec['dataset']})"


def _header(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> list[tuple[str, str]]:
    devices = sorted({d for rec in recs for d in rec["devices"]})
    device = str(env.get("device_name", "unknown"))
    if devices:
        device += f" ({', '.join(devices)})"
    return [
        ("Environment fingerprint", str(env.get("fingerprint", "unknown"))),
        ("Device", device),
        ("torch", str(env.get("torch", "unknown"))),
    ]


def _markdown_table(table: pd.DataFrame) -> str:
    def cells(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    lines = [cells(table.columns), "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += [cells(row) for row in table.itertuples(index=False)]
    return "\n".join(lines)


def render_markdown(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> str:
    """The recommendation as a Markdown document."""
    lines = ["# batchscope recommendation", ""]
    lines += [f"- {name}: `{value}`" for name, value in _header(recs, env)]
    lines.append("")
    if not recs:
        lines += ["No results in this sweep.", ""]
    for rec in recs:
        lines += [f"## {_title(rec)}", "", rec["recommendation"], ""]
        lines += [f"- {note}" for note in rec["notes"]]
        lines += ["", "Evidence (every grid point):", "", _markdown_table(_evidence_table(rec)), ""]
    return "\n".join(lines)


_CSS = """
body { font-family: sans-serif; max-width: 72em; margin: 2em auto; line-height: 1.4; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f0f0f0; }
p.rec { font-size: 1.1em; }
"""


def render_html(recs: Sequence[Mapping[str, Any]], env: Mapping[str, Any]) -> str:
    """The recommendation as a standalone HTML page (same content as the Markdown)."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>batchscope recommendation</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>batchscope recommendation</h1>",
        "<ul>",
        *[f"<li>{esc(name)}: <code>{esc(value)}</code></li>" for name, value in _header(recs, env)],
        "</ul>",
    ]
    if not recs:
        parts.append("<p>No results in this sweep.</p>")
    for rec in recs:
        parts += [
            f"<h2>{esc(_title(rec))}</h2>",
            f'<p class="rec">{esc(rec["recommendation"])}</p>',
            "<ul>",
            *[f"<li>{esc(note)}</li>" for note in rec["notes"]],
            "</ul>",
            "<p>Evidence (every grid point):</p>",
            _evidence_table(rec).to_html(index=False, border=0, escape=True),
        ]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.recommend",
        description="Recommend a batch size and worker count from the sweep's summary.",
    )
    parser.add_argument("--summary", required=True, help="summary CSV from batchscope.aggregate")
    parser.add_argument("--env", required=True, help="captured environment JSON")
    parser.add_argument("--markdown", required=True, help="output Markdown file")
    parser.add_argument("--html", required=True, help="output HTML file")
    args = parser.parse_args(argv)

    recs = recommend(pd.read_csv(args.summary))
    env = results.read_json(args.env)
    results.write_text(args.markdown, render_markdown(recs, env))
    results.write_text(args.html, render_html(recs, env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
