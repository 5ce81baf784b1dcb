"""The recommendation's words: its sentence (the best configuration, compared with the runner-up
across rounds) and its notes (failures, the largest batch that ran, the
diagnosis, compute, noise, model quality, the environment).

What it says of the others comes from the verdict across rounds (``results/recommendation.json``,
``batchscope.core.verdict``): separated, equivalent within the margin (and the rule that picked),
undetermined (the best estimate, what could still be as fast and what would settle it), or
disturbed (measured beside other work: no point named). Plain Python: no plotting, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from batchscope.report.recommend.points import SPREAD_SOURCES
from batchscope.report.summary import diagnosis, result_files

#: Spread (%) above which a measurement is called noisy (STYLE: IQR over 10% of the median).
NOISY_PCT = 10.0

#: Error messages (a CUDA OOM message is long) are cut to this many characters in the text.
ERROR_CHARS = 80


def short_error(error: str) -> str:
    """``error`` cut to ERROR_CHARS characters, ending in "..." when cut."""
    return error if len(error) <= ERROR_CHARS else error[: ERROR_CHARS - 3] + "..."


def config_text(point: Mapping[str, Any]) -> str:
    """A configuration as the text names it: ``batch_size=64, num_workers=2``."""
    return f"batch_size={point['batch_size']}, num_workers={point['num_workers']}"


def _runs_text(point: Mapping[str, Any]) -> str:
    """How the point's throughput was measured: runs, rounds, the interval and the spread."""
    runs, rounds = point["n_seeds"], point.get("n_rounds") or 1
    if runs < 2:
        return "1 run: run-to-run noise unknown"
    low = point.get("samples_per_s_median_ci95_low")
    high = point.get("samples_per_s_median_ci95_high")
    cv = point.get("samples_per_s_cv")
    text = f"median of {runs} runs, each its own process, over {rounds} round(s)"
    if low is not None and high is not None:
        text += f"; 95% interval {low:.1f}-{high:.1f}"
    if cv is not None:
        text += f"; run-to-run CV {100 * cv:.1f}%"
    return text


def _throughput(point: Mapping[str, Any]) -> float:
    median = point.get("samples_per_s_median")
    return point["samples_per_s"] if median is None else median


def tie_set_text(members: list[Mapping[str, Any]]) -> str:
    """'batch 32, 64, 128 with 0 workers and batch 64 with 2 workers' for the tie set's
    members."""
    by_workers: dict[int, list[int]] = {}
    for m in members:
        by_workers.setdefault(m["num_workers"], []).append(m["batch_size"])
    parts = [
        f"batch {', '.join(str(b) for b in sorted(sizes))} with {w} worker{'s' * (w != 1)}"
        for w, sizes in sorted(by_workers.items())
    ]
    return " and ".join(parts)


def _pct_text(fraction: float) -> str:
    return f"about {100 * fraction:.0f}%" if fraction < 10 else "more than tenfold"


def _evidence_text(answer: Mapping[str, Any]) -> str:
    """How much these runs can tell apart, and what the race spent."""
    detect = answer.get("detectable_diff_frac")
    text = ""
    if detect is not None:
        text = (
            f" With at least {answer['n_rounds']} runs per point, differences of"
            f" {_pct_text(detect)} or more could be told apart on this machine."
        )
    spent = answer.get("device_s")
    if spent is not None:
        text += f" The runs took {spent:.0f} device-seconds."
    return text


def _settle_text(answer: Mapping[str, Any]) -> str:
    settle = answer.get("to_settle") or {}
    if settle.get("rounds") is None:
        return " More rounds than the race allows would be needed to settle it."
    cost = "" if settle.get("device_s") is None else f", about {settle['device_s']:.0f} more"
    return (
        f" About {settle['rounds']} rounds per point{cost} device-seconds, would settle it"
        " (sweep.max_rounds, sweep.budget_s)."
    )


