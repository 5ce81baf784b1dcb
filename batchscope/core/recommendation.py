"""``results/recommendation.json``: one point picked from a verdict's tie set, and the answer
that says why (the standard library only).

``pick`` takes one point from a set by a rule of columns (least memory, then fewest workers,
then highest median by default) and gives a one-sentence reason; ``choose`` says which set the
verdict lets the rule pick from (only points shown within the margin); ``to_answer`` makes
one entry of the document's ``answers`` from a :class:`batchscope.core.verdict.Verdict` (or
says why no point is named when the runs were disturbed); ``to_document`` wraps the answers;
``load_schema`` reads ``recommendation_schema.json``, the document's JSON Schema.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from batchscope.core import grid
from batchscope.core.verdict import TEST_NAME, Verdict

#: Bumped whenever a key of ``results/recommendation.json`` changes meaning.
SCHEMA_VERSION = 2
SCHEMA_PATH = Path(__file__).with_name("recommendation_schema.json")
#: Least memory, then fewest workers, then highest median ("-" = highest first).
DEFAULT_RULE = ("peak_mem_mb", "num_workers", "-median_samples_per_s")

_LABELS = {
    "peak_mem_mb": ("least peak memory", "most peak memory"),
    "num_workers": ("fewest DataLoader workers", "most DataLoader workers"),
    "batch_size": ("smallest batch", "largest batch"),
    "median_samples_per_s": ("lowest median throughput", "highest median throughput"),
}


# ---------------------------------------------------------------- picking from the tie set


def _criterion(name: str) -> tuple[str, bool]:
    return (name[1:], True) if name.startswith("-") else (name, False)


def _sort_value(row: Mapping[str, Any], column: str, descending: bool) -> tuple[int, float]:
    value = row.get(column)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return (1, 0.0)  # missing values sort last either way
    return (0, -float(value) if descending else float(value))


def _shown(value: Any) -> str:
    """A value as a reason quotes it: whole numbers plain, others to 3 significant digits."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.0f}" if abs(value) >= 100 or value.is_integer() else f"{value:.3g}"
    return str(value)


def describe(row: Mapping[str, Any], key: Hashable) -> str:
    """'batch_size=64, num_workers=2' from a row, or the key itself when the row lacks them."""
    if "batch_size" in row and "num_workers" in row:
        return f"batch_size={row['batch_size']}, num_workers={row['num_workers']}"
    return repr(key)


def pick(
    tie_set: Sequence[Hashable],
    rows: Mapping[Hashable, Mapping[str, Any]],
    rule: Sequence[str] = DEFAULT_RULE,
    what: str = "tied points",
) -> tuple[Hashable, str]:
    """One point from the tie set by ``rule``, and a one-sentence reason (``what`` names the
    candidates in it).

    Each criterion is a column of ``rows[key]`` (lowest first; "-column" = highest first;
    missing or NaN values last). Criteria apply in turn to the points still tied; if all
    tie, the first of ``tie_set`` in order (the leader first) is taken.
    """
    if not tie_set:
        raise ValueError("the tie set is empty")
    candidates, deciding = list(tie_set), []
    for name in rule:
        column, descending = _criterion(name)
        best = min(_sort_value(rows[k], column, descending) for k in candidates)
        narrowed = [k for k in candidates if _sort_value(rows[k], column, descending) == best]
        if len(narrowed) < len(candidates):
            label = _LABELS.get(column, (f"lowest {column}", f"highest {column}"))[descending]
            deciding.append(f"{label} ({column}={_shown(rows[narrowed[0]].get(column))})")
        candidates = narrowed
        if len(candidates) == 1:
            break
    choice = candidates[0]
    name = describe(rows[choice], choice)
    if len(tie_set) == 1:
        return choice, f"{name} is the only point in the tie set."
    if len(candidates) > 1:
        deciding.append("order of median throughput")
    why = ", then ".join(deciding)
    return choice, f"{name} is picked from the {len(tie_set)} {what} by {why}."


# ---------------------------------------------------------------- results/recommendation.json


def choice_of(row: Mapping[str, Any]) -> dict[str, int]:
    """The choice a row names (``grid.CHOICE_KEYS``: batch size and workers), as the answer
    writes a pick."""
    return {key: int(row[key]) for key in grid.CHOICE_KEYS}


def _pct(fraction: float) -> str:
    return f"{100 * fraction:.0f}%"


