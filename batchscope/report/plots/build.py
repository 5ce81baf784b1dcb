"""Figures of a sweep, from the summary and curves CSVs that
``batchscope.report.summary.aggregate`` writes.

Each ``*_figure`` function takes DataFrames and returns a matplotlib Figure; ``main`` writes them
all as PNGs with fixed names (``all_figures``). Failed grid points are drawn, not dropped: OOM is
a red "x", diverged an orange triangle, a job that failed a black "X" and a result that is missing
a grey square, at the bottom of the axis, each labelled; heatmap cells and step-time bars say
"OOM", "diverged", "failed" or "missing". A figure with nothing to show says so in words instead
of failing.

Spread: a line's point is the mean over the seeds that ran ok, with the 95% Student-t confidence
interval as error bars when two or more did. For throughput with a single seed the point is the
median of the measurement windows' throughputs and the bar spans median ± IQR/2 of them; a
noisy point (windows' IQR over 10% of the median) is drawn hollow.

This module is the entry point; the figures live in

- ``plots_lines``: throughput, peak memory (with the largest-batch search) and validation
  accuracy vs batch size;
- ``plots_time``: the data-wait heatmap and the step-time breakdown;
- ``plots_loss``: the training-loss curves;
- ``plots_tokens``: token sweeps' peak memory vs batch × sequence length;
- ``plots_panels``: the panels, colours and failure marks they share (and ``figures``, what
  they share with the convergence report's figures).

Command line::

    python -m batchscope.report.plots.build --summary results/summary.csv \\
        --curves results/curves.csv --outdir results/plots \\
        [--maxbatch results/maxbatch/train/small_cnn.json ...]

``--maxbatch`` takes the largest-batch search's outputs (``batchscope.bench.maxbatch``): the peak
memory figure then marks the largest batch that fits and draws the search's trials.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from batchscope.core import outputs, results
from batchscope.report import command
from batchscope.report.figures import save_png
from batchscope.report.plots.breakdown import breakdown_figure, data_wait_figure
from batchscope.report.plots.lines import (
    peak_memory_figure,
    throughput_figure,
    val_accuracy_figure,
)
from batchscope.report.plots.loss import loss_curves_figure
from batchscope.report.plots.memory_tokens import memory_tokens_figure
from batchscope.report.summary import result_files


def read_maxbatch(paths: Sequence[str | Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """Largest-batch search results by (mode, model): from the file's own ``mode``/``model``
    keys, else from its path (``.../<mode>/<model>.json``, the workflow's naming)."""
    found = {}
    for raw in paths:
        path = Path(raw)
        data = results.read_json(path)
        found[(data.get("mode") or path.parent.name, data.get("model") or path.stem)] = data
    return found


def all_figures(
    summary: pd.DataFrame,
    curves: pd.DataFrame,
    maxbatch: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    answer: Mapping[str, Any] | None = None,
    eliminated: Mapping[tuple, int] | None = None,
) -> dict[str, Figure]:
    """Every figure of the report, by its PNG file name (``answer`` and ``eliminated``: see
    ``throughput_figure``): the figures of ``batchscope.core.outputs.plots``, a sweep over
    token data's with ``memory_tokens.png``."""
    draw = {
        "throughput": lambda: throughput_figure(summary, answer, eliminated),
        "peak_memory": lambda: peak_memory_figure(summary, maxbatch),
        "data_wait": lambda: data_wait_figure(summary),
        "breakdown": lambda: breakdown_figure(summary),
        "loss_curves": lambda: loss_curves_figure(curves, summary),
        "val_accuracy": lambda: val_accuracy_figure(summary),
        "memory_tokens": lambda: memory_tokens_figure(summary),
    }
    tokens = "sequence_length" in summary and summary["sequence_length"].notna().any()
    return {figure.file: draw[figure.name]() for figure in outputs.plots(bool(tokens))}


def main(argv: Sequence[str] | None = None) -> int:
    parser = command.parser(
        "batchscope.report.plots.build", "Draw the sweep's figures as PNGs.", curves=True
    )
    parser.add_argument("--outdir", required=True, help="folder for the PNGs")
    parser.add_argument(
        "--maxbatch",
        nargs="*",
        default=[],
        metavar="FILE",
        help="largest-batch search results (bench.maxbatch) to mark on the memory figure",
    )
    parser.add_argument(
        "--answer", help="results/recommendation.json: the pick and its tie set are marked"
    )
    parser.add_argument(
        "--rounds", nargs="*", default=[], help="results/rounds/*.json: the race's eliminations"
    )
    args = parser.parse_args(argv)

    summary = pd.read_csv(args.summary)
    curves = pd.read_csv(args.curves)
    answer = results.read_json(args.answer) if args.answer else None
    eliminated = result_files.read_eliminated(args.rounds)
    figures = all_figures(summary, curves, read_maxbatch(args.maxbatch), answer, eliminated)
    for name, fig in figures.items():
        save_png(fig, Path(args.outdir) / name)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
