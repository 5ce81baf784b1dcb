"""The decision after a round: which points the next round measures.

    python -m batchscope.report.rounds --round 2 --rounds 3 --strategy race --level 0.05 \\
        --order-seed 0 --previous results/rounds/round1.json \\
        --results results/runs/.../*_round1.json ... --output results/rounds/round2.json

Reads every run so far of the points measured in this round (one throughput per fresh
process: rounds, and seeds, are independent measurements) and, per group (mode × model ×
accumulation):

- ``full``: every point goes on (but one whose runs all failed to measure, e.g. out of
  memory: that is its result).
- ``race``: a point significantly slower than the group's leader leaves the race
  (``batchscope.core.verdict.eliminated``: one-sided Welch tests on log throughput, Holm over the
  comparisons, the level split over the race's looks); it keeps its measurements. A group in
  which one point is left is decided and measures no more.

The same results always give the same decision (no clock, no randomness but the recorded order
seed), so a rerun over them reaches the same next round. Writes the decision as JSON: the
points of the next round, those eliminated now (and before) with the round, and the next
round's job order seed.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from batchscope.core import results, rounds, verdict


def throughputs(
    result_paths: Sequence[str], foreign_cpu_limit: float = 1.0
) -> tuple[dict[tuple, list[float]], set[tuple]]:
    """Per point, the throughput of each of its runs that finished ok (oom and diverged runs
    have none: such a point is not compared, and not eliminated, on speed); and the points with
    a run measured under foreign load (above ``foreign_cpu_limit``), whose run is left out."""
    values: dict[tuple, list[float]] = defaultdict(list)
    loaded: set[tuple] = set()
    for path in result_paths:
        result = results.read_json(path)
        point = rounds.point_of(result)
        values.setdefault(point, [])
        if result.get("status") == "ok" and result.get("samples_per_s"):
            if verdict.under_foreign_load(result.get("foreign_cpu_frac"), foreign_cpu_limit):
                loaded.add(point)
            else:
                values[point].append(float(result["samples_per_s"]))
    return dict(values), loaded


def decide_round(
    values: Mapping[tuple, list[float]],
    *,
    strategy: str,
    level: float,
    looks: int,
    loaded: set[tuple] = frozenset(),
) -> tuple[list[tuple], list[tuple]]:
    """(points of the next round, points eliminated now), both sorted. A point in ``loaded``
    whose every ok run was measured under foreign load is not compared but goes on, so that
    the next round measures it undisturbed."""
    groups: dict[tuple, dict[tuple, list[float]]] = defaultdict(dict)
    for point, runs in values.items():
        groups[rounds.group_of(point)][point] = runs
    going_on: list[tuple] = []
    out: list[tuple] = []
    for members in groups.values():
        remeasure = [p for p, runs in members.items() if not runs and p in loaded]
        if strategy == "full":
            going_on.extend(p for p, runs in members.items() if runs or p in loaded)
            continue
        # a point with no run that finished ok (out of memory, diverged) has its result: it
        # is not measured again, and not compared on speed
        comparable = {p: runs for p, runs in members.items() if runs}
        dropped = set()
        if len(comparable) > 1:
            dropped = verdict.eliminated(comparable, level, looks=looks)
        left = [p for p in comparable if p not in dropped]
        out.extend(dropped)
        if len(left) + len(remeasure) > 1:  # one point left: the group is decided
            going_on.extend(left + remeasure)
    return sorted(going_on), sorted(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.rounds", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--round", type=int, required=True, help="the round just finished")
    parser.add_argument("--rounds", type=int, required=True, help="measure.rounds")
    parser.add_argument("--strategy", choices=("race", "full"), required=True)
    parser.add_argument("--level", type=float, required=True)
    parser.add_argument("--order-seed", type=int, required=True)
    parser.add_argument(
        "--foreign-cpu-limit", type=float, required=True, help="sweep.foreign_cpu_limit"
    )
    parser.add_argument("--previous", nargs="*", default=[], help="the previous decision")
    parser.add_argument("--results", nargs="+", required=True, help="every run so far")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    values, loaded = throughputs(args.results, args.foreign_cpu_limit)
    looks = max(1, args.rounds - 1)  # a race looks after every round but the last
    going_on, dropped = decide_round(
        values, strategy=args.strategy, level=args.level, looks=looks, loaded=loaded
    )
    earlier: list[dict[str, Any]] = []
    for path in args.previous:
        earlier = results.read_json(path)["eliminated"]
    decision = {
        "round": args.round,
        "strategy": args.strategy,
        "level": args.level,
        "looks": looks,
        "test": verdict.TEST_NAME,
        "order_seed": args.order_seed,
        "measured": [rounds.as_dict(p) for p in sorted(values)],
        "under_foreign_load": [rounds.as_dict(p) for p in sorted(loaded)],
        "next_round": [list(p) for p in going_on],
        "eliminated": earlier
        + [{**rounds.as_dict(p), "eliminated_at_round": args.round} for p in dropped],
    }
    results.write_json(args.output, decision)
    print(
        f"batchscope rounds: after round {args.round}: {len(going_on)} point(s) go on,"
        f" {len(dropped)} eliminated ({args.strategy}, level {args.level})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