def _verdict_sentence(v: Verdict, rounds: int) -> str:
    """What the state means, in one sentence (the test named)."""
    if v.verdict == "disturbed":
        return "Disturbed: measured beside other work, so no test is run."
    tested = (
        f"multiple comparisons with the best on log throughput, the run-to-run spread pooled"
        f" over the group's points, at least {v.n_rounds} run(s) per point, level {v.level}"
    )
    if v.verdict == "separated":
        if len(v.stats) == 1:
            return "Separated: the only point of its group that ran."
        return f"Separated: the best point is faster than every other point ({tested})."
    if v.verdict == "equivalent":
        return (
            f"Equivalent: {len(v.tie_set)} points could be the best and each is shown within"
            f" {_pct(v.margin)} (sweep.margin_frac) of it, so any of them is as good ({tested})."
        )
    if v.detectable_diff_frac is None:
        return (
            "Undetermined: one run per point, so the run-to-run spread is unknown and no point"
            " can be called faster; measure 2 or more rounds (measure.rounds)."
        )
    settle = f" {rounds} rounds per point would settle it." if rounds else ""
    return (
        f"Undetermined: {len(v.tie_set)} points could still be the best and not all are shown"
        f" within {_pct(v.margin)} of it; these runs tell apart differences of about"
        f" {_pct(v.detectable_diff_frac)} or more ({tested}).{settle}"
    )


def choose(
    verdict: Verdict,
    rows: Mapping[Hashable, Mapping[str, Any]],
    rule: Sequence[str] = DEFAULT_RULE,
) -> tuple[Hashable | None, str]:
    """The point to use, and why: separated, the best; equivalent, the rule among the tie set
    (all shown within the margin); undetermined, the best estimate, unless it is itself shown
    within the margin, when the rule picks among the points that are; disturbed, none."""
    if verdict.verdict == "disturbed":
        return None, ""
    leader = verdict.leader
    if verdict.verdict == "separated":
        return leader, f"{describe(rows[leader], leader)} is the only point in the tie set."
    if verdict.verdict == "equivalent":
        return pick(verdict.tie_set, rows, rule, f"points within {_pct(verdict.margin)}")
    if leader in verdict.within_margin and len(verdict.within_margin) > 1:
        what = f"points shown within {_pct(verdict.margin)} of the best"
        return pick(verdict.within_margin, rows, rule, what)
    return leader, (
        f"{describe(rows[leader], leader)} is the best estimate (the highest throughput by the"
        " pooled model); the others in the tie set are not shown to be slower, nor within the"
        " margin."
    )


