"""Part (b) of the stability benchmark: one grid swept twice from scratch, every point every
round (``full``) and with the race; what the race saves, what it eliminated, and whether it
reached full's answers."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps import heading, load_config

from batchscope.core import config as configuration
from stability.answers import Answer, Group, full_vs_race
from stability.sweep import run_and_read
from stability.text import fmt_group, fmt_point, fmt_s, fmt_tie, jsonable_sweep, yes_no

RACE_GOAL = 0.40


def race_config(args: argparse.Namespace) -> dict[str, Any]:
    """The default sweep on the ``--race-*`` grid, with the ``--race-config`` overrides."""
    config = load_config()
    config.update(
        batch_sizes=args.race_batch_sizes,
        num_workers=args.race_workers,
        modes=args.race_modes,
    )
    config.setdefault("measure", {})["ceiling"] = args.race_ceiling
    return configuration.with_overrides(config, args.race_config)


def part_race(args: argparse.Namespace, workdir: Path) -> dict:
    config = race_config(args)
    rounds = int(config.get("measure", {}).get("rounds", 3))
    heading(
        f"(b) full vs race: batch {args.race_batch_sizes} x workers {args.race_workers},"
        f" {'/'.join(args.race_modes)}, {rounds} rounds"
    )
    if args.race_config:
        print(f"overrides: {' '.join(args.race_config)}")
    sweeps = {}
    for strategy in ("full", "race"):
        print(f"strategy {strategy}:", flush=True)
        chosen = configuration.with_overrides(config, [f"sweep.strategy={strategy}"])
        sweeps[strategy] = run_and_read(args, workdir / f"sweep-{strategy}", chosen)
    full, race = sweeps["full"], sweeps["race"]
    print(f"\n{'strategy':>8}  {'wall':>16}  {'bench jobs':>10}  {'job-seconds':>11}  status")
    for name, s in sweeps.items():
        print(
            f"{name:>8}  {fmt_s(s.get('wall_s')):>16}  {s.get('bench_jobs', 0):>10}"
            f"  {s.get('bench_job_s', 0.0):>11.0f}  {'FAILED' if 'failed' in s else 'ok'}"
        )
    ratio, jobs_ratio = print_ratios(full, race, rounds)
    full_answers, race_answers = full.get("answers", {}), race.get("answers", {})
    wrong = print_eliminations(race.get("eliminations", []), full_answers)
    return {
        "rounds": rounds,
        "full": jsonable_sweep(full),
        "race": jsonable_sweep(race),
        "job_seconds_ratio": ratio,
        "jobs_ratio": jobs_ratio,
        "floor": min(1.0, 2 / rounds),
        "eliminated_in_full_tie": wrong,
        "answers": print_answers(full_answers, race_answers),
    }


def print_ratios(full: dict, race: dict, rounds: int) -> tuple[float | None, float | None]:
    """Race / full of job-seconds and of jobs (None when a sweep has none), and their floor."""
    if not (full.get("bench_job_s") and race.get("bench_jobs") is not None):
        return None, None
    ratio = race["bench_job_s"] / full["bench_job_s"]
    jobs_ratio = race["bench_jobs"] / full["bench_jobs"]
    print(
        f"race / full job-seconds = {ratio:.2f}   (the goal: <= {RACE_GOAL:.2f});"
        f" race / full bench jobs = {jobs_ratio:.2f}"
    )
    print(
        f"floor of that ratio by design: nothing is eliminated before every point has 2"
        f" rounds, so the race runs at least 2/{rounds} = {min(1.0, 2 / rounds):.2f} of"
        " full's jobs"
    )
    return ratio, jobs_ratio


def print_eliminations(eliminations: list, full_answers: Mapping[Group, Answer]) -> list[str]:
    """What the race eliminated, and after which round; the eliminated points that are in
    full's tie set (the race "dropping the wrong point")."""
    print("\nwhat the race eliminated (point: after round):")
    wrong = []
    for key, after in eliminations:
        group, point = key.group, (key.batch_size, key.num_workers)
        in_full = full_answers.get(group)
        mark = ""
        if in_full is not None and point in in_full.tie_set:
            mark = "  <- in full's tie set"
            if point == in_full.pick:
                mark += " (full's pick)"
            wrong.append(f"{fmt_group(group)} {fmt_point(point)}")
        print(f"  {fmt_group(group)} {fmt_point(point)}: round {after}{mark}")
    if not eliminations:
        print("  nothing")
    print(f"eliminated points in full's tie set: {len(wrong)}")
    return wrong


def print_answers(
    full_answers: Mapping[Group, Answer], race_answers: Mapping[Group, Answer]
) -> list[dict]:
    """Per answer, full's and race's, and whether they agree."""
    groups_out = []
    for group in sorted(set(full_answers) | set(race_answers)):
        f, r = full_answers.get(group), race_answers.get(group)
        found = full_vs_race(f, r)
        print(f"{fmt_group(group)}:")
        for name, a in (("full", f), ("race", r)):
            if a is None:
                print(f"  {name}: no answer")
            else:
                print(
                    f"  {name}: pick {fmt_point(a.pick):<11} {a.verdict:<10} tie set {fmt_tie(a)}"
                )
        contra = found.get("contradictions") or []
        names = ("full", "race")
        print(
            f"  agree (same pick, or race's pick in full's tie set): {yes_no(found['agree'])};"
            f" same pick: {yes_no(found['same_pick'])}; contradiction: "
            + (", ".join(f"{names[c.claimant]} separated {fmt_point(c.point)}, {names[c.other]}"
                         f" {c.kind}" for c in contra) or "none")
        )  # fmt: skip
        groups_out.append(
            {
                "group": fmt_group(group),
                **{k: v for k, v in found.items() if k != "contradictions"},
                "contradictions": [c.kind for c in contra],
            }
        )
    return groups_out
