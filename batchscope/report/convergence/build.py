"""Convergence report: how many steps, samples and seconds each batch size needs to reach the
training target, across seeds, and where the critical batch size lies.

From the sweep's ``summary.csv`` and ``curves.csv`` (``batchscope.report.summary.aggregate``), per
model (training runs only, one DataLoader worker count: see ``chosen_workers``), this writes

- ``convergence_steps.png``: steps to the target vs effective batch size on log-log axes, with
  the fitted curve S = S_min (1 + B_noise/B), its regimes, the knee B_noise and the measured
  gradient noise scale B_simple;
- ``convergence_loss_samples.png`` and ``convergence_loss_time.png``: training and validation
  loss vs samples seen and vs seconds on the clock, one line per batch size;
- ``convergence_noise_scale.png``: B_simple over training, per batch size, with its interval;
- ``convergence.md`` and ``convergence.html``: the per-batch-size table, B_simple, the knee and
  the regimes, the recommendation (the batch size with the lowest time to target) and how to
  read it all;
- ``convergence.json``: the same findings, machine-readable (``write_findings``), for
  ``batchscope.report.recommend.build --convergence``.

This module is the entry point: ``analyse`` puts a model's report together and ``write_all``
writes it. The work lives in

- ``convergence_tables``: the runs, the per-batch-size table, the headline B_simple;
- ``convergence_fits``: the knee fit, the regimes, B_simple over training (the method);
- ``convergence_notes``: the recommendation and every other sentence;
- ``convergence_figures``: the four figures;
- ``convergence_pages``: the Markdown and HTML documents and ``convergence.json``.

Command line::

    python -m batchscope.report.convergence.build --summary results/summary.csv \\
        --curves results/curves.csv --outdir results/convergence

These modules need pandas, NumPy, matplotlib and seaborn, never torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from batchscope.core import results
from batchscope.report import command
from batchscope.report.convergence.figures import all_figures
from batchscope.report.convergence.fits import fit_table, local_slopes, regime_of
from batchscope.report.convergence.notes import recommend
from batchscope.report.convergence.pages import (
    FINDINGS,
    HTML,
    MARKDOWN,
    render_html,
    render_markdown,
    write_findings,
)
from batchscope.report.convergence.prediction_table import best_line
from batchscope.report.convergence.tables import (
    ModelReport,
    batch_table,
    chosen_workers,
    eval_spacing,
    noise_scale,
    prepare,
    run_curves,
    target_of,
)
from batchscope.report.figures import save_png


def analyse(summary: pd.DataFrame, curves: pd.DataFrame | None = None) -> list[ModelReport]:
    """One report per model x dataset x accumulation steps with training runs, sorted by those
    (runs of one effective batch made of different micro-batches are not pooled). With
    ``curves``, each report also knows how often its runs evaluated (``eval_every``)."""
    if summary.empty or "mode" not in summary:
        return []
    frame = prepare(summary)
    train = frame[frame["mode"] == "train"]
    reports = []
    keys = ["model", "dataset", "accumulation_steps"]
    for (model, dataset, accumulation), rows in train.groupby(keys, sort=True):
        report = _model_report(str(model), str(dataset), int(accumulation), rows)
        if curves is not None:
            report.eval_every = eval_spacing(run_curves(curves, summary, report))
        reports.append(report)
    return reports


def _model_report(model: str, dataset: str, accumulation: int, rows: pd.DataFrame) -> ModelReport:
    """One model's report from its training runs: the chosen worker count's table, the knee,
    each batch size's regime and measured slope, B_simple and the recommendation."""
    workers = chosen_workers(rows)
    others = tuple(sorted(int(w) for w in set(rows["num_workers"]) - {workers}))
    rows = rows[rows["num_workers"] == workers]
    metric, target = target_of(rows)
    table = batch_table(rows)
    knee, knee_note = fit_table(table) if metric is not None else (None, "No target configured.")
    ran = table["n_failed"] < table["n_seeds"]  # a batch size no seed ran has no regime
    table["regime"] = [
        regime_of(b, knee) if knee is not None and r else None
        for b, r in zip(table["effective_batch_size"], ran, strict=True)
    ]
    table["slope_to_next"] = local_slopes(table)
    report = ModelReport(
        model=model,
        dataset=dataset,
        workers=workers,
        other_workers=others,
        metric=metric,
        target=target,
        table=table,
        knee=knee,
        knee_note=knee_note,
        noise=noise_scale(rows),
        best=None,
        recommendation="",
        accumulation=accumulation,
    )
    report.best, report.recommendation = recommend(report)
    return report


def write_all(
    summary: pd.DataFrame,
    curves: pd.DataFrame,
    outdir: str | Path,
    prediction: pd.DataFrame | None = None,
) -> list[ModelReport]:
    """Analyse, and write every figure, both documents and the findings into ``outdir``. With
    ``prediction`` (prediction.csv, train.predict), the measured tables keep only the
    full-length runs and each model's report carries its prediction."""
    outdir = Path(outdir)
    if prediction is not None:
        summary = full_length_runs(summary, prediction)
    reports = analyse(summary, curves)
    if prediction is not None:
        for report in reports:
            rows = prediction[prediction["model"] == report.model]
            report.prediction = rows
            if not rows.empty:
                report.recommendation += " " + best_line(rows)
    for name, fig in all_figures(reports, summary, curves).items():
        save_png(fig, outdir / name)
        plt.close(fig)
    results.write_text(outdir / MARKDOWN, render_markdown(reports))
    results.write_text(outdir / HTML, render_html(reports))
    write_findings(reports, outdir / FINDINGS)
    return reports


def full_length_runs(summary: pd.DataFrame, prediction: pd.DataFrame) -> pd.DataFrame:
    """The summary without train.predict's short runs (the batch sizes prediction.csv marks as
    not calibration): they stop before the target by design."""
    frame = prepare(summary)
    short = prediction[~prediction["calibration"].astype(bool)]
    keys = set(zip(short["model"], short["effective_batch_size"].astype(int), strict=True))
    effective = frame["effective_batch_size"]
    drop = [
        mode == "train" and (model, int(batch)) in keys
        for mode, model, batch in zip(frame["mode"], frame["model"], effective, strict=True)
    ]
    return summary[~pd.Series(drop, index=summary.index)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = command.parser(
        "batchscope.report.convergence.build",
        "Steps to target vs batch size, B_simple, the knee and a recommendation.",
        curves=True,
    )
    parser.add_argument("--outdir", required=True, help="folder for the figures and documents")
    parser.add_argument("--prediction", help="prediction.csv (train.predict)")
    args = parser.parse_args(argv)
    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves, low_memory=False)
    prediction = pd.read_csv(args.prediction) if args.prediction else None
    for report in write_all(summary, curves, args.outdir, prediction):
        print(f"{report.model}: {report.recommendation}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
