"""``results/recommendation.json``: one point picked from a verdict's tie set, and the answer
that says why (the standard library only).

``pick`` takes one point from the tie set by a rule of columns (least memory, then fewest
workers, then highest median by default) and gives a one-sentence reason; ``to_answer`` makes
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

from batchscope.core.verdict import TEST_NAME, Verdict

#: Bumped whenever a key of ``results/recommendation.json`` changes meaning.
SCHEMA_VERSION = 1
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
) -> tuple[Hashable, str]:
    """One point from the tie set by ``rule``, and a one-sentence reason.

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
    return choice, f"{name} is picked from the {len(tie_set)} tied points by {why}."


# ---------------------------------------------------------------- results/recommendation.json


def _grid(row: Mapping[str, Any]) -> dict[str, int]:
    return {"batch_size": int(row["batch_size"]), "num_workers": int(row["num_workers"])}


def _verdict_sentence(v: Verdict) -> str:
    if v.verdict == "disturbed":
        return "Disturbed: measured beside other work, so no test is run."
    if v.verdict == "too_noisy":
        return (
            f"Too noisy: some point has {v.n_rounds} round, and a test needs 2 or more "
            "fresh-process rounds per point, so every point is in the tie set."
        )
    tested = (
        f"Welch t on log throughput, at least {v.n_rounds} rounds per point, "
        f"Holm-adjusted at level {v.level}"
    )
    if v.verdict == "separated":
        return f"Separated: the leader is faster than every other point ({tested})."
    return f"Tie: {len(v.tie_set)} points are not significantly slower than the leader ({tested})."


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
) -> dict[str, Any]:
    """One entry of ``answers`` in ``results/recommendation.json`` (recommendation_schema.json).

    ``rows[key]`` gives each point's batch_size, num_workers and what ``rule`` names (the
    median throughput comes from the verdict when the row lacks it). ``left_out`` lists the runs
    measured under foreign load (grid keys, ``foreign_cpu_frac`` and ``result``, the file to
    redo); with a ``disturbed`` verdict no point is picked and the reason says why.
    """
    merged = {
        key: {"median_samples_per_s": verdict.stats[key]["median"], **rows[key]}
        for key in verdict.tie_set
    }
    if left_out and foreign_cpu_limit is None:
        raise ValueError("runs left out for foreign load need the limit they exceeded")
    if verdict.verdict == "disturbed":
        choice, pick_reason = None, _refusal(left_out, foreign_cpu_limit)
    else:
        choice, pick_reason = pick(verdict.tie_set, merged, rule)
        if left_out:
            pick_reason += (
                f" {len(left_out)} run(s) measured while other processes took more than"
                f" {foreign_cpu_limit:.0%} of the CPU were left out of the comparison."
            )
    members = []
    for key in verdict.tie_set:
        s = verdict.stats[key]
        members.append(
            {
                **_grid(merged[key]),
                "median_samples_per_s": s["median"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "cv": s["cv"],
                "n_rounds": s["n_rounds"],
                "p_value_vs_best": verdict.p_values[key],
            }
        )
    answer: dict[str, Any] = {"mode": mode, "model": model}
    if dataset is not None:
        answer["dataset"] = dataset
    answer.update(
        accumulation_steps=int(accumulation_steps),
        devices=int(devices),
        pick=None if choice is None else _grid(merged[choice]),
        tie_set=members,
        verdict=verdict.verdict,
        reason=f"{_verdict_sentence(verdict)} {pick_reason}",
        pick_reason=pick_reason,
        n_rounds=verdict.n_rounds,
        detectable_diff_frac=verdict.detectable_diff_frac,
        rounds_to_separate=[
            {**_grid(merged[key]), "rounds": rounds}
            for key, rounds in verdict.rounds_to_separate.items()
        ],
        left_out=[dict(run) for run in left_out],
    )
    return answer


def _refusal(left_out: Sequence[Mapping[str, Any]], limit: float) -> str:
    """Why no point is named, and what to do about it."""
    worst = max(float(run["foreign_cpu_frac"]) for run in left_out)
    points = sorted({(int(r["batch_size"]), int(r["num_workers"])) for r in left_out})
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