def _state_text(rec: Mapping[str, Any]) -> str:
    """The first sentence: the state, what it means for the user, and the pick."""
    answer, best = rec["verdict"], rec["best"]
    use = f"use {config_text(best)}: {_throughput(best):.1f} samples/s ({_runs_text(best)})."
    margin = f"{100 * answer['margin']:.0f}%"
    others = [m for m in answer["tie_set"] if (m["batch_size"], m["num_workers"]) !=
              (best["batch_size"], best["num_workers"])]  # fmt: skip
    if answer["verdict"] == "separated":
        return f"Separated: it is faster than every other point measured, so {use}"
    if answer["verdict"] == "equivalent":
        return (
            f"Equivalent: {tie_set_text(answer['tie_set'])} are all within {margin} of the"
            f" best, so any of them will do; {use} {answer['pick_reason']}"
        )
    if answer.get("detectable_diff_frac") is None:
        return (
            "Undetermined: with one run per point the run-to-run noise is unknown (the windows"
            " inside one process do not show it), so no point can be called faster; for now"
            f" {use} Set measure.rounds to 2 or more."
        )
    could = f"{tie_set_text(others)} could still be as fast" if others else "nothing is settled"
    return (
        f"Undetermined: the runs ran out before the best was told apart, so {use}"
        f" {answer['pick_reason']} But {could}, and not all are shown within {margin} of the"
        " best." + _settle_text(answer)
    )


def sentence(rec: Mapping[str, Any]) -> str:
    """The recommendation: its first sentence names the verdict's state and what it means for
    the user, then the pick, how it was measured and what the runs could tell apart (from
    ``results/recommendation.json``)."""
    best, runner = rec["best"], rec["runner_up"]
    answer = rec.get("verdict") or {}
    if answer.get("verdict") == "disturbed":  # measured beside other work: no point is named
        return (
            f"Disturbed: no recommendation for {rec['mode']} / {rec['model']}."
            f" {answer['pick_reason']}"
        )
    if best is None:
        statuses = [p["status"] for p in rec["absent_points"]]
        return (
            f"No grid point ran ok for {rec['mode']} / {rec['model']} "
            f"({rec['n_runs']} runs: {len(rec['oom_batch_sizes'])} batch size(s) hit OOM, "
            f"{len(rec['diverged_batch_sizes'])} diverged, {statuses.count('failed')} run(s) "
            f"failed, {statuses.count('missing')} missing), so there is no recommendation."
        )
    devices = rec.get("n_devices", 1)
    scaling = ""
    if devices != 1:
        scaling = f" On {devices} devices (data-parallel): batch size and workers are per device."
        if best.get("scaling_efficiency") is not None:
            scaling += f" Scaling efficiency against one device: {best['scaling_efficiency']:.2f}."
    if runner is None:
        return (
            f"Use {config_text(best)}: {_throughput(best):.1f} samples/s ({_runs_text(best)})."
            " It is the only configuration that ran ok, so nothing was compared." + scaling
        )
    text = _state_text(rec)
    next_fastest = ""
    if answer["verdict"] == "separated":
        next_fastest = (
            f" The next fastest is {config_text(runner)} at {_throughput(runner):.1f} samples/s."
        )
    return text + next_fastest + scaling + _evidence_text(answer)


def _quality(point: Mapping[str, Any]) -> str:
    acc, loss = point.get("val_accuracy"), point.get("final_loss")
    acc_text = "n/a" if acc is None else f"{acc:.3f}"
    loss_text = "n/a" if loss is None else f"{loss:.4f}"
    return f"validation accuracy {acc_text}, final loss {loss_text}"


def _diagnosis(rec: Mapping[str, Any]) -> str:
    """What limits the recommended point, and which worker count removed an input stall."""
    best = rec["best"]
    wait, limit = best["data_wait_frac"], diagnosis.INPUT_BOUND_FRAC
    if best["bound"] is None:
        return "Diagnosis: unknown (no data wait measured)."
    if best["bound"] == "input":
        text = (
            f"Diagnosis: input-bound (data wait {wait:.3f} of the step time, over {limit:g}): "
            "the model waits for the input pipeline"
        )
        pipeline = rec.get("input_pipeline")
        if pipeline:
            text += f" (images: {pipeline})"
        fixed = best["stall_removed_by_workers"]
        if fixed == diagnosis.NO_WORKERS or fixed is None:
            cheaper = (
                "another decoder or a cheaper resize/crop"
                if pipeline
                else "a cheaper input pipeline"
            )
            return text + (
                "; no larger worker count measured removed the stall (more workers "
                f"or {cheaper} may help)."
            )
        return text + f"; num_workers={fixed} removed the stall at this batch size."
    text = f"Diagnosis: compute-bound (data wait {wait:.3f} of the step time, at most {limit:g})"
    fixes = rec["stall_fixes"]
    if fixes:
        before = ", ".join(
            f"num_workers={p['num_workers']} (data wait {p['data_wait_frac']:.3f})" for p in fixes
        )
        verb = "was" if len(fixes) == 1 else "were"
        return text + (
            f"; at this batch size {before} {verb} input-bound, and "
            f"num_workers={best['num_workers']} removed the stall."
        )
    return text + "."


