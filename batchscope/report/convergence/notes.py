"""The convergence report's words: the recommendation, where a batch size sits against B_simple
and the knee, the notes on the critical batch size, a model's introduction, the per-batch-size
table as text and how to read it all.

Recommendation: among batch sizes whose every seed ran ok and reached the target, the one with the
lowest mean seconds to the target (time on the clock, evaluations excluded), with the learning
rate it used, and whether it is below, around (within a factor of two) or above B_simple and the
knee (``position``).

The pages (``batchscope.report.convergence.pages``) put these into the Markdown and HTML
documents and into ``convergence.json``. Plain pandas: no plotting, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from batchscope.report.convergence.fits import AROUND_FACTOR, relation
from batchscope.report.convergence.tables import (
    ModelReport,
    NoiseScale,
    candidates,
    highest_throughput,
    regime_groups,
)
from batchscope.report.documents import lr_text, samples_text, sizes_text

HOW_TO_READ = (
    "How to read this. Each point of the steps plot is a batch size's mean number of optimizer "
    "updates until the validation metric first met the target, over the seeds that reached it, "
    "with its 95% confidence interval; red triangles are seeds that did not reach it, drawn at "
    "the steps they ran (the true value is higher), and every batch size says how many seeds "
    "missed. On log-log axes the grey dashed line halves the steps for each doubling of the "
    "batch: while the points follow it, a bigger batch costs no extra samples (perfect "
    "scaling); where they bend away from it each doubling saves less (diminishing returns), and "
    "where they flatten, a bigger batch only costs more samples (no benefit). The knee B_noise "
    "of the fitted curve S = S_min (1 + B_noise/B) is where a run takes twice the fewest "
    "possible steps and twice the fewest possible samples; the gradient noise scale B_simple, "
    "measured during training, predicts it (McCandlish et al. 2018 find the two agree to within "
    "a small factor). Steps are not time: the recommendation ranks batch sizes by seconds to "
    "the target on this machine, which also counts how fast each batch size runs."
)

#: Level of the one-sided test of the runner-up against the recommended batch size.
RUNNER_UP_LEVEL = 0.05

#: Header of the document's per-batch-size table (``evidence_table``).
TABLE_COLUMNS = (
    "batch size",
    "lr",
    "reached",
    "steps to target",
    "samples to target",
    "seconds to target",
    "samples/s",
    "B_simple (median over seeds)",
    "slope to next",
    "regime",
)


# --------------------------------------------------------------------------------------------
# The recommendation
# --------------------------------------------------------------------------------------------


def recommend(report: ModelReport) -> tuple[dict[str, Any] | None, str]:
    """(the recommended batch size's table row, the recommendation in words)."""
    table = report.table
    if report.metric is None:
        return None, "No training target was configured (train.target_accuracy or target_loss)."
    picks = candidates(table)
    if picks.empty:
        return None, _no_candidate_text(report)
    best = picks.sort_values(["seconds_mean", "effective_batch_size"]).iloc[0].to_dict()
    text = _best_text(report, best, picks)
    text += _runner_up_text(best, picks)
    text += _throughput_text(best, table)
    text += " " + position_text(best["effective_batch_size"], report)
    return best, text


def _no_candidate_text(report: ModelReport) -> str:
    """Why no batch size is recommended: none reached the target, or none in every seed."""
    table = report.table
    if table["n_reached"].sum() == 0:
        return (
            f"No run of {report.model} reached the target ({report.target_text}) within its "
            "training budget, so there is no time to target to recommend a batch size by. "
            "Train longer (train.epochs, train.max_steps) or set a lower target."
        )
    partly = table[table["n_reached"] > 0]
    return (
        f"No batch size of {report.model} reached the target ({report.target_text}) in every "
        f"seed, so none is recommended. Some seeds reached it at batch size(s) "
        f"{sizes_text(partly['effective_batch_size'])}: train longer or set a lower target to "
        "compare them."
    )


def _best_text(report: ModelReport, best: Mapping[str, Any], picks: pd.DataFrame) -> str:
    """The recommended batch size, its learning rate and its time to the target."""
    effective, accumulated = best["effective_batch_size"], ""
    if best["batch_size"] != effective:
        steps = effective // best["batch_size"]
        accumulated = f" ({best['batch_size']} × {steps} accumulated)"
    return (
        f"Train {report.model} with batch size {effective}"
        + accumulated
        + f" at learning rate {lr_text(best)}: it reached {report.target_text} in "
        f"{_ci_text(best, 'seconds', '{:.1f}', ' s')} on the clock, the lowest mean time to target "
        "of the batch sizes that reached it in every seed "
        f"({sizes_text(picks['effective_batch_size'])})."
    )


def _runner_up_text(best: Mapping[str, Any], picks: pd.DataFrame) -> str:
    """The next fastest batch size to the target, and whether a test across the seeds
    separates it from the recommended one (``_separation_text``)."""
    others = picks["effective_batch_size"] != best["effective_batch_size"]
    rest = picks[others].sort_values("seconds_mean")
    if not len(rest):
        return ""
    second = rest.iloc[0]
    return (
        f" The next, batch size {second['effective_batch_size']}, took "
        f"{second['seconds_mean']:.1f} s" + _separation_text(best, second) + "."
    )


def _separation_text(best: Mapping[str, Any], second: Mapping[str, Any]) -> str:
    """Whether the runner-up's seconds to the target are longer than the best's beyond the
    seed-to-seed noise: Welch's one-sided t-test on log seconds over the seeds, at
    RUNNER_UP_LEVEL. Overlapping 95% intervals would not say "within noise": two means can
    differ significantly while their intervals overlap."""
    fast, slow = best["seconds_values"], second["seconds_values"]
    if min(len(fast), len(slow)) < 2:
        return (
            " (one seed at one of them: the seed-to-seed noise is unknown, so whether it is "
            "really slower is too; two or more seeds each would tell)"
        )
    from scipy import stats

    # Welch's t on log seconds, H1: the runner-up takes longer
    test = stats.ttest_ind(np.log(slow), np.log(fast), equal_var=False, alternative="greater")
    seeds = f"{len(fast)} and {len(slow)} seeds"
    if test.pvalue < RUNNER_UP_LEVEL:
        return (
            f" (longer beyond the seeds' noise: Welch's t-test on log seconds over {seeds}, "
            f"one-sided p = {test.pvalue:.2g})"
        )
    return (
        f" (not separated from batch size {best['effective_batch_size']} by the seeds: Welch's "
        f"t-test on log seconds over {seeds}, one-sided p = {test.pvalue:.2g}; more seeds could "
        "tell)"
    )


def _throughput_text(best: Mapping[str, Any], table: pd.DataFrame) -> str:
    """How the batch size with the highest throughput fared, when it is not the recommended."""
    top = highest_throughput(table)
    if top is None or top["effective_batch_size"] == best["effective_batch_size"]:
        return ""
    if top["all_reached"]:
        outcome = f"takes {top['seconds_mean']:.1f} s to the target"
    else:
        outcome = f"reached the target in {top['n_reached']} of {top['n_seeds']} seeds"
    return (
        f" The highest throughput is at batch size {top['effective_batch_size']} "
        f"({top['samples_per_s']:.0f} samples/s), which {outcome}: throughput alone "
        "would have chosen it."
    )


def position(batch: int, report: ModelReport) -> dict[str, str | None]:
    """Where ``batch`` sits: ``b_simple`` and ``knee`` are ``below``, ``around`` (within
    AROUND_FACTOR) or ``above`` them (None when unmeasured or not fitted; a knee at the search's
    edge counts as beyond the measured range), ``regime`` its regime on the fitted curve."""
    noise, knee = report.noise, report.knee
    if knee is None:
        to_knee = None
    elif knee.b_noise is not None:
        to_knee = relation(batch, knee.b_noise)
    else:  # beyond the largest batch (edge above), or below the smallest (edge below)
        to_knee = "below" if knee.edge == "above" else "above"
    row = report.table[report.table["effective_batch_size"] == batch]
    return {
        "b_simple": relation(batch, noise.median) if noise is not None else None,
        "knee": to_knee,
        "regime": row["regime"].iloc[0] if len(row) and row["regime"].iloc[0] else None,
    }


def position_text(batch: int, report: ModelReport) -> str:
    """``position`` as a sentence."""
    where = position(batch, report)
    parts = []
    if report.noise is not None:
        parts.append(
            f"{where['b_simple']} the gradient noise scale B_simple ≈ "
            f"{samples_text(report.noise.median)}"
        )
    else:
        parts.append("B_simple was not measured (train.noise_scale_every_steps)")
    knee = report.knee
    if knee is not None and knee.b_noise is not None:
        parts.append(f"{where['knee']} the knee B_noise ≈ {knee.b_noise:.0f}")
    elif knee is not None and knee.edge == "above":
        parts.append("below the knee, which lies beyond the largest batch size measured")
    elif knee is not None:
        parts.append("above the knee: no larger batch size cut the steps to the target")
    else:
        parts.append("the knee could not be fitted")
    regime_text = f", in the {where['regime']} regime" if where["regime"] else ""
    return (
        f"Batch size {batch} is "
        + " and ".join(parts)
        + f"{regime_text} (around: within a factor of two)."
    )


def _ci_text(row: Mapping[str, Any], quantity: str, fmt: str, unit: str = "") -> str:
    """``mean [low, high]`` with ``unit`` after the mean (the interval is in the same unit)."""
    mean, low, high = (row[f"{quantity}_{p}"] for p in ("mean", "low", "high"))
    if pd.isna(mean):
        return "–"
    if pd.isna(low):
        return f"{fmt.format(mean)}{unit} (one seed)"
    return f"{fmt.format(mean)}{unit} [{fmt.format(low)}, {fmt.format(high)}]"


# --------------------------------------------------------------------------------------------
# The document's text
# --------------------------------------------------------------------------------------------


def evidence_table(report: ModelReport) -> pd.DataFrame:
    """The document's per-batch-size table, as text cells."""
    rows = [_evidence_row(report, row) for row in report.table.to_dict("records")]
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def _evidence_row(report: ModelReport, row: Mapping[str, Any]) -> list[str]:
    """One batch size's cells (TABLE_COLUMNS); the recommended one is starred."""
    reached = f"{row['n_reached']}/{row['n_seeds']}"
    if row["failures"]:
        reached += f" ({row['failures']})"
    effective, micro = row["effective_batch_size"], row["batch_size"]
    batch = str(effective)
    if micro != effective:
        batch += f" ({micro} × {effective // micro})"
    if report.best is not None and effective == report.best["effective_batch_size"]:
        batch += " ★"
    return [
        batch,
        "–" if pd.isna(row["lr"]) else f"{row['lr']:.4g}",
        reached,
        _ci_text(row, "steps", "{:.0f}"),
        _ci_text(row, "samples", "{:.0f}"),
        _ci_text(row, "seconds", "{:.1f}"),
        "–" if pd.isna(row["samples_per_s"]) else f"{row['samples_per_s']:.0f}",
        _b_simple_cell(row),
        "–" if pd.isna(row["slope_to_next"]) else f"{row['slope_to_next']:.2f}",
        row["regime"] or "–",
    ]


def _b_simple_cell(row: Mapping[str, Any]) -> str:
    """A batch size's B_simple with its interval, and how many of its seeds gave one."""
    if pd.isna(row["b_simple"]):
        return "–"
    text = samples_text(row["b_simple"])
    if not pd.isna(row["b_simple_low"]):
        text += f" [{samples_text(row['b_simple_low'])}, {samples_text(row['b_simple_high'])}]"
    ran = row["n_seeds"] - row["n_failed"]
    if row["b_simple_runs"] < ran:
        text += f" ({row['b_simple_runs']} of {ran} seeds)"
    return text


def critical_batch_notes(report: ModelReport) -> list[str]:
    """B_simple, the knee, their comparison and the regimes, one sentence each."""
    notes = [_b_simple_note(report.noise)]
    knee = report.knee
    if knee is None:
        notes.append(f"Knee: not fitted. {report.knee_note}")
    else:
        notes.append(f"{_knee_text(report)} {report.knee_note}")
        groups = regime_groups(report)
        notes.append(
            "Regimes (fitted curve): "
            + "; ".join(f"{name}: {sizes_text(sizes)}" for name, sizes in groups.items() if sizes)
            + "."
        )
    noise = report.noise
    if noise is not None and knee is not None and knee.b_noise is not None:
        ratio = knee.b_noise / noise.median
        notes.append(
            f"The knee is {ratio:.2g} × B_simple: "
            + (
                "they agree within a factor of two."
                if 1 / AROUND_FACTOR <= ratio <= AROUND_FACTOR
                else "they differ by more than a factor of two (B_simple is each run's estimate "
                "over its last measurements and changes as the loss falls; the knee sums up the "
                "whole way to this target)."
            )
        )
    return notes


def _b_simple_note(noise: NoiseScale | None) -> str:
    """The model's B_simple, its interval and the runs' range (or why there is none)."""
    if noise is None:
        return (
            "B_simple: not measured (set train.noise_scale_every_steps), or no run gave a "
            "positive estimate."
        )
    high = "∞" if not math.isfinite(noise.high) else samples_text(noise.high)
    low = "–" if not math.isfinite(noise.low) else samples_text(noise.low)
    text = (
        f"B_simple ≈ {samples_text(noise.median)} samples (median over {noise.n_runs} runs, every "
        f"batch size and seed, each at the end of its training); 95% interval [{low}, {high}] "
        f"(median of the runs' bounds); the runs ranged from {samples_text(noise.smallest)} to "
        f"{samples_text(noise.largest)}."
    )
    if noise.n_unusable:
        text += f" {noise.n_unusable} run(s) gave no positive estimate (noise swamped |G|²)."
    return text


def _knee_text(report: ModelReport) -> str:
    """The fitted knee with its interval, S_min and E_min, or where the fit's edge lies."""
    knee = report.knee
    if knee.b_noise is None:
        if knee.edge == "above":
            return (
                "Knee: beyond the largest batch size measured: the steps still fall as 1/B "
                "there (perfect scaling throughout)."
            )
        return "Knee: below the smallest batch size: larger batches never cut the steps."
    interval = ""
    if knee.interval is not None:
        low, high = knee.interval
        interval = f", bootstrap 95% interval over seeds [{_bound(low)}, {_bound(high)}]"
    text = (
        f"Knee B_noise ≈ {knee.b_noise:.0f} samples{interval}; S_min ≈ "
        f"{knee.s_min:.0f} steps, E_min = S_min·B_noise ≈ {knee.s_min * knee.b_noise:.0f} "
        f"samples; RMS error of the fit {knee.rms_log_residual:.2f} in log steps."
    )
    largest = max(b for b, _ in knee.points)
    if knee.b_noise > largest:
        text += f" It lies beyond the largest batch size fitted ({int(largest)}): an extrapolation."
    return text


def _bound(value: float) -> str:
    if value == 0:
        return "0"
    return "∞" if not math.isfinite(value) else f"{value:.0f}"


def intro(report: ModelReport) -> str:
    """The paragraph that opens a model's part: its runs, the worker count, the target, and how
    often the runs evaluated (which bounds how exact the steps to the target are)."""
    text = (
        f"Training runs of {report.model} on {report.dataset} with {report.workers} DataLoader "
        f"worker(s), target {report.target_text}."
    )
    if report.other_workers:
        text += (
            f" Runs with {sizes_text(report.other_workers)} worker(s) are left out: the report "
            "uses the worker count with the most runs (the smallest on a tie), so that every batch "
            "size's seconds come from the same input pipeline."
        )
    if report.eval_every and report.metric is not None and len(report.table):
        smallest = int(report.table["effective_batch_size"].min())
        text += (
            f" The runs evaluated every {report.eval_every:.0f} samples: steps to the target is "
            "the first evaluation that met it, so it overstates the true value by up to "
            f"{report.eval_every:.0f}/B steps ({report.eval_every / smallest:.0f} at B = "
            f"{smallest})."
        )
    return text
