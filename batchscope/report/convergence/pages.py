"""The convergence report's pages: ``convergence.md`` and ``convergence.html`` (the same
content, built once as blocks), and ``convergence.json``, the same findings machine-readable for
``batchscope.report.recommend.build --convergence`` (``write_findings`` says what it holds).

Per model: its introduction, the figures, the recommendation, the per-batch-size table and the
notes on the critical batch size (``batchscope.report.convergence.notes`` writes the words); at
the end, how to read it all. Plain pandas: no plotting, no torch.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import outputs, results
from batchscope.report.convergence.figures import FIGURES_TEXT
from batchscope.report.convergence.fits import Knee
from batchscope.report.convergence.notes import (
    HOW_TO_READ,
    critical_batch_notes,
    evidence_table,
    intro,
    position,
    position_text,
)
from batchscope.report.convergence.prediction_table import document_notes as prediction_notes
from batchscope.report.convergence.prediction_table import document_table as prediction_table
from batchscope.report.convergence.tables import (
    ModelReport,
    NoiseScale,
    candidates,
    highest_throughput,
    regime_groups,
)
from batchscope.report.documents import html_page, html_table, markdown_table

#: File names of the documents and the findings (the table of outputs has their paths).
MARKDOWN, HTML, FINDINGS = (
    os.path.basename(path)
    for path in (
        outputs.CONVERGENCE_MARKDOWN,
        outputs.CONVERGENCE_HTML,
        outputs.CONVERGENCE_FINDINGS,
    )
)

#: Bumped whenever a key of ``convergence.json`` changes meaning. 2: a batch entry's
#: ``batch_size`` is the micro-batch (as everywhere else) and ``effective_batch_size`` the
#: samples of one update; version 1 had ``batch_size`` (effective) and ``micro_batch_size``
#: (``upgrade_findings`` reads it).
FINDINGS_VERSION = 2


# --------------------------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------------------------


def _blocks(reports: Sequence[ModelReport]) -> list[tuple[str, Any]]:
    """The document as (kind, content) blocks that both renderers write."""
    blocks: list[tuple[str, Any]] = [("h1", "batchscope convergence report")]
    if not reports:
        blocks.append(("p", "No training runs in this sweep."))
    for report in reports:
        blocks += [("h2", report.title), ("p", intro(report))]
        if report.metric is not None:
            blocks.append(("p", FIGURES_TEXT))
        blocks += [("h3", "Recommendation"), ("p", report.recommendation)]
        if report.metric is None:
            continue
        blocks += [
            ("h3", "Steps, samples and seconds to the target"),
            (
                "p",
                "Mean over the seeds that reached the target [95% Student-t interval]; "
                "'reached' counts seeds that reached it out of all seeds, with any that failed "
                "(seed:status); seconds are on the clock, evaluations excluded; ★ is the "
                "recommendation.",
            ),
            ("table", evidence_table(report)),
            ("h3", "Critical batch size"),
            ("ul", critical_batch_notes(report)),
        ]
        if report.prediction is not None and not report.prediction.empty:
            blocks += [
                ("h3", "Prediction from short runs (train.predict)"),
                (
                    "p",
                    "Steps and seconds to the target predicted at every batch size from "
                    "full-length runs at the calibration batch size(s) (train.predict_calibration"
                    "; run: full) and short runs at every batch size (throughput, noise scale), "
                    "beside the measured seconds "
                    "where runs went to the target; ★ is the predicted best. See "
                    "prediction.csv and convergence_prediction.png.",
                ),
                ("table", prediction_table(report.prediction)),
                ("ul", prediction_notes(report.prediction)),
            ]
    blocks.append(("p", HOW_TO_READ))
    return blocks


def render_markdown(reports: Sequence[ModelReport]) -> str:
    """The report as Markdown."""
    out = []
    for kind, content in _blocks(reports):
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + content)
        elif kind == "p":
            out.append(content)
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in content))
        else:
            out.append(markdown_table(content))
        out.append("")
    return "\n".join(out)


def render_html(reports: Sequence[ModelReport]) -> str:
    """The report as a standalone HTML page (the same content as the Markdown)."""
    esc = html.escape
    parts = []
    for kind, content in _blocks(reports):
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{esc(content)}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{esc(content)}</p>")
        elif kind == "ul":
            parts += ["<ul>", *[f"<li>{esc(item)}</li>" for item in content], "</ul>"]
        else:
            parts.append(html_table(content))
    return html_page("batchscope convergence report", parts)


# --------------------------------------------------------------------------------------------
# The findings, machine-readable (convergence.json)
# --------------------------------------------------------------------------------------------


def _float(value: Any) -> float | None:
    """A number for JSON: None when missing (NaN and ±inf become null in ``write_json``)."""
    return None if value is None or pd.isna(value) else float(value)


def _text(value: Any) -> str | None:
    """A text cell for JSON: None when missing or empty."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def _quantity(row: Mapping[str, Any], quantity: str) -> dict[str, Any]:
    return {
        "mean": _float(row[f"{quantity}_mean"]),
        "low": _float(row[f"{quantity}_low"]),
        "high": _float(row[f"{quantity}_high"]),
        "values": [float(v) for v in row[f"{quantity}_values"]],
    }


