"""Time to target: throughput is not the whole answer for training.

Given the convergence report's findings (``convergence.json`` of
``batchscope.report.convergence.build``, ``recommend --convergence``), each training
recommendation also names the batch size with the lowest mean time to the training target and
the learning rate it used, compares it with the throughput pick, and says where it sits relative
to the gradient noise scale B_simple and the knee of the steps curve (``time_to_target``).

Plain Python: no plotting, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchscope.report.documents import lr_text, samples_text, sizes_text
from batchscope.report.recommend.text import config_text

#: Heading of the time-to-target part of a training recommendation (``--convergence``).
TIME_TO_TARGET = "Time to target"


def time_to_target(
    rec: Mapping[str, Any], group: Mapping[str, Any], document: str
) -> dict[str, Any]:
    """The time-to-target part of a training recommendation, from its convergence findings.

    Keys: ``effective_batch_size`` (the samples per update with the lowest mean time to the
    target, None when no batch size reached it in every seed) and its micro-batch
    ``batch_size``, ``lr`` (the effective learning rate it used),
    ``same_as_throughput`` (whether the throughput pick is that batch size; None when either is
    missing), ``paragraphs`` (the text).
    """
    best, pick = group["best"], rec["best"]
    if best is None:
        return {
            "batch_size": None,
            "effective_batch_size": None,
            "lr": None,
            "same_as_throughput": None,
            "paragraphs": [
                f"No time to target to rank the batch sizes by: {group['recommendation']}",
                f"Details: {document}.",
            ],
        }
    paragraphs = [_fastest_text(best, group)]
    same = None
    if pick is None:
        paragraphs.append("No configuration ran ok to compare its throughput with.")
    else:
        same = _same_config(best, pick)
        paragraphs.append(_versus_throughput_text(pick, group, same))
    paragraphs.append("Critical batch size: " + _critical_text(best, group))
    paragraphs.append(
        f"Details: {document} (steps, samples and seconds to the target of every batch size, "
        "B_simple, the knee and the regimes)."
    )
    return {
        "batch_size": best["batch_size"],
        "effective_batch_size": best["effective_batch_size"],
        "lr": best["lr"],
        "same_as_throughput": same,
        "paragraphs": paragraphs,
    }


def _fastest_text(best: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    """The batch size fastest to the target: its learning rate, seconds, steps and samples."""
    target = (group.get("target") or {}).get("text", "the training target")
    steps, samples = best["steps_to_target"]["mean"], best["samples_to_target"]["mean"]
    return (
        f"Fastest to the target ({target}): {_batch_text(best)} at learning rate {lr_text(best)}, "
        f"{_seconds_text(best)} on the clock (mean over the {best['n_reached']} seeds, "
        f"evaluations excluded; {steps:.0f} steps, {samples:.0f} samples), with "
        f"{group['num_workers']} DataLoader worker(s), among the batch sizes that reached the "
        f"target in every seed ({sizes_text(group['candidates'])})."
    )


def _versus_throughput_text(pick: Mapping[str, Any], group: Mapping[str, Any], same: bool) -> str:
    """Whether the throughput pick is also the fastest to the target, and if not, how it fared."""
    versus = f"the throughput pick ({config_text(pick)}, {pick['samples_per_s']:.1f} samples/s)"
    if same:
        return (
            f"It is also {versus}: here the fastest batch per second is also the fastest to "
            "the target."
        )
    text = (
        f"It differs from {versus}: the fastest batch per second is not the fastest to "
        f"the target. {_throughput_pick_outcome(pick, group)}"
    )
    if pick["num_workers"] != group["num_workers"]:
        text += (
            f" (The convergence runs used {group['num_workers']} DataLoader worker(s), "
            f"the throughput pick {pick['num_workers']}.)"
        )
    return text


def _critical_text(best: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    """Where the fastest batch size sits against B_simple and the knee, with their intervals."""
    where = best["position"]["text"]
    bounds = []
    noise = group.get("b_simple")
    if noise is not None and noise["low"] is not None:
        bounds.append(
            f"B_simple 95% interval [{samples_text(noise['low'])}, {samples_text(noise['high'])}]"
        )
    knee = group.get("knee")
    if knee is not None and knee["b_noise"] is not None and knee["interval"] is not None:
        low, high = knee["interval"]
        bounds.append(f"knee bootstrap 95% interval [{samples_text(low)}, {samples_text(high)}]")
    if bounds:
        joined = "; ".join(bounds)
        where += f" {joined[0].upper()}{joined[1:]}."
    return where


def _batch_text(entry: Mapping[str, Any]) -> str:
    text = f"batch size {entry['effective_batch_size']}"
    if entry["accumulation_steps"] > 1:
        text += f" ({entry['batch_size']} × {entry['accumulation_steps']} accumulated)"
    return text


def _seconds_text(entry: Mapping[str, Any]) -> str:
    seconds = entry["seconds_to_target"]
    if seconds["low"] is None:
        return f"{seconds['mean']:.1f} s (one seed)"
    return f"{seconds['mean']:.1f} s [95% CI {seconds['low']:.1f}, {seconds['high']:.1f}]"


def _same_config(entry: Mapping[str, Any], point: Mapping[str, Any]) -> bool:
    """Whether a convergence batch entry is the throughput point's batch (micro-batch and
    accumulation; the summary's batch_size is the micro-batch)."""
    accumulation = point.get("accumulation_steps") or 1
    return (entry["batch_size"], entry["accumulation_steps"]) == (
        point["batch_size"],
        accumulation,
    )


def _throughput_pick_outcome(point: Mapping[str, Any], group: Mapping[str, Any]) -> str:
    """How the throughput pick's batch size fared against the target, in the convergence runs."""
    entry = next((e for e in group["batches"] if _same_config(e, point)), None)
    if entry is None:
        return f"The convergence runs have no batch size {point['batch_size']} to compare."
    here = _batch_text(entry)
    if entry["all_reached"]:
        return f"At {here} every seed reached the target, in {_seconds_text(entry)}."
    if entry["n_reached"]:
        return (
            f"At {here} only {entry['n_reached']} of {entry['n_seeds']} seeds reached the target."
        )
    if entry["n_failed"] == entry["n_seeds"]:
        return f"At {here} no training run finished ok ({entry['failures']})."
    return f"At {here} no seed reached the target within its training budget."
