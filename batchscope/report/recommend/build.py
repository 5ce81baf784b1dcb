"""Turn the sweep's summary table into a recommendation, with its evidence.

``recommend`` takes, per mode x model, the (batch_size, num_workers) that
``results/recommendation.json`` picks (``batchscope.report.recommend.answer``: compared across
runs, each its own process), says what its verdict says of the others (separated, a tie and its
rule, or too noisy), diagnoses it (input- or compute-bound, and which worker count removed an input
stall), and lists what failed or is missing. ``render_markdown`` and ``render_html`` write the same
content as a document (Markdown for people, standalone HTML for the Snakemake report).

Spread of a configuration inside the notes, as a percentage of its throughput: with two or more
runs, the half-width of the 95% Student-t confidence interval of their mean; with one, the
interquartile range of its measurement windows' throughputs over their median. It only flags a
noisy point: no comparison between points uses it.

Time to target: throughput is not the whole answer for training. Given the convergence
report's findings (``convergence.json`` of
``batchscope.report.convergence.build``, ``--convergence``),
each training recommendation also names the batch size with the lowest mean time to the
training target and the learning rate it used, compares it with the throughput pick, and says
where it sits relative to the gradient noise scale B_simple and the knee of the steps curve.

This module is the entry point: ``recommend`` puts each group's recommendation together. The
work lives in ``recommend_points`` (the configurations, seeds pooled, and their spread),
``recommend_text`` (the sentence and the notes), ``recommend_target`` (time to target) and
``recommend_pages`` (the evidence and the Markdown and HTML documents).

Command line::

    python -m batchscope.report.recommend.build --summary results/summary.csv \\
        --env results/env/environment.json \\
        --markdown results/recommendation.md --html results/recommendation.html \\
        [--convergence results/convergence/convergence.json] \\
        [--energy-plot results/plots/energy.png]

Energy: each recommendation lists the answer per objective that ``recommendation.json`` gives
(``batchscope.report.recommend.objectives``: fastest, least energy, the time/energy trade-off).
Where any run measured energy, ``--energy-plot`` gets the figure of energy per sample against
throughput (``batchscope.report.recommend.energy_plot``), which the HTML also embeds; where none
did, the document says in one line why energy is unavailable, and the figure (a file the rule
declares) says the same.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import config, results, verdict
from batchscope.report import command
from batchscope.report.convergence.pages import upgrade_findings
from batchscope.report.recommend import answer as answer_module
from batchscope.report.recommend import energy_plot, objectives
from batchscope.report.recommend.pages import evidence, render_html, render_markdown
from batchscope.report.recommend.points import (
    absent_points,
    env_mismatches,
    images_skipped,
    input_pipeline,
    point_dict,
    pooled_points,
    prepare,
    sorted_sizes,
    stall_fixes,
    worker_comparison,
)
from batchscope.report.recommend.target import time_to_target
from batchscope.report.recommend.text import notes, sentence
from batchscope.report.summary import point_table

#: One recommendation per distinct value of these (dataset is one per model in a usual sweep):
#: with several ``accumulation_steps`` (a training axis) each value gets its own, as a plot gets
#: its own panel.
GROUP_KEYS = ["mode", "model", "dataset", "sequence_length", "accumulation_steps", "devices"]


def recommend(
    summary_df: pd.DataFrame,
    convergence: Mapping[str, Any] | None = None,
    document: str = "convergence.html",
    answer: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One recommendation dict per mode x model (x dataset x sequence length x accumulation),
    sorted by those keys.

    Keys: mode, model, dataset, sequence_length (token data; else None), devices, n_runs,
    n_ok; best and runner_up (pooled configuration
    dicts: batch_size, num_workers, samples_per_s (mean over ok runs), samples_per_s_min/_max,
    samples_per_s_ci95_low/_high (two or more runs), samples_per_s_median with its
    samples_per_s_median_ci95_low/_high, samples_per_s_cv, n_rounds, samples_per_s_iqr
    (windows), n_seeds (ok runs: seeds x rounds), n_failed (runs of it that did not finish ok),
    spread_pct, spread_source (a SPREAD_SOURCES key), noisy, bound, stall_removed_by_workers,
    step_time_ms_p50, peak_mem_mb (max over runs), data_wait_frac, val_accuracy, final_loss,
    achieved_tflops, peak_tflops, mfu, flops_per_sample; None when absent); gap_pct (best vs
    runner-up, % of the runner-up); verdict (the answer's entry for the group);
    largest_ok_batch_size; oom_batch_sizes; diverged_batch_sizes; absent_points (failed or
    missing grid points: batch_size, num_workers, seed, status, error); stall_fixes (input-bound
    configurations at the best's batch size whose stall the best's worker count removed);
    workers (``worker_comparison``: the best against fewer and more workers at its batch size);
    images_skipped (unreadable images the image folder's index left out, else 0);
    input_pipeline (an image folder's decoder and preprocessing, as recorded; else None);
    best_accuracy (train, only when another configuration than the best); env_mismatch_runs;
    evidence (one dict per run); recommendation (a sentence); notes (more sentences);
    time_to_target (see ``time_to_target``; None unless ``convergence``, the convergence
    report's findings, has the group: training only). ``document`` is where the text points for
    the convergence report.

    ``answer`` is ``results/recommendation.json`` (``batchscope.report.recommend.answer``): its
    pick is the recommended point (``best``) and its verdict (``verdict``: the answer's entry) what
    the text says of the others; without it, the answer is computed from the summary the same way.
    """
    if summary_df.empty:
        return []
    frame = prepare(summary_df)
    if answer is None:
        by_point = point_table.summarize_points(frame)
        defaults = config.with_defaults({}, config.load_schema(config.SCHEMA_PATH))
        answer = answer_module.document(
            frame,
            by_point,
            verdict.Design.from_config(defaults),
            config.default("sweep.foreign_cpu_limit_frac"),
        )
    answers = answer_module.by_group(answer)
    recs = []
    for key, rows in frame.groupby(GROUP_KEYS, sort=True, dropna=False):
        key = (*key[:3], None if pd.isna(key[3]) else int(key[3]), int(key[4]), int(key[5]))
        recs.append(_recommend_group(key, rows, answers.get(key)))
    groups = {
        (g["mode"], g["model"], g["dataset"], g.get("accumulation_steps", 1)): g
        for g in (convergence or {}).get("groups", [])
    }
    for rec in recs:
        group = groups.get((rec["mode"], rec["model"], rec["dataset"], rec["accumulation_steps"]))
        # the convergence report knows no devices: its findings are the one-device runs'
        use = rec["mode"] == "train" and group is not None and rec["n_devices"] == 1
        rec["time_to_target"] = time_to_target(rec, group, document) if use else None
    return recs


