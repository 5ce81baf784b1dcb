"""Part (a) of the stability benchmark: the default sweep rerun from scratch; each rerun's wall
time, each point's run-to-run CV, and how the reruns' answers agree."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeps import heading, load_config

from batchscope.core import config as configuration
from stability.answers import agreement, cv
from stability.consistency import carrier, fits_of, homogeneity
from stability.sweep import run_and_read
from stability.text import (
    fmt_cv,
    fmt_group,
    fmt_point,
    fmt_s,
    fmt_tie,
    jsonable_agreement,
    jsonable_sweep,
    yes_no,
)

#: The old ``make run`` on this 2-core machine, seconds; the goal is at most twice it.
OLD_MAKE_RUN_S = (180.0, 330.0)
WALL_GOAL_FACTOR = 2.0


def part_reruns(args: argparse.Namespace, workdir: Path) -> dict:
    heading(f"(a) the default sweep, {args.reruns} reruns from scratch")
    config = configuration.with_overrides(load_config(), args.config)
    if args.config:
        print(f"overrides: {' '.join(args.config)}")
    sweeps = []
    for i in range(1, args.reruns + 1):
        print(f"rerun {i}/{args.reruns}:", flush=True)
        sweeps.append(run_and_read(args, workdir / f"rerun{i}", config))
    print_wall_times(sweeps)
    points_out, mismatches = print_cvs(sweeps)
    return {
        "reruns": [jsonable_sweep(s) for s in sweeps],
        "points": points_out,
        "cv_mismatches": mismatches,
        "answers": print_answers(sweeps),
        "consistency": print_consistency(sweeps),
    }


def print_wall_times(sweeps: Sequence[dict]) -> None:
    heading("(a) wall time of each rerun")
    low, high = OLD_MAKE_RUN_S
    print(
        f"reference: the old `make run` took ~{low / 60:.0f}-{high / 60:.1f} min; the goal is at"
        f" most {WALL_GOAL_FACTOR:g}x that (~{WALL_GOAL_FACTOR * low / 60:.0f}-"
        f"{WALL_GOAL_FACTOR * high / 60:.0f} min). Printed, not judged."
    )
    print(f"{'rerun':>5}  {'wall':>16}  {'bench jobs':>10}  {'job-seconds':>11}  status")
    for i, s in enumerate(sweeps, 1):
        print(
            f"{i:>5}  {fmt_s(s.get('wall_s')):>16}  {s.get('bench_jobs', 0):>10}"
            f"  {s.get('bench_job_s', 0.0):>11.0f}  {'FAILED' if 'failed' in s else 'ok'}"
        )


def point_cvs(sweeps: Sequence[dict], key) -> tuple[list[str], dict[str, Any], int]:
    """One point's row: the cells per rerun (its CV / the workflow's), its figures (as the
    ``--json`` file holds them, but its name) and how many reruns' two CVs differ."""
    cells, pooled, medians, elim, mismatches = [], [], [], 0, 0
    per_rerun = []
    for s in sweeps:
        runs = s.get("runs", {}).get(key, [])
        mine = cv(runs)
        theirs = s.get("by_point", {}).get(key, {}).get("cv")
        if (mine is None) != (theirs is None) or (
            mine is not None and theirs is not None and abs(mine - theirs) > 1e-9
        ):
            mismatches += 1
        cells.append(f"{fmt_cv(mine)}/{fmt_cv(theirs)}")
        pooled += runs
        if runs:
            medians.append(statistics.median(runs))
        if s.get("by_point", {}).get(key, {}).get("eliminated_at_round"):
            elim += 1
        per_rerun.append({"runs": runs, "cv": mine, "by_point_cv": theirs})
    figures = {
        "per_rerun": per_rerun,
        "pooled_cv": cv(pooled),
        "cv_of_rerun_medians": cv(medians),
        "eliminated_in_reruns": elim,
        "median": statistics.median(pooled) if pooled else None,
    }
    return cells, figures, mismatches