def to_answer(
    verdict: Verdict,
    rows: Mapping[Hashable, Mapping[str, Any]],
    *,
    mode: str,
    model: str,
    accumulation_steps: int,
    devices: int = 1,
    rule: Sequence[str] = DEFAULT_RULE,
    dataset: str | None = None,
    left_out: Sequence[Mapping[str, Any]] = (),
    foreign_cpu_limit: float | None = None,
    short: Sequence[Hashable] = (),
    spent: Mapping[Hashable, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """One entry of ``answers`` in ``results/recommendation.json`` (recommendation_schema.json).

    ``rows[key]`` gives each point's batch_size, num_workers and what ``rule`` names (the
    median throughput comes from the verdict when the row lacks it). ``left_out`` lists the runs
    measured under foreign load (grid keys, ``foreign_cpu_frac`` and ``result``, the file to
    redo); with a ``disturbed`` verdict no point is picked and the reason says why, naming the
    points ``short`` of undisturbed runs (``verdict.short_of_clean_runs``). ``spent``
    gives per point its ``rounds``, ``runs_per_round`` (seeds), ``device_s`` (summed over its
    runs) and ``eliminated_at_round``.
    """
    merged = {
        key: {"median_samples_per_s": verdict.stats[key]["median"], **rows[key]}
        for key in verdict.stats
    }
    spent = spent or {}
    if left_out and foreign_cpu_limit is None:
        raise ValueError("runs left out for foreign load need the limit they exceeded")
    if verdict.verdict == "disturbed" and not short:
        raise ValueError("a disturbed verdict needs the points short of undisturbed runs")
    choice, pick_reason = choose(verdict, merged, rule)
    if choice is None:
        pick_reason = _refusal(left_out, foreign_cpu_limit, [rows[key] for key in short])
    elif left_out:
        pick_reason += (
            f" {len(left_out)} run(s) measured while other processes took more than"
            f" {foreign_cpu_limit:.0%} of the CPU were left out of the comparison."
        )
    settle = _to_settle(verdict, spent)
    answer: dict[str, Any] = {"mode": mode, "model": model}
    if dataset is not None:
        answer["dataset"] = dataset
    answer.update(
        accumulation_steps=int(accumulation_steps),
        devices=int(devices),
        pick=None if choice is None else choice_of(merged[choice]),
        verdict=verdict.verdict,
        margin=verdict.margin,
        level_final=verdict.level_final,
        tie_set=[_member(verdict, key, merged[key]) for key in verdict.tie_set],
        reason=f"{_verdict_sentence(verdict, settle['rounds'] or 0)} {pick_reason}",
        pick_reason=pick_reason,
        n_rounds=verdict.n_rounds,
        detectable_diff_frac=verdict.detectable_diff_frac,
        to_settle=settle,
        points=[_spent(merged[key], spent.get(key, {})) for key in _by_estimate(verdict)],
        device_s=_device_s(spent),
        model_fit=_fit(verdict, merged),
        left_out=[dict(run) for run in left_out],
    )
    return answer


def _member(v: Verdict, key: Hashable, row: Mapping[str, Any]) -> dict[str, Any]:
    s = v.stats[key]
    return {
        **choice_of(row),
        "median_samples_per_s": s["median"],
        "estimate_samples_per_s": v.estimate[key],
        "ci_low": s["ci_low"],
        "ci_high": s["ci_high"],
        "cv": s["cv"],
        "n_rounds": s["n_rounds"],
        "ratio_to_best": v.ratio[key],
        "ratio_low": v.ratio_low[key],
        "ratio_high": v.ratio_high[key],
        "within_margin": key in v.within_margin,
    }


def _by_estimate(v: Verdict) -> list[Hashable]:
    return sorted(v.stats, key=lambda key: -v.estimate[key])


def _spent(row: Mapping[str, Any], spent: Mapping[str, Any]) -> dict[str, Any]:
    return {
        **choice_of(row),
        "rounds": spent.get("rounds"),
        "eliminated_at_round": spent.get("eliminated_at_round"),
        "device_s": spent.get("device_s"),
    }


def _device_s(spent: Mapping[Hashable, Mapping[str, Any]]) -> float | None:
    values = [s.get("device_s") for s in spent.values()]
    known = [float(v) for v in values if v is not None]
    return sum(known) if known else None


def _to_settle(v: Verdict, spent: Mapping[Hashable, Mapping[str, Any]]) -> dict[str, Any]:
    """Undetermined: the rounds per point, and about the device-seconds, that would settle the
    tie set (each member excluded or shown within the margin, with POWER); None otherwise."""
    out: dict[str, Any] = {"rounds": None, "device_s": None}
    if v.verdict != "undetermined" or not v.runs_to_settle:
        return out
    needed = list(v.runs_to_settle.values())
    if any(n is None for n in needed):
        return out
    runs = max(needed)
    per_round = max(int(spent.get(k, {}).get("runs_per_round") or 1) for k in v.tie_set)
    rounds = -(-runs // per_round)
    out["rounds"] = rounds
    costs = []
    for key in v.tie_set:
        s = spent.get(key, {})
        if s.get("device_s") is None or not s.get("rounds"):
            return out
        more = max(0, rounds - int(s["rounds"]))
        costs.append(more * float(s["device_s"]) / int(s["rounds"]))
    out["device_s"] = sum(costs)
    return out


def _fit(v: Verdict, rows: Mapping[Hashable, Mapping[str, Any]]) -> dict[str, Any] | None:
    if not v.model:  # disturbed: no model was fitted
        return None
    model = dict(v.model)
    model["noisy"] = [choice_of(rows[key]) for key in model.get("noisy", [])]
    return model


def _refusal(
    left_out: Sequence[Mapping[str, Any]], limit: float, short: Sequence[Mapping[str, Any]]
) -> str:
    """Why no point is named (the ``short`` points' rows: those left with fewer than 2
    undisturbed runs), and what to do about it."""
    worst = max(float(run["foreign_cpu_frac"]) for run in left_out)
    points = sorted({(int(r["batch_size"]), int(r["num_workers"])) for r in short})
    named = "; ".join(f"batch_size={b}, num_workers={w}" for b, w in points)
    return (
        f"No point is named: {len(left_out)} run(s) were measured while other processes took"
        f" more than {limit:.0%} of the CPU (up to {worst:.0%}), leaving {named} with fewer than"
        " 2 undisturbed rounds, so a difference could be the other work's, not the settings'."
        f" Rerun them when the machine is quiet: delete {_files(left_out)} and run the workflow"
        " again; only they are redone."
    )


def _files(runs: Sequence[Mapping[str, Any]], shown: int = 4) -> str:
    """The runs' result files, the first ``shown`` named (all of them are in ``left_out``)."""
    names = [str(run["result"]) for run in runs]
    if len(names) <= shown:
        return " ".join(names)
    return " ".join(names[:shown]) + f" and {len(names) - shown} more (left_out lists them)"


def to_document(answers: Sequence[Mapping[str, Any]], level: float) -> dict[str, Any]:
    """The whole ``results/recommendation.json`` object around the answers."""
    return {
        "schema_version": SCHEMA_VERSION,
        "level": level,
        "test": TEST_NAME,
        "answers": list(answers),
    }


def load_schema() -> dict[str, Any]:
    """The JSON Schema of ``results/recommendation.json``."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