def _recommend_group(key: tuple, rows: pd.DataFrame, answer: Mapping | None) -> dict[str, Any]:
    """The recommendation of one GROUP_KEYS value (see ``recommend`` for its keys)."""
    mode, model, dataset, sequence_length, accumulation, n_devices = key
    points = pooled_points(rows)
    best = runner_up = None
    if len(points) and answer is not None and answer["pick"] is not None:
        pick = (answer["pick"]["batch_size"], answer["pick"]["num_workers"])
        chosen = (points["batch_size"] == pick[0]) & (points["num_workers"] == pick[1])
        best = point_dict(points[chosen].iloc[0])
        others = points[~chosen]
        runner_up = point_dict(others.iloc[0]) if len(others) else None
    best_accuracy = _best_accuracy(points, best) if mode == "train" else None
    ok_sizes = sorted_sizes(rows, "ok")
    rec = {
        "mode": mode,
        "model": model,
        "dataset": dataset,
        "sequence_length": sequence_length,
        "accumulation_steps": int(accumulation),
        "n_devices": int(n_devices),
        "devices": sorted({str(d) for d in rows.get("device", pd.Series()).dropna()}),
        "n_runs": len(rows),
        "n_ok": int((rows["status"] == "ok").sum()),
        "best": best,
        "runner_up": runner_up,
        **_versus_runner_up(best, runner_up),
        "verdict": answer,
        "largest_ok_batch_size": ok_sizes[-1] if ok_sizes else None,
        "oom_batch_sizes": sorted_sizes(rows, "oom"),
        "diverged_batch_sizes": sorted_sizes(rows, "diverged"),
        "absent_points": absent_points(rows),
        "stall_fixes": stall_fixes(points, best) if best else [],
        "workers": worker_comparison(points, best) if best else None,
        "images_skipped": images_skipped(rows),
        "input_pipeline": input_pipeline(rows),
        "best_accuracy": best_accuracy,
        "env_mismatch_runs": env_mismatches(rows),
        "evidence": evidence(rows, best, runner_up, best_accuracy),
    }
    rec["recommendation"] = sentence(rec)
    rec["notes"] = notes(rec)
    rec["objectives"] = objectives.lines(answer)
    return rec


