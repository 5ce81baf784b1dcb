"""Rounds: every grid point measured again, each time in a fresh process, in a shuffled order.

A *point* is what the recommendation compares: mode × model × batch size × accumulation ×
workers × devices. Its measurements are its runs over rounds (and seeds, which are learning
variance but also independent processes). A *group* is what one answer is given for: mode ×
model × accumulation × devices. The race (``sweep.strategy: race``) decides after each round
which points stay.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: The keys of a point, and of the group it is compared within.
#: (``sequence_length``: token data only, else None; a group is one sequence length)
POINT_KEYS = (
    "mode",
    "model",
    "sequence_length",
    "batch_size",
    "accumulation_steps",
    "num_workers",
    "devices",
)
GROUP_KEYS = ("mode", "model", "sequence_length", "accumulation_steps", "devices")
#: Point keys added after results were written: a result without one has this value.
LATER_POINT_KEYS = {"devices": 1}
_INT_KEYS = ("batch_size", "accumulation_steps", "num_workers", "devices")


def point_of(row: Mapping[str, Any]) -> tuple:
    """The point a result (or any mapping with the point keys) belongs to."""
    values = {**LATER_POINT_KEYS, **row}
    return tuple(_point_value(k, values.get(k)) for k in POINT_KEYS)


def _point_value(key: str, value: Any) -> Any:
    if key == "sequence_length":  # absent or empty (None, NaN, pandas' NA) for images
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    return int(value) if key in _INT_KEYS else str(value)


def group_of(point: Sequence) -> tuple:
    """The group of a point: mode, model, sequence length, accumulation, devices."""
    named = dict(zip(POINT_KEYS, point, strict=True))
    return tuple(named[k] for k in GROUP_KEYS)


def as_dict(point: Sequence) -> dict[str, Any]:
    return dict(zip(POINT_KEYS, point, strict=True))


def job_order(jobs: Iterable[tuple], order_seed: int, round_: int) -> list[tuple]:
    """The jobs of a round (any hashable, sortable keys) in a shuffled order that depends only on
    the seed and the round: the same sweep reruns in the same order, and each round in another."""
    ordered = sorted(jobs)
    random.Random(f"batchscope-round-order:{order_seed}:{round_}").shuffle(ordered)
    return ordered


def priority(job: tuple, jobs: Iterable[tuple], order_seed: int, round_: int, rounds: int) -> int:
    """A Snakemake priority (higher runs first) that runs earlier rounds first and, within a
    round, the jobs in :func:`job_order`'s shuffled order."""
    ranks = _ranks(tuple(sorted(jobs)), order_seed, round_)
    return (rounds - round_) * (len(ranks) + 1) + (len(ranks) - ranks[job])


@functools.lru_cache(maxsize=64)
def _ranks(jobs: tuple, order_seed: int, round_: int) -> dict[tuple, int]:
    """Each job's place in the round's shuffled order, shuffled once per round (Snakemake asks
    for every job's priority: a shuffle per job would be quadratic in the grid)."""
    return {job: i for i, job in enumerate(job_order(jobs, order_seed, round_))}