def _pct(frac: float) -> str:
    return f"{100 * frac:.1f}%"


def _wait_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """'; data wait 17.0% → 0.5% of the step time', or nothing when either is unmeasured."""
    a, b = before.get("data_wait_frac"), after.get("data_wait_frac")
    if a is None or b is None:
        return ""
    return f"; data wait {_pct(a)} → {_pct(b)} of the step time"


def _noise_caveat(rec: Mapping[str, Any], other: Mapping[str, Any]) -> str | None:
    """Why a difference between the best and ``other`` may be noise, from the verdict: one run
    per point, or ``other`` tied with the best; None when the rounds separate them."""
    answer = rec["verdict"] or {}
    if answer.get("verdict") == "undetermined" and answer.get("detectable_diff_frac") is None:
        return "one run per point: the run-to-run noise is unknown"
    tied = {(m["batch_size"], m["num_workers"]) for m in answer.get("tie_set") or []}
    if (other["batch_size"], other["num_workers"]) in tied:
        return "within the run-to-run noise: both could be the best"
    return None


def workers_text(rec: Mapping[str, Any]) -> str:
    """Whether more DataLoader workers helped at the recommended batch size, with the change in
    throughput and in data wait: 'Workers helped: 2 workers: +35.0% samples/s against 0 at batch
    32; data wait 17.0% → 0.5% of the step time.'"""
    best, compared = rec["best"], rec["workers"]
    batch = best["batch_size"]
    if compared is None:
        return (
            f"Workers: only num_workers={best['num_workers']} ran at batch {batch}, so whether "
            "more workers help was not measured."
        )
    if compared["fewest"] is not None:
        first, second = compared["fewest"], best
    else:
        first, second = best, compared["more"]
    change = _throughput(second) / _throughput(first) - 1
    caveat = _noise_caveat(rec, second if second is not best else first)
    if caveat is None:
        helped = change > 0 and second is best
        head = "Workers helped" if helped else "More workers did not help"
    elif caveat.startswith("within"):
        head = "More workers did not clearly help"
    else:
        head = "Whether more workers help is not known"
    workers = second["num_workers"]
    text = (
        f"{head}: {workers} worker{'s' * (workers != 1)}: {change:+.1%} samples/s against "
        f"{first['num_workers']} at batch {batch}"
    )
    if caveat:
        text += f" ({caveat})"
    return text + _wait_change(first, second) + "."


def limit_text(rec: Mapping[str, Any]) -> str:
    """What limits the recommended point's throughput, in one plain sentence."""
    best = rec["best"]
    wait = best["data_wait_frac"]
    if best["bound"] is None or wait is None:
        return "Limit: unknown (no data wait measured)."
    if best["bound"] == "input":
        return (
            f"Limit: the input pipeline: the model waits for data {_pct(wait)} of the step time "
            f"(over {_pct(diagnosis.INPUT_BOUND_FRAC)})."
        )
    return (
        f"Limit: the model's compute, not the input pipeline (data wait {_pct(wait)} of the "
        "step time)."
    )


def _skipped_note(rec: Mapping[str, Any]) -> str | None:
    """The unreadable images an image folder's runs skipped, when any."""
    count = rec.get("images_skipped") or 0
    if not count:
        return None
    return (
        f"Data: {count} unreadable image{'s' * (count != 1)} in the image folder "
        f"{'were' if count != 1 else 'was'} skipped in every run, so the throughput is over "
        "the readable ones (each is named in logs/download/imagefolder.log)."
    )