def _batch_findings(row: Mapping[str, Any]) -> dict[str, Any]:
    """One row of a model's table (``batch_table``), as JSON-ready values."""
    batch, effective = int(row["batch_size"]), int(row["effective_batch_size"])
    return {
        "batch_size": batch,
        "effective_batch_size": effective,
        "accumulation_steps": effective // batch,
        "n_seeds": int(row["n_seeds"]),
        "n_reached": int(row["n_reached"]),
        "n_not_reached": int(row["n_not_reached"]),
        "n_failed": int(row["n_failed"]),
        "failures": _text(row["failures"]),
        "all_reached": bool(row["all_reached"]),
        "lr": _float(row["lr"]),
        "base_lr": _float(row["base_lr"]),
        "lr_scaling": _text(row["lr_scaling"]),
        "samples_per_s": _float(row["samples_per_s"]),
        "seconds_to_target": _quantity(row, "seconds"),
        "steps_to_target": _quantity(row, "steps"),
        "samples_to_target": _quantity(row, "samples"),
        "budget_steps": [float(v) for v in row["budget_steps"]],
        "regime": _text(row["regime"]),
    }


def _best_findings(report: ModelReport) -> dict[str, Any] | None:
    """The recommended batch size's entry, with where it sits (None when none is)."""
    if report.best is None:
        return None
    effective = report.best["effective_batch_size"]
    where = position(effective, report)
    return _batch_findings(report.best) | {
        "position": where | {"text": position_text(effective, report)}
    }


def _b_simple_findings(noise: NoiseScale | None) -> dict[str, Any] | None:
    if noise is None:
        return None
    return {
        "value": noise.median,
        "low": _float(noise.low),
        "high": noise.high,  # inf (an open upper bound) becomes null
        "smallest": noise.smallest,
        "largest": noise.largest,
        "n_runs": noise.n_runs,
        "n_unusable": noise.n_unusable,
    }


def _knee_findings(fitted: Knee | None) -> dict[str, Any] | None:
    if fitted is None:
        return None
    return {
        "b_noise": fitted.b_noise,
        "edge": fitted.edge,
        "interval": list(fitted.interval) if fitted.interval is not None else None,
        "s_min": fitted.s_min,
        "rms_log_residual": fitted.rms_log_residual,
        "fitted_batch_sizes": [int(b) for b, _ in fitted.points],
    }


def findings(report: ModelReport) -> dict[str, Any]:
    """What the report found for one model, as JSON-ready values (see ``write_findings``)."""
    table = report.table
    effective = table["effective_batch_size"]
    top = highest_throughput(table)
    return {
        "mode": "train",
        "model": report.model,
        "dataset": report.dataset,
        "accumulation_steps": report.accumulation,
        "num_workers": report.workers,
        "other_workers": list(report.other_workers),
        "target": None
        if report.metric is None
        else {"metric": report.metric, "value": report.target, "text": report.target_text},
        "best": _best_findings(report),
        "candidates": [int(b) for b in candidates(table)["effective_batch_size"]],
        "highest_throughput": _batch_findings(top) if top is not None else None,
        "b_simple": _b_simple_findings(report.noise),
        "knee": _knee_findings(report.knee),
        "knee_note": report.knee_note,
        "regimes": regime_groups(report) if report.knee is not None else None,
        "never_reached": [int(b) for b in effective[table["n_reached"] == 0]],
        "partly_reached": [
            int(b) for b in effective[(table["n_reached"] > 0) & ~table["all_reached"]]
        ],
        "batches": [_batch_findings(row) for row in table.to_dict("records")],
        "recommendation": report.recommendation,
        "prediction": _prediction_findings(report.prediction),
    }


