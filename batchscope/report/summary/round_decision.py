"""The decision after a round: which points the next round measures.

    python -m batchscope.report.summary.round_decision --round 2 --strategy race \\
        --level 0.05 --margin 0.05 --rounds 2 --max-rounds 8 [--budget-s 450] --order-seed 0 \\
        --foreign-cpu-limit 0.1 \\
        --previous results/rounds/round1.json \\
        --results results/runs/.../*_round1.json ... --output results/rounds/round2.json

Reads every run so far (one throughput per process: rounds, and seeds, are independent
measurements) and, per group (mode × model × sequence length × accumulation × devices):

- before the race's first look (``measure.rounds``), and with ``full``: every point goes on
  (but one whose runs all failed to measure, e.g. out of memory: that is its result);
- ``race``, from the first look on: multiple comparisons with the best on every run so far of
  the group's points, at the level this look spends (``batchscope.core.verdict.Design``); the
  points measured in this round that are outside the tie set leave the race (keeping their
  runs), and a group that is separated or equivalent at that level stops. The others go on.
  A point that lost runs to foreign load and kept fewer than 2 undisturbed ones is measured
  again, and neither leaves nor lets its group stop: the final verdict would be `disturbed`.

A next round that would take the sweep past ``--budget-s`` device-seconds (each run's
``process_s`` × devices; the next round's cost estimated from each point's runs so far) does not
start. The same results always give the same decision (no clock, no randomness but the recorded
order seed), so a rerun over them reaches the same next round. Writes the decision as JSON: the
points of the next round, those eliminated now (and before) with the round, the groups settled,
the device-seconds spent and the next round's job order seed.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from batchscope.core import grid, results, rounds, verdict


@dataclass
class Runs:
    """What the runs so far say, per point (a ``grid.point_of`` tuple)."""

    values: dict[tuple, list[float]] = field(default_factory=dict)  # ok, undisturbed
    blocks: dict[tuple, list[int]] = field(default_factory=dict)  # their rounds
    loaded: set[tuple] = field(default_factory=set)  # a run measured under foreign load
    device_s: dict[tuple, list[float]] = field(default_factory=dict)  # every run's, if recorded
    measured_in: dict[tuple, set[int]] = field(default_factory=dict)  # rounds with a run

    def spent_s(self) -> float:
        return sum(sum(v) for v in self.device_s.values())


def read_runs(result_paths: Sequence[str], foreign_cpu_limit: float = 1.0) -> Runs:
    """Per point, the throughput and round of each run that finished ok (oom and diverged runs
    have none: such a point is not compared, and not eliminated, on speed), the points with a
    run measured under foreign load (above ``foreign_cpu_limit``, left out), and each run's
    device-seconds."""
    runs = Runs()
    for path in result_paths:
        result = results.read_json(path)
        point = grid.point_of(result)
        round_ = int(result.get("round") or 1)
        runs.values.setdefault(point, [])
        runs.blocks.setdefault(point, [])
        runs.measured_in.setdefault(point, set()).add(round_)
        seconds = result.get("process_s")
        if seconds is not None:
            devices = int(result.get("devices") or 1)
            runs.device_s.setdefault(point, []).append(float(seconds) * devices)
        if result.get("status") == "ok" and result.get("samples_per_s"):
            if verdict.under_foreign_load(result.get("foreign_cpu_frac"), foreign_cpu_limit):
                runs.loaded.add(point)
            else:
                runs.values[point].append(float(result["samples_per_s"]))
                runs.blocks[point].append(round_)
    return runs


@dataclass
class Decision:
    """The points of the next round, those eliminated now, the groups settled (with their
    state) and why the sweep stops, if it does."""

    going_on: list[tuple]
    eliminated: list[tuple]
    settled: dict[tuple, str]
    stopped: str | None = None


def decide_round(runs: Runs, round_: int, design: verdict.Design) -> Decision:
    """Which points of this round go on (see the module docstring), before any budget."""
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for point in runs.values:
        groups[grid.group_of(point)].append(point)
    going_on: list[tuple] = []
    out: list[tuple] = []
    settled: dict[tuple, str] = {}
    # a point that lost runs to foreign load and kept fewer than 2 undisturbed ones would make
    # the final verdict `disturbed`: it is measured again, never eliminated or settled on
    short = set(verdict.short_of_clean_runs(runs.values, {p: 1 for p in runs.loaded}))
    for group, members in groups.items():
        here = [p for p in members if round_ in runs.measured_in.get(p, ())]
        remeasure = [p for p in here if not runs.values[p] and p in short]
        # a point with no run that finished ok (out of memory, diverged) has its result: it
        # is not measured again, and not compared on speed
        comparable = {p: runs.values[p] for p in members if runs.values[p]}
        if not design.looks_after(round_):
            going_on.extend(p for p in here if runs.values[p] or p in remeasure)
            continue
        dropped: frozenset = frozenset()
        if len(comparable) > 1:
            found = verdict.look(
                comparable,
                design.look_level(round_),
                design.margin,
                blocks={p: runs.blocks[p] for p in comparable},
                # not measured this round: an earlier look eliminated it
                eliminated=[p for p in comparable if p not in here],
            )
            dropped = (found.eliminated & set(here)) - short
            if found.settled and not short & set(members):
                settled[group] = found.state
        left = [p for p in here if p in comparable and p not in dropped]
        out.extend(sorted(dropped))
        if group not in settled and len(left) + len(remeasure) > 1:
            going_on.extend(left + remeasure)
    return Decision(sorted(going_on), sorted(out), settled)


def next_round_s(runs: Runs, points: Sequence[tuple], round_: int) -> float | None:
    """About the device-seconds of the next round: each point's mean run so far, times its runs
    in this round (its seeds); None when some point has no recorded device-seconds."""
    total = 0.0
    for point in points:
        spent = runs.device_s.get(point)
        if not spent:
            return None
        per_round = len(spent) / max(1, len(runs.measured_in[point]))
        total += per_round * sum(spent) / len(spent)
    return total


def apply_budget(decision: Decision, runs: Runs, round_: int, budget_s: float | None) -> Decision:
    """No next round when it would take the sweep past ``budget_s`` device-seconds."""
    if budget_s is None or not decision.going_on:
        return decision
    cost = next_round_s(runs, decision.going_on, round_)
    if cost is not None and runs.spent_s() + cost > budget_s:
        return Decision([], decision.eliminated, decision.settled, stopped="budget")
    return decision


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.summary.round_decision",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--round", type=int, required=True, help="the round just finished")
    parser.add_argument("--strategy", choices=rounds.STRATEGIES, required=True)
    parser.add_argument("--level", type=float, required=True, help="sweep.level")
    parser.add_argument("--margin", type=float, required=True, help="sweep.margin_frac")
    parser.add_argument("--rounds", type=int, required=True, help="measure.rounds")
    parser.add_argument("--max-rounds", type=int, required=True, help="sweep.max_rounds")
    parser.add_argument("--budget-s", type=float, default=None, help="sweep.budget_s")
    parser.add_argument("--order-seed", type=int, required=True)
    parser.add_argument(
        "--foreign-cpu-limit", type=float, required=True, help="sweep.foreign_cpu_limit_frac"
    )
    parser.add_argument("--previous", nargs="*", default=[], help="the previous decision")
    parser.add_argument("--results", nargs="*", default=[], help="every run so far")
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    design = verdict.Design(
        args.level, args.margin, args.strategy, first_look=args.rounds, max_rounds=args.max_rounds
    )
    runs = read_runs(args.results, args.foreign_cpu_limit)
    decision = apply_budget(decide_round(runs, args.round, design), runs, args.round, args.budget_s)
    previous: dict[str, Any] = {"eliminated": [], "settled": []}
    for path in args.previous:
        previous = results.read_json(path)
    looked = design.looks_after(args.round)
    document = {
        "round": args.round,
        "strategy": args.strategy,
        "level": args.level,
        "look_level": design.look_level(args.round) if looked else None,
        "margin": args.margin,
        "test": verdict.TEST_NAME,
        "order_seed": args.order_seed,
        "measured": [grid.as_dict(p) for p in sorted(runs.values)],
        "under_foreign_load": [grid.as_dict(p) for p in sorted(runs.loaded)],
        "next_round": [list(p) for p in decision.going_on],
        "eliminated": previous["eliminated"]
        + [{**grid.as_dict(p), "eliminated_at_round": args.round} for p in decision.eliminated],
        "settled": previous.get("settled", [])
        + [
            {**dict(zip(grid.GROUP_KEYS, g, strict=True)), "state": s, "at_round": args.round}
            for g, s in sorted(decision.settled.items(), key=lambda item: str(item[0]))
        ],
        "device_s": runs.spent_s(),
        "budget_s": args.budget_s,
        "stopped": decision.stopped,
    }
    results.write_json(args.output, document)
    print(
        f"batchscope rounds: after round {args.round}: {len(decision.going_on)} point(s) go on,"
        f" {len(decision.eliminated)} eliminated, {len(decision.settled)} group(s) settled"
        f" ({args.strategy}, level {args.level}"
        + (f", this look {document['look_level']:.4g}" if looked else ", no look")
        + (", budget spent" if decision.stopped else "")
        + ")",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