def _compute_note(best: Mapping[str, Any]) -> str | None:
    """Achieved TFLOP/s and model FLOPs utilisation at the recommended point, when measured."""
    achieved, mfu = best.get("achieved_tflops"), best.get("mfu")
    if achieved is None and mfu is None:
        return None
    parts = []
    if achieved is not None:
        parts.append(f"{achieved:.3g} TFLOP/s achieved")
    if mfu is not None:
        peak = best.get("peak_tflops")
        of_peak = f" of the {peak:.3g} TFLOP/s peak" if peak is not None else ""
        parts.append(f"MFU {100 * mfu:.1f}%{of_peak}")
    return "Compute at the recommended point: " + ", ".join(parts) + "."


def _absent_note(rec: Mapping[str, Any]) -> str | None:
    """One sentence listing the grid points without a result, with each one's error."""
    absent = rec["absent_points"]
    if not absent:
        return None
    items = []
    for point in absent:
        item = (
            f"batch_size={point['batch_size']}, num_workers={point['num_workers']}, "
            f"seed {point['seed']}: {point['status']}"
        )
        error = point["error"]
        if error:
            item += f" ({short_error(error)})"
        elif point["status"] == result_files.MISSING:
            item += " (no result, no log)"
        items.append(item)
    return (
        f"Not measured: {len(absent)} of {rec['n_runs']} grid points failed or are missing, so "
        f"the recommendation is among those that finished: {'; '.join(items)}."
    )


def notes(rec: Mapping[str, Any]) -> list[str]:
    """Supporting facts, one sentence each."""
    found = []
    absent = _absent_note(rec)
    if absent:
        found.append(absent)
    if rec["best"]:
        found += [workers_text(rec), limit_text(rec)]
    skipped = _skipped_note(rec)
    if skipped:
        found.append(skipped)
    largest = rec["largest_ok_batch_size"]
    found.append(
        f"Largest batch size that ran ok: {largest}." if largest else "No batch size ran ok."
    )
    for status, label in (("oom", "Out of memory (OOM)"), ("diverged", "Diverged")):
        sizes = rec[f"{status}_batch_sizes"]
        if sizes:
            found.append(f"{label} at batch size(s): {', '.join(str(s) for s in sizes)}.")
    best = rec["best"]
    if best:
        found += _best_notes(rec)
    top = rec["best_accuracy"]
    if top:
        slower = 100 * (1 - top["samples_per_s"] / best["samples_per_s"])
        than = f"{abs(slower):.1f}% {'slower' if slower >= 0 else 'faster'} than"
        found.append(
            f"Best validation accuracy is at {config_text(top)}: {_quality(top)}; "
            f"{top['samples_per_s']:.1f} samples/s, {than} the recommended point."
        )
    if rec["env_mismatch_runs"]:
        found.append(
            f"{rec['env_mismatch_runs']} run(s) were measured in another environment than the "
            "captured one (env fingerprint differs)."
        )
    return found


def _best_notes(rec: Mapping[str, Any]) -> list[str]:
    """What was measured at the recommended point: memory, data wait, the diagnosis, compute,
    other seeds that failed, a noisy spread, and (training) model quality."""
    best = rec["best"]
    mem = "n/a" if best["peak_mem_mb"] is None else f"{best['peak_mem_mb']:.0f} MB"
    wait = best["data_wait_frac"]
    wait_text = "n/a" if wait is None else f"{wait:.3f} of the step time"
    found = [f"At the recommended point: peak memory {mem}, data wait {wait_text}."]
    found.append(_diagnosis(rec))
    compute = _compute_note(best)
    if compute:
        found.append(compute)
    if best["n_failed"]:
        found.append(
            f"Caution: {best['n_failed']} other run(s) of the recommended configuration "
            "(other seeds) did not finish ok; see the evidence table."
        )
    # several runs: the verdict's sentence gives their run-to-run spread; this note is for one
    # run, whose only spread is inside it (windows, steps)
    within_one_run = best["spread_source"] in ("window_iqr", "step_iqr")
    if within_one_run and best["spread_pct"] > NOISY_PCT:
        found.append(
            f"Its spread ({best['spread_pct']:.1f}%, {SPREAD_SOURCES[best['spread_source']]}) "
            f"is over {NOISY_PCT:.0f}%: a noisy measurement; more measured steps or seeds "
            "would firm it up."
        )
    if rec["mode"] == "train":
        found.append(f"Model quality at the recommended point: {_quality(best)}.")
    return found
