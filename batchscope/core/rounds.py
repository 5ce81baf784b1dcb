"""Rounds: every grid point measured again, each time in a fresh process, in a shuffled order.

Points and groups are :mod:`batchscope.core.grid`'s. A point's measurements are its runs over
rounds (and seeds, which are learning variance but also independent processes). The race
(``sweep.strategy: race``) decides after each round which points stay.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable

#: ``sweep.strategy``: the race (points that are shown slower stop) or every point every round.
STRATEGIES = ("race", "full")


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
