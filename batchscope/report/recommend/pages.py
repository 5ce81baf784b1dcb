"""The recommendation as documents: Markdown for people, a standalone HTML page for the
Snakemake report, with the same content. Per mode x model: the recommendation, its notes, the
time to target (training, with ``--convergence``) and the evidence, every run of the group.

Plain pandas: no plotting, no torch.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from batchscope.core.results import is_missing
from batchscope.report.documents import html_page, html_table, markdown_table
from batchscope.report.recommend.target import TIME_TO_TARGET
from batchscope.report.recommend.text import ERROR_CHARS, short_error

#: Evidence table columns, and how each value is printed.
EVIDENCE_FORMATS = {
    "batch_size": "{:d}",
    "num_workers": "{:d}",
    "seed": "{:d}",
    "status": "{}",
    "samples_per_s": "{:.1f}",
    "window_iqr_pct": "{:.1f}",
    "step_time_ms_p50": "{:.2f}",
    "peak_mem_mb": "{:.0f}",
    "data_wait_frac": "{:.3f}",
    "bound": "{}",
    "val_accuracy": "{:.3f}",
    "final_loss": "{:.4f}",
    "note": "{}",
    "error": "{}",
}
TRAIN_ONLY_COLUMNS = ("val_accuracy", "final_loss")


def evidence(rows: pd.DataFrame, best, runner_up, best_accuracy) -> list[dict[str, Any]]:
    """Every run of the group (failed and missing ones too), with its throughput windows' IQR
    in % of the median and a note on the chosen ones."""
    labels: dict[tuple, list[str]] = {}
    for name, point in (("best", best), ("runner-up", runner_up), ("best accuracy", best_accuracy)):
        if point:
            labels.setdefault((point["batch_size"], point["num_workers"]), []).append(name)
    table = rows.sort_values(["batch_size", "num_workers", "seed"]).assign(
        window_iqr_pct=lambda d: 100 * d["samples_per_s_iqr"] / d["samples_per_s"]
    )
    found = []
    for _, row in table.iterrows():
        entry = {c: row[c] for c in EVIDENCE_FORMATS if c in row.index}
        entry = {k: None if is_missing(v) else v for k, v in entry.items()}
        ok = row["status"] == "ok"
        grid = (int(row["batch_size"]), int(row["num_workers"]))
        entry["note"] = ", ".join(labels.get(grid, [])) if ok else ""
        found.append(entry)
    return found


def _evidence_table(rec: Mapping[str, Any]) -> pd.DataFrame:
    """The evidence as a frame of display strings ("-" where there is no value)."""
    columns = [c for c in EVIDENCE_FORMATS if rec["mode"] == "train" or c not in TRAIN_ONLY_COLUMNS]
    rows = []
    for entry in rec["evidence"]:
        row = {}
        for column in columns:
            value = entry.get(column)
            if is_missing(value) or value == "":
                row[column] = "-"
            elif EVIDENCE_FORMATS[column] == "{:d}":
                row[column] = str(int(value))
            elif column == "error" and len(str(value)) > ERROR_CHARS:
                row[column] = short_error(str(value))
            else:
                row[column] = EVIDENCE_FORMATS[column].format(value)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _title(rec: Mapping[str, Any]) -> str:
    title = f"{rec['mode']} / {rec['model']} ({rec['dataset']})"
    if rec.get("sequence_length") is not None:
        title += f", sequences of {rec['sequence_length']} tokens"
    if rec["accumulation_steps"] != 1:
        steps = rec["accumulation_steps"]
        title += f", {steps} accumulation steps (effective batch = batch_size × {steps})"
    return title


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


def _energy_line(energy: Mapping[str, Any] | None) -> str | None:
    if energy and energy["unavailable"]:
        return f"Energy was not measured: {energy['unavailable']}."
    return None


def render_markdown(
    recs: Sequence[Mapping[str, Any]],
    env: Mapping[str, Any],
    energy: Mapping[str, Any] | None = None,
) -> str:
    """The recommendation as a Markdown document; ``energy``: the figure's path or why there
    is none (``recommend.energy_section``)."""
    lines = ["# batchscope recommendation", ""]
    lines += [f"- {name}: `{value}`" for name, value in _header(recs, env)]
    lines.append("")
    if _energy_line(energy):
        lines += [_energy_line(energy), ""]
    elif energy and energy["path"]:
        lines += [f"![Energy per sample vs throughput]({energy['path']})", ""]
    if not recs:
        lines += ["No results in this sweep.", ""]
    for rec in recs:
        lines += [f"## {_title(rec)}", "", rec["recommendation"], ""]
        lines += [f"- {note}" for note in rec["notes"]]
        lines.append("")
        if rec.get("objectives"):
            lines += ["Per objective:", "", *[f"- {line}" for line in rec["objectives"]], ""]
        if rec.get("time_to_target"):
            lines += [f"### {TIME_TO_TARGET}", ""]
            for paragraph in rec["time_to_target"]["paragraphs"]:
                lines += [paragraph, ""]
        lines += ["Evidence (every grid point):", "", markdown_table(_evidence_table(rec)), ""]
    return "\n".join(lines)


def render_html(
    recs: Sequence[Mapping[str, Any]],
    env: Mapping[str, Any],
    energy: Mapping[str, Any] | None = None,
) -> str:
    """The recommendation as a standalone HTML page (same content as the Markdown, the energy
    figure embedded)."""
    esc = html.escape
    parts = [
        "<h1>batchscope recommendation</h1>",
        "<ul>",
        *[f"<li>{esc(name)}: <code>{esc(value)}</code></li>" for name, value in _header(recs, env)],
        "</ul>",
    ]
    if _energy_line(energy):
        parts.append(f"<p>{esc(_energy_line(energy))}</p>")
    elif energy and energy["uri"]:
        parts.append(f'<img alt="Energy per sample vs throughput" src="{energy["uri"]}">')
    if not recs:
        parts.append("<p>No results in this sweep.</p>")
    for rec in recs:
        parts += [
            f"<h2>{esc(_title(rec))}</h2>",
            f'<p class="rec">{esc(rec["recommendation"])}</p>',
            "<ul>",
            *[f"<li>{esc(note)}</li>" for note in rec["notes"]],
            "</ul>",
        ]
        if rec.get("objectives"):
            parts += ["<p>Per objective:</p>", "<ul>"]
            parts += [f"<li>{esc(line)}</li>" for line in rec["objectives"]]
            parts.append("</ul>")
        if rec.get("time_to_target"):
            parts.append(f"<h3>{esc(TIME_TO_TARGET)}</h3>")
            parts += [f"<p>{esc(p)}</p>" for p in rec["time_to_target"]["paragraphs"]]
        parts += [
            "<p>Evidence (every grid point):</p>",
            html_table(_evidence_table(rec)),
        ]
    return html_page("batchscope recommendation", parts)
