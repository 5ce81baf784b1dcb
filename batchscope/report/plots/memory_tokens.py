"""The token sweep's memory figure: peak memory against tokens per step (batch × sequence
length), one line per sequence length, a panel per mode × model (× accumulation).

Activation memory grows with the tokens a step holds: a transformer's with batch × sequence
length (and its attention with the length squared), so lines that lie on one another say memory
follows the tokens alone, and a longer sequence's line above the others is attention's share.
Drawn for sweeps over token data only (``sequence_length`` set).
"""

from __future__ import annotations

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from batchscope.report.figures import placeholder_figure, subplots
from batchscope.report.plots.panels import mark_failed, panels
from batchscope.report.summary import result_files

#: One panel per distinct value of these (the sequence length is each panel's hue).
TOKEN_PANEL_KEYS = ["mode", "model", "dataset", "accumulation_steps"]

NO_TOKEN_RUNS = "no token data in this sweep"


def tokens_per_step(frame: pd.DataFrame) -> pd.Series:
    """Token ids one forward pass holds: micro-batch × sequence length."""
    return pd.to_numeric(frame["batch_size"]) * pd.to_numeric(frame["sequence_length"])


def memory_tokens_figure(summary: pd.DataFrame) -> Figure:
    """Peak memory (MB, mean over ok runs) vs batch × sequence length (log 2 axis), hue =
    sequence length; failed points marked at the bottom as on the other figures."""
    title = "Peak memory vs tokens per step"
    summary = result_files.with_grid_defaults(summary)
    tokens = summary[summary["sequence_length"].notna()] if not summary.empty else summary
    grouped = panels(tokens, TOKEN_PANEL_KEYS)
    if not grouped:
        return placeholder_figure(NO_TOKEN_RUNS, title)
    fig, axes = subplots(len(grouped), width=5.4)
    for ax, (key, rows) in zip(axes, grouped, strict=True):
        rows = rows.assign(tokens=tokens_per_step(rows))
        ok = rows[rows["status"] == "ok"].assign(
            peak_mem_mb=lambda d: pd.to_numeric(d["peak_mem_mb"]),
            length=lambda d: d["sequence_length"].astype(int).astype(str),
        )
        if not ok.empty:
            order = [str(n) for n in sorted(ok["sequence_length"].astype(int).unique())]
            sns.lineplot(
                data=ok, x="tokens", y="peak_mem_mb", hue="length", hue_order=order,
                marker="o", errorbar=("ci", 95), ax=ax,
            )  # fmt: skip
            ax.legend(title="sequence length", fontsize=8, title_fontsize=8)
        failed = rows[rows["status"] != "ok"].rename(columns={"batch_size": "_b"})
        mark_failed(ax, failed.rename(columns={"tokens": "batch_size"}))
        ax.set_xscale("log", base=2)
        ax.set_xlim(rows["tokens"].min() / 1.3, rows["tokens"].max() * 1.3)  # failed ones too
        mode, model, dataset, accumulation = key
        panel = f"{mode} / {model} ({dataset})"
        ax.set_title(panel if int(accumulation) == 1 else f"{panel}, {int(accumulation)} acc.")
        ax.set_xlabel("batch × sequence length (tokens per step)")
        ax.set_ylabel("peak memory (MB)")
    fig.suptitle(title)
    return fig