def _versus_runner_up(best, runner_up) -> dict[str, Any]:
    """``gap_pct``: the recommended point's mean throughput vs the fastest other point's, in %
    of the other's (negative when the pick from a tie is the slower); None with no other."""
    gap_pct = None
    if runner_up:
        gap_pct = 100 * (best["samples_per_s"] / runner_up["samples_per_s"] - 1)
    return {"gap_pct": gap_pct}


def _best_accuracy(points: pd.DataFrame, best) -> dict[str, Any] | None:
    """The configuration with the best validation accuracy, when it is not the best's."""
    if best is None or not len(points) or not points["val_accuracy"].notna().any():
        return None  # no best (a disturbed verdict names none): nothing to set beside it
    top = point_dict(points.loc[points["val_accuracy"].idxmax()])
    if (top["batch_size"], top["num_workers"]) != (best["batch_size"], best["num_workers"]):
        return top
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = command.parser(
        "batchscope.report.recommend.build",
        "Recommend a batch size and worker count from the sweep's summary.",
    )
    parser.add_argument("--env", required=True, help="captured environment JSON")
    parser.add_argument(
        "--answer",
        help="results/recommendation.json (batchscope.report.recommend.answer): the pick",
    )
    parser.add_argument("--markdown", required=True, help="output Markdown file")
    parser.add_argument("--html", required=True, help="output HTML file")
    parser.add_argument(
        "--convergence",
        help="convergence.json of batchscope.report.convergence.build: adds, per training group, "
        "the batch size with the lowest time to the target",
    )
    parser.add_argument(
        "--energy-plot",
        help="where to write energy per sample vs throughput (only when energy was measured)",
    )
    args = parser.parse_args(argv)

    convergence, document = None, "convergence.html"
    if args.convergence:
        convergence = upgrade_findings(results.read_json(args.convergence))
        path = Path(args.convergence)
        document = str(path.with_name(convergence.get("document") or path.stem + ".html"))
    answer = results.read_json(args.answer) if args.answer else None
    summary = pd.read_csv(args.summary)
    recs = recommend(summary, convergence, document, answer)
    env = results.read_json(args.env)
    energy = energy_section(summary, args.energy_plot, Path(args.markdown).parent)
    results.write_text(args.markdown, render_markdown(recs, env, energy))
    results.write_text(args.html, render_html(recs, env, energy))
    return 0


def energy_section(summary: pd.DataFrame, plot: str | None, base: Path) -> dict[str, Any]:
    """What the documents say of energy: the figure (written to ``plot``, its path relative to
    ``base`` for the Markdown, a data URI for the HTML), or why there is none (and ``plot``
    a figure that says so, which the documents do not show: the rule declares the file)."""
    from batchscope.report.figures import placeholder_figure, save_png

    figure = energy_plot.energy_figure(summary)
    if figure is None:
        ok = summary[summary["status"] == "ok"] if "status" in summary else summary
        why = objectives.unavailable_reason(ok)
        if plot is not None:  # replaces a figure from an earlier sweep, which is not this one's
            save_png(placeholder_figure(f"Energy was not measured: {why}", wrap=True), plot)
        return {"unavailable": why, "path": None, "uri": None}
    path = None
    if plot is not None:
        save_png(figure, plot)
        path = os.path.relpath(plot, base)
    return {"unavailable": None, "path": path, "uri": energy_plot.png_data_uri(figure)}


if __name__ == "__main__":
    sys.exit(main())