def print_cvs(sweeps: Sequence[dict]) -> tuple[list[dict], int]:
    heading("(a) run-to-run CV of each point's samples_per_s")
    k = len(sweeps)
    print(
        "per rerun: CV over its rounds from summary.csv / summary_by_point.csv's"
        " samples_per_s_cv; pooled: all runs of all reruns; medians: CV of the reruns'"
        " medians; elim: reruns in which the race eliminated the point"
    )
    keys = sorted({key for s in sweeps for key in s.get("runs", {})})
    header = f"{'point':<30}" + "".join(f"  {'rerun ' + str(i):>13}" for i in range(1, k + 1))
    print(header + f"  {'pooled':>6}  {'medians':>7}  {'median/s':>8}  elim")
    points_out = []
    mismatches = 0
    for key in keys:
        name = f"{fmt_group(key.group)} {fmt_point((key.batch_size, key.num_workers))}"
        cells, figures, missed = point_cvs(sweeps, key)
        mismatches += missed
        overall = figures.pop("median")
        print(
            f"{name:<30}" + "".join(f"  {c:>13}" for c in cells)
            + f"  {fmt_cv(figures['pooled_cv']):>6}  {fmt_cv(figures['cv_of_rerun_medians']):>7}"
            + f"  {overall or 0:>8.0f}  {figures['eliminated_in_reruns']}/{k}"
        )  # fmt: skip
        points_out.append({"point": name, **figures})
    print(
        f"summary.csv CV vs summary_by_point.csv samples_per_s_cv: {mismatches} mismatches"
        f" (over {len(keys) * k} point x rerun cells)"
    )
    all_cvs = [c for p in points_out for r in p["per_rerun"] if (c := r["cv"]) is not None]
    if all_cvs:
        print(
            f"within-rerun CVs: median {statistics.median(all_cvs):.3f},"
            f" max {max(all_cvs):.3f}, over {len(all_cvs)} point x rerun cells"
        )
    return points_out, mismatches


def print_answers(sweeps: Sequence[dict]) -> list[dict]:
    heading("(a) the answers of the reruns, per mode x model x accumulation")
    groups = sorted({g for s in sweeps for g in s.get("answers", {})})
    groups_out = []
    for group in groups:
        answers = [s.get("answers", {}).get(group) for s in sweeps]
        found = agreement(answers)
        print(f"{fmt_group(group)}:")
        for i, a in enumerate(answers, 1):
            if a is None:
                print(f"  rerun {i}: no answer")
                continue
            print(f"  rerun {i}: pick {fmt_point(a.pick):<11} {a.verdict:<10} tie set {fmt_tie(a)}")
        lines = [
            f"same pick: {yes_no(found['same_pick'])}",
            f"agree (every pick in every tie set): {yes_no(found['agree'])}",
            f"verdict flips: {'yes' if found['verdict_flips'] else 'no'}",
        ]
        print("  " + "; ".join(lines))
        if found["contradictions"]:
            listed = ", ".join(
                f"{c.claimant + 1}->{c.other + 1} {c.kind} {fmt_point(c.point)}"
                for c in found["contradictions"]
            )
            strong = " (strong)" if found["strongly_contradicted"] else ""
            print(f"  contradiction{strong}: {listed}")
        else:
            print("  contradiction: none")
        groups_out.append({"group": fmt_group(group), **jsonable_agreement(found, answers)})
    n_agree = sum(g["agree"] for g in groups_out)
    n_contra = sum(g["contradicted"] for g in groups_out)
    print(
        f"\n{n_agree}/{len(groups_out)} answers agree across the reruns;"
        f" {n_contra} with a contradicted separation"
    )
    return groups_out


def print_consistency(sweeps: Sequence[dict]) -> list[dict]:
    """Per group, whether the reruns' estimates differ more than each rerun's own pooled model
    allows (stability.consistency): the assumption under "every pick in every tie set"."""
    heading("(a) do the reruns differ more than each rerun's model says? (Cochran's Q)")
    print(
        "per group, on the points every rerun measured: each rerun's pooled estimates as ratios"
        " to one point, their differences between reruns against each rerun's covariance;"
        " overdispersion Q/df is about 1 when reruns differ only as each rerun's intervals say"
    )
    fits = fits_of([s.get("round_runs", {}) for s in sweeps])
    out = []
    for group, per_rerun in fits.items():
        found = homogeneity(per_rerun)
        if found is None:
            print(f"{fmt_group(group)}: fewer than two reruns with two points to compare")
            continue
        print(
            f"{fmt_group(group)}: Q {found['q']:.1f} on {found['df']} df, p {found['p']:.3f},"
            f" overdispersion {found['overdispersion']:.2f} ({found['points']} points,"
            f" {found['reruns']} reruns)"
        )
        most = carrier(per_rerun)
        if most is not None:
            name = fmt_point((most["point"].batch_size, most["point"].num_workers))
            print(
                f"  most of it from {name}: without it Q {most['q']:.1f} on"
                f" {most['df']} df, p {most['p']:.3f}, overdispersion {most['overdispersion']:.2f}"
            )
        out.append(
            {
                "group": fmt_group(group),
                **found,
                "carrier": None if most is None else {**most, "point": name},
            }
        )
    return out
