"""How the stability benchmark writes points, groups, answers and figures: printed, and in its
``--json`` file."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from batchscope.core import grid
from stability.answers import Answer, Group, Point


def fmt_point(point: Point | None) -> str:
    return "none" if point is None else f"bs{point[0]}/nw{point[1]}"


def fmt_tie(answer: Answer) -> str:
    return "{" + ", ".join(fmt_point(p) for p in answer.tie_set) + "}"


def fmt_group(group: Group) -> str:
    named = dict(zip(grid.GROUP_KEYS, group, strict=True))
    text = f"{named['mode']} {named['model']}"
    if named["sequence_length"] is not None:
        text += f" seq{named['sequence_length']}"
    if named["accumulation_steps"] != 1:
        text += f" acc{named['accumulation_steps']}"
    return text + (f" dev{named['devices']}" if named["devices"] != 1 else "")


def fmt_cv(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def jsonable_sweep(s: Mapping[str, Any]) -> dict[str, Any]:
    """A sweep (``sweep.run_and_read``'s) as the ``--json`` file holds it."""
    return {
        "folder": s.get("folder"),
        "wall_s": s.get("wall_s"),
        "bench_jobs": s.get("bench_jobs"),
        "bench_job_s": s.get("bench_job_s"),
        "failed": s.get("failed"),
        "answers": {
            fmt_group(g): {"pick": a.pick, "tie_set": a.tie_set, "verdict": a.verdict}
            for g, a in s.get("answers", {}).items()
        },
        "eliminations": [
            {"point": list(k), "after_round": r} for k, r in s.get("eliminations", [])
        ],
    }


def jsonable_agreement(found: Mapping[str, Any], answers: Sequence[Answer | None]) -> dict:
    """An ``answers.agreement`` of ``answers`` as the ``--json`` file holds it (reruns from 1)."""
    return {
        **{k: v for k, v in found.items() if k != "contradictions"},
        "picks": [None if a is None else a.pick for a in answers],
        "tie_sets": [None if a is None else a.tie_set for a in answers],
        "contradictions": [
            {"claimant": c.claimant + 1, "other": c.other + 1, "point": c.point, "kind": c.kind}
            for c in found["contradictions"]
        ],
    }


def json_default(value: Any) -> Any:
    """``json.dumps``' default for what the report holds besides JSON's own types."""
    if isinstance(value, tuple | set):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {type(value)}")
