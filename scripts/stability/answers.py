"""Pure: the answers of results/recommendation.json, how several reruns' answers agree, which
separations another rerun contradicts (scripts/stability_benchmark.py's docstring defines each
figure), and the run-to-run CV."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from batchscope.core import grid

#: The kinds of contradiction, strongest first.
CONTRADICTION_KINDS = ("separated-other", "excluded", "other-leader", "other-pick")
STRONG_KINDS = ("separated-other", "excluded")

Point = tuple[int, int]  # batch_size, num_workers: what an answer picks from
Group = tuple  # batchscope.core.grid.GROUP_KEYS: what an answer is for


@dataclass(frozen=True)
class Answer:
    """One entry of results/recommendation.json, reduced to what agreement looks at."""

    pick: Point | None  # None: disturbed, no point named
    tie_set: tuple[Point, ...]  # leader first
    verdict: str

    @property
    def leader(self) -> Point:
        return self.tie_set[0]


@dataclass(frozen=True)
class Contradiction:
    claimant: int  # index of the rerun whose verdict is separated
    other: int  # index of the rerun that contradicts it
    point: Point  # the claimant's separated pick
    kind: str


def _point(entry: Mapping[str, Any]) -> Point:
    return int(entry["batch_size"]), int(entry["num_workers"])


def answers_of(document: Mapping[str, Any]) -> dict[Group, Answer]:
    """The answers of a results/recommendation.json document, by group (grid.GROUP_KEYS)."""
    out = {}
    for entry in document["answers"]:
        group = grid.group_key(entry)
        tie = tuple(_point(member) for member in entry["tie_set"])
        pick = None if entry["pick"] is None else _point(entry["pick"])  # None: disturbed
        out[group] = Answer(pick=pick, tie_set=tie, verdict=entry["verdict"])
    return out


def contradiction_kind(claim: Answer, other: Answer) -> str | None:
    """How ``other`` contradicts ``claim``'s separation, or None (no claim, or no conflict)."""
    if claim.verdict != "separated" or other.verdict == "disturbed":
        return None
    x = claim.pick
    if other.verdict == "separated" and other.pick != x:
        return "separated-other"
    if x not in other.tie_set:
        return "excluded"
    if other.leader != x:
        return "other-leader"
    if other.pick != x:
        return "other-pick"
    return None


def contradictions(answers: Sequence[Answer | None]) -> list[Contradiction]:
    """Every ordered pair (A, B) of reruns in which B contradicts A's separation; reruns
    without this answer (None: the sweep failed, or the group is missing) are skipped."""
    found = []
    for i, claim in enumerate(answers):
        for j, other in enumerate(answers):
            if i == j or claim is None or other is None:
                continue
            kind = contradiction_kind(claim, other)
            if kind is not None:
                found.append(Contradiction(i, j, claim.pick, kind))
    return found


def agreement(answers: Sequence[Answer | None]) -> dict[str, Any]:
    """How a group's answers from several reruns relate (the benchmark's docstring defines
    each)."""
    present = [a for a in answers if a is not None]
    found = contradictions(answers)
    verdicts = [a.verdict if a is not None else None for a in answers]
    return {
        "n": len(present),
        "same_pick": len({a.pick for a in present}) <= 1,
        "agree": all(a.pick in b.tie_set for a in present for b in present),
        "verdicts": verdicts,
        "verdict_flips": len({a.verdict for a in present}) > 1,
        "contradictions": found,
        "contradicted": bool(found),
        "strongly_contradicted": any(c.kind in STRONG_KINDS for c in found),
    }


def full_vs_race(full: Answer | None, race: Answer | None) -> dict[str, Any]:
    """Whether the race reached full's answer: equal picks, or race's pick in full's tie set."""
    if full is None or race is None:
        return {"agree": None, "same_pick": None, "race_pick_in_full_tie": None}
    same = full.pick == race.pick
    inside = race.pick in full.tie_set
    return {
        "agree": same or inside,
        "same_pick": same,
        "race_pick_in_full_tie": inside,
        "full_pick_in_race_tie": full.pick in race.tie_set,
        "contradictions": contradictions([full, race]),
    }


def cv(values: Iterable[float]) -> float | None:
    """Run-to-run coefficient of variation, std(ddof=1) / mean; None below 2 values."""
    xs = [float(v) for v in values]
    if len(xs) < 2:
        return None
    return statistics.stdev(xs) / statistics.fmean(xs)