def _prediction_findings(rows: pd.DataFrame | None) -> dict[str, Any] | None:
    """train.predict's best batch size and its seconds to the target (None without one)."""
    if rows is None or rows.empty or not rows["predicted_best"].astype(bool).any():
        return None
    best = rows[rows["predicted_best"].astype(bool)].iloc[0]
    return {
        "best": int(best["effective_batch_size"]),
        "seconds": _float(best["predicted_seconds_to_target"]),
        "seconds_ci95": [
            _float(best["predicted_seconds_low"]),
            _float(best["predicted_seconds_high"]),
        ],
        "device_seconds": _float(best["device_seconds"]),
    }


def upgrade_findings(document: Mapping[str, Any]) -> dict[str, Any]:
    """``convergence.json`` as this version writes it, from this version or version 1 (whose
    batch entries had ``batch_size`` effective and ``micro_batch_size``); ValueError naming the
    version for any other."""
    version = document.get("version")
    if version == FINDINGS_VERSION:
        return dict(document)
    if version != 1:
        raise ValueError(
            f"convergence.json has version {version!r}; this code reads {FINDINGS_VERSION} and 1"
        )

    def entry(old: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if old is None:
            return None
        new = {k: v for k, v in old.items() if k != "micro_batch_size"}
        return new | {
            "batch_size": old["micro_batch_size"],
            "effective_batch_size": old["batch_size"],
        }

    groups = [
        dict(group)
        | {
            "best": entry(group.get("best")),
            "highest_throughput": entry(group.get("highest_throughput")),
            "batches": [entry(e) for e in group.get("batches", [])],
        }
        for group in document.get("groups", [])
    ]
    return dict(document) | {"version": FINDINGS_VERSION, "groups": groups}


def write_findings(reports: Sequence[ModelReport], path: str | Path) -> None:
    """Write ``convergence.json``: ``{"version", "document", "groups": [...]}``, one group per
    model x dataset of the report (mode ``train``), each ``findings(report)``.

    A group: ``mode``, ``model``, ``dataset``, ``accumulation_steps`` (of every run in it),
    ``num_workers`` (the worker count the report
    uses) and ``other_workers``; ``target`` (``metric``, ``value``, ``text``; null without one);
    ``best``, the batch size with the lowest mean seconds to the target among ``candidates``
    (those every seed reached), null when none: a batch entry plus ``position`` (``b_simple`` and
    ``knee``: ``below``, ``around`` or ``above``, null when unmeasured or not fitted; ``regime``;
    ``text``, the report's sentence); ``highest_throughput`` (a batch entry); ``b_simple``
    (``value``, the median over runs, ``low``, ``high`` (null: open), ``smallest``, ``largest``,
    ``n_runs``, ``n_unusable``; null when not measured); ``knee`` (``b_noise``, null when the fit
    lies at the search's ``edge``, ``above`` or ``below``; ``interval``, bootstrap 95% [low,
    high], an end 0 or null (infinite) when resamples hit the edges; ``s_min``,
    ``rms_log_residual``, ``fitted_batch_sizes``; null when not fitted), ``knee_note``;
    ``regimes`` (regime: batch sizes); ``never_reached`` (no seed reached the target, whether
    they ran short of it or failed) and ``partly_reached`` batch sizes; ``batches`` (every
    batch entry); ``recommendation`` (the report's text).

    A batch entry: ``batch_size`` (the micro-batch), ``effective_batch_size`` (micro-batch ×
    ``accumulation_steps``, the samples of one update; the lists of batch sizes above hold these),
    seed counts (``n_seeds``, ``n_reached``, ``n_not_reached``, ``n_failed``, ``failures``),
    ``all_reached``, ``lr`` (the effective learning rate), ``base_lr``, ``lr_scaling``,
    ``samples_per_s``, ``seconds_to_target``, ``steps_to_target`` and ``samples_to_target``
    (``mean``, 95% Student-t ``low`` and ``high``, per-seed ``values``), ``budget_steps`` and
    ``regime``.
    """
    results.write_json(
        path,
        {
            "version": FINDINGS_VERSION,
            "document": HTML,
            "groups": [findings(report) for report in reports],
        },
    )
