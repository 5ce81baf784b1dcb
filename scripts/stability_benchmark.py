"""Stability benchmark (issue "A reproducible answer"): is the workflow's answer the same answer
when it is asked again, what does the race save, and what does the harness cost?

Usage (from the repository root, with the project's venv):

    .venv/bin/python scripts/stability_benchmark.py --json stability.json     # everything
    .venv/bin/python scripts/stability_benchmark.py --reruns 1 --skip-race --skip-harness \\
        --config 'batch_sizes=[32, 64]' --config measure.rounds=2              # a quick trial
    .venv/bin/python scripts/stability_benchmark.py --skip-reruns --skip-race --pairs 2

Every sweep runs ``snakemake --cores N`` in a fresh folder under ``--workdir`` (a new temporary
folder by default, kept, its path printed), from a config file written there: the default sweep
(``config/config.yaml``) with the ``--config``/``--race-config`` overrides applied. An override
is ``KEY=VALUE``: KEY is dotted (``measure.rounds``), VALUE is YAML (``[32, 64]``, ``race``).
Each sweep prepares and verifies its own copy of the dataset (seconds), as a fresh ``make run``
does, so its wall time is a fresh run's. The parts, each skippable and sized by options:

**(a) Reruns** (``--reruns K``, default 3; ``--skip-reruns``). The default sweep, K times from
scratch. Printed:

- each rerun's wall time (the whole ``snakemake`` command, timed from outside), its bench jobs
  and their job-seconds (the sum of the ``s`` column of ``benchmarks/bench/**.tsv``), beside the
  reference: the old ``make run`` took about 3-5.5 minutes and the goal is at most twice that.
  Wall times are printed, not judged (``make run`` also builds the report: a few seconds more).
- per grid point (mode x model x accumulation x batch x workers): its run-to-run CV in each
  rerun, std(ddof=1)/mean of the ``samples_per_s`` of its ok runs in ``results/summary.csv``
  (its rounds: each a fresh process), next to ``samples_per_s_cv`` of
  ``results/summary_by_point.csv`` (the workflow's own figure; they should be equal); the CV
  of all its runs of all reruns pooled; the CV of the reruns' medians (how far apart the reruns
  put the point); and in how many reruns the race eliminated it.
- per answer (mode x model x accumulation, from ``results/recommendation.json``): each rerun's
  pick, verdict and tie set (leader first), then:

  * ``same pick``: every rerun picked the same batch size and workers;
  * ``agree``: every rerun's pick lies in every rerun's tie set (same pick implies it, since a
    pick is always in its own tie set): no rerun's statistics rule out another rerun's answer;
  * ``verdicts``: whether the verdict flipped between reruns (e.g. separated, then
    undetermined);
  * ``contradiction``: a rerun A *claims a separation* when its verdict is ``separated``: its
    pick X, the leader and only member of its tie set, is significantly faster than every other
    point. Another rerun B *contradicts* that claim, in decreasing strength, when

    1. ``separated-other``: B is separated too, on a point Y != X (both claim significance);
    2. ``excluded``: X is not in B's tie set (B finds X significantly slower than its leader);
    3. ``other-leader``: X is in B's tie set, but B's leader (highest median) is not X;
    4. ``other-pick``: B's leader is X but B picks another point of its tie (by memory, workers).

    A ``disturbed`` B (measured beside other work: no pick) claims nothing and contradicts
    nothing; kinds 1
    and 2 are the strong ones (two reruns each claiming significance, in opposite directions).
    Each contradiction is printed as ``A->B kind X``, reruns numbered from 1.

**(b) Full vs race** (``--skip-race``). The same grid swept twice from scratch, once with
``sweep.strategy: full`` (every point in every round) and once with ``race`` (points
significantly slower than their group's leader stop after a round): by default batch sizes 32,
64, 128, 256 x workers 0, 1, 2, training only, the default ``measure.rounds``, no ceiling runs
(``--race-*`` options, ``--race-config`` overrides). Printed: each sweep's wall time, bench jobs
and job-seconds, the ratio race / full of job-seconds (the goal: <= 0.40) and of jobs, the
floor the design sets on that ratio (a race eliminates nothing before every point has 2 rounds,
so its jobs are at least 2/R of full's with R rounds), what the race eliminated and after which
round, whether any point it eliminated is in full's tie set (the race "dropping the wrong
point"), and per answer whether race and full agree: the same pick, or race's pick in full's
tie set (and any contradiction, as in (a)).

**(c) Harness vs a bare loop** (``--pairs N``, default 5; ``--skip-harness``). A = one bench job
through the workflow: ``snakemake --force results/runs/<mode>/<model>/bs<B>_acc1_nw<W>_seed0_
round1.json`` in its own folder (a first, unmeasured call prepares the dataset and the spec under
``specs/``), its ``samples_per_s`` read from the result (the median of its windows) and, beside
it, its overall ``measured_samples / measured_s``. B = a bare PyTorch loop in a fresh process
(this file, ``bare-loop`` subcommand), which imports torch and torchvision but not batchscope
(checked): the same Fashion-MNIST files through ``torchvision.datasets.FashionMNIST`` with the
same ``ToTensor`` and ``Normalize(0.2860, 0.3530)``, a hand-written copy of the small CNN (two
conv-BN-ReLU blocks, max-pool, adaptive average pool to 4x4, 1024-128-10 head), the same seed
before the model is built, torch threads = ``--cores``, ``--harness-batch`` (64) and workers
(0), the spec's determinism setting, SGD lr 0.05 momentum 0.9 (training; shuffled, drop_last)
or eval + ``inference_mode`` over the test split (inference). B runs the spec's warm-up steps,
then exactly as many measured steps as the A just before it, timed with ``perf_counter`` from
the end of the warm-up to the end of the last step: samples / seconds. Pairs run A B A B per
mode, interleaved train, infer. Printed: each pair, then per mode the median of the per-pair
ratios A / B (the goal: >= 0.97) and their spread.

This is a measurement, not a test: nothing is asserted and it exits 0 once every part ran, even
if a sweep failed (the failure is printed). Timings on a shared 2-core machine move a lot; the
CVs printed in (a) say by how much.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchscope.core import config as configuration
from batchscope.core import grid

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "config" / "config.yaml"

#: The old ``make run`` on this 2-core machine, seconds; the goal is at most twice it.
OLD_MAKE_RUN_S = (180.0, 330.0)
WALL_GOAL_FACTOR = 2.0
RACE_GOAL = 0.40
HARNESS_GOAL = 0.97

#: The kinds of contradiction, strongest first (see the module docstring).
CONTRADICTION_KINDS = ("separated-other", "excluded", "other-leader", "other-pick")
STRONG_KINDS = ("separated-other", "excluded")

Point = tuple[int, int]  # batch_size, num_workers: what an answer picks from
Group = tuple  # batchscope.core.grid.GROUP_KEYS: what an answer is for


# ============================================================ pure: answers, agreement, CV


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
    """How a group's answers from several reruns relate (the module docstring defines each)."""
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


def ratio_summary(ratios: Sequence[float]) -> dict[str, float]:
    """Median, IQR, min and max of per-pair ratios."""
    med = statistics.median(ratios)
    if len(ratios) > 1:
        p25, _, p75 = statistics.quantiles(ratios, n=4, method="inclusive")
    else:
        p25 = p75 = med
    return {"median": med, "iqr": p75 - p25, "min": min(ratios), "max": max(ratios)}


# ============================================================ formatting


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


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 96 - len(text)), flush=True)


def yes_no(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


# ============================================================ running sweeps


class SweepFailed(RuntimeError):
    pass


def subprocess_env() -> dict[str, str]:
    """This interpreter's bin first on PATH (as `make` does): snakemake's jobs run `python`."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def load_default_config() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(DEFAULT_CONFIG.read_text()) or {}


def write_config(folder: Path, config: Mapping[str, Any]) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stability-config.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


def snakemake_cmd(
    args: argparse.Namespace, folder: Path, configfile: Path, *extra: str
) -> list[str]:
    return [
        args.snakemake,
        "-s",
        str(REPO / "Snakefile"),
        "--directory",
        str(folder),
        "--configfile",
        str(configfile),
        "--cores",
        str(args.cores),
        *extra,
    ]


def run_logged(cmd: list[str], log: Path) -> float:
    """Run ``cmd`` from the repository root (where profiles/default is found), its output in
    ``log``; return its wall seconds; SweepFailed with the log's tail if it fails."""
    started = time.perf_counter()
    with log.open("w") as handle:
        done = subprocess.run(
            cmd, cwd=REPO, env=subprocess_env(), stdout=handle, stderr=subprocess.STDOUT
        )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-15:])
        raise SweepFailed(f"exit {done.returncode} after {elapsed:.0f} s; {log}:\n{tail}")
    return elapsed


def tsv_seconds(path: Path) -> float:
    """The ``s`` column (wall seconds) of a Snakemake benchmark TSV."""
    with path.open(newline="") as handle:
        row = next(csv.DictReader(handle, delimiter="\t"))
    return float(row["s"])


def bench_job_seconds(folder: Path) -> tuple[float, int]:
    """Sum of the bench jobs' benchmark TSVs (``s``) and their count."""
    paths = sorted((folder / "benchmarks" / "bench").rglob("*.tsv"))
    return sum(tsv_seconds(p) for p in paths), len(paths)


PointKey = grid.GridPoint


def _point_key(row: Mapping[str, str]) -> PointKey:
    return grid.point_of({**row, "accumulation_steps": row.get("accumulation_steps") or 1})


def _float(text: str | None) -> float | None:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def read_runs(folder: Path) -> dict[PointKey, list[float]]:
    """Per point, the samples_per_s of its ok runs in results/summary.csv."""
    out: dict[PointKey, list[float]] = {}
    with (folder / "results" / "summary.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            values = out.setdefault(_point_key(row), [])
            rate = _float(row.get("samples_per_s"))
            if row.get("status") == "ok" and rate:
                values.append(rate)
    return out


def read_by_point(folder: Path) -> dict[PointKey, dict[str, Any]]:
    """Per point, samples_per_s_cv, n_rounds and eliminated_at_round of summary_by_point.csv."""
    out = {}
    with (folder / "results" / "summary_by_point.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            eliminated = _float(row.get("eliminated_at_round"))
            out[_point_key(row)] = {
                "cv": _float(row.get("samples_per_s_cv")),
                "n_rounds": int(_float(row.get("n_rounds")) or 0),
                "eliminated_at_round": None if eliminated is None else int(eliminated),
            }
    return out


def read_answers(folder: Path) -> dict[Group, Answer]:
    return answers_of(json.loads((folder / "results" / "recommendation.json").read_text()))


def read_eliminations(folder: Path) -> list[tuple[PointKey, int]]:
    """(point, round after which the race dropped it), from the last results/rounds/ file."""
    files = sorted(
        (folder / "results" / "rounds").glob("round*.json"),
        key=lambda p: int(p.stem.removeprefix("round")),
    )
    if not files:
        return []
    decision = json.loads(files[-1].read_text())
    return sorted(
        (_point_key({k: str(v) for k, v in e.items()}), int(e["eliminated_at_round"]))
        for e in decision["eliminated"]
    )


def run_sweep(args: argparse.Namespace, folder: Path, config: Mapping[str, Any]) -> dict:
    """One sweep from scratch in ``folder``; what it produced, or ``failed`` with the reason."""
    configfile = write_config(folder, config)
    cmd = snakemake_cmd(args, folder, configfile)
    print(f"  $ {' '.join(cmd)}", flush=True)
    out: dict[str, Any] = {"folder": str(folder), "command": cmd}
    try:
        out["wall_s"] = run_logged(cmd, folder / "stability-snakemake.log")
    except SweepFailed as exc:
        print(f"  sweep FAILED: {exc}", flush=True)
        out["failed"] = str(exc)
    try:
        out["bench_job_s"], out["bench_jobs"] = bench_job_seconds(folder)
        out["runs"] = read_runs(folder)
        out["by_point"] = read_by_point(folder)
        out["answers"] = read_answers(folder)
        out["eliminations"] = read_eliminations(folder)
    except (OSError, KeyError, ValueError, StopIteration) as exc:
        out.setdefault("failed", f"results unreadable: {exc}")
        out.setdefault("answers", {})
    if "wall_s" in out:
        print(
            f"  done in {fmt_s(out['wall_s'])}; {out.get('bench_jobs', 0)} bench jobs,"
            f" {out.get('bench_job_s', 0.0):.0f} job-seconds",
            flush=True,
        )
    return out


# ============================================================ (a) reruns


def part_reruns(args: argparse.Namespace, workdir: Path) -> dict:
    heading(f"(a) the default sweep, {args.reruns} reruns from scratch")
    config = configuration.with_overrides(load_default_config(), args.config)
    if args.config:
        print(f"overrides: {' '.join(args.config)}")
    sweeps = []
    for i in range(1, args.reruns + 1):
        print(f"rerun {i}/{args.reruns}:", flush=True)
        sweeps.append(run_sweep(args, workdir / f"rerun{i}", config))

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
        mode, model, acc, b, w = key
        name = f"{mode} {model}" + (f" acc{acc}" if acc != 1 else "") + f" bs{b}/nw{w}"
        cells, pooled, medians, elim = [], [], [], 0
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
        overall = statistics.median(pooled) if pooled else None
        print(
            f"{name:<30}" + "".join(f"  {c:>13}" for c in cells)
            + f"  {fmt_cv(cv(pooled)):>6}  {fmt_cv(cv(medians)):>7}"
            + f"  {overall or 0:>8.0f}  {elim}/{k}"
        )  # fmt: skip
        points_out.append(
            {
                "point": name,
                "per_rerun": per_rerun,
                "pooled_cv": cv(pooled),
                "cv_of_rerun_medians": cv(medians),
                "eliminated_in_reruns": elim,
            }
        )
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
        groups_out.append({"group": fmt_group(group), **_jsonable_agreement(found, answers)})
    n_agree = sum(g["agree"] for g in groups_out)
    n_contra = sum(g["contradicted"] for g in groups_out)
    print(
        f"\n{n_agree}/{len(groups_out)} answers agree across the reruns;"
        f" {n_contra} with a contradicted separation"
    )
    return {
        "reruns": [_jsonable_sweep(s) for s in sweeps],
        "points": points_out,
        "cv_mismatches": mismatches,
        "answers": groups_out,
    }


# ============================================================ (b) full vs race


def part_race(args: argparse.Namespace, workdir: Path) -> dict:
    config = load_default_config()
    config.update(
        batch_sizes=args.race_batch_sizes,
        num_workers=args.race_workers,
        modes=args.race_modes,
    )
    config.setdefault("measure", {})["ceiling"] = args.race_ceiling
    config = configuration.with_overrides(config, args.race_config)
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
        sweeps[strategy] = run_sweep(args, workdir / f"sweep-{strategy}", chosen)
    full, race = sweeps["full"], sweeps["race"]
    print(f"\n{'strategy':>8}  {'wall':>16}  {'bench jobs':>10}  {'job-seconds':>11}  status")
    for name, s in sweeps.items():
        print(
            f"{name:>8}  {fmt_s(s.get('wall_s')):>16}  {s.get('bench_jobs', 0):>10}"
            f"  {s.get('bench_job_s', 0.0):>11.0f}  {'FAILED' if 'failed' in s else 'ok'}"
        )
    ratio = jobs_ratio = None
    if full.get("bench_job_s") and race.get("bench_jobs") is not None:
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
    full_answers, race_answers = full.get("answers", {}), race.get("answers", {})
    print("\nwhat the race eliminated (point: after round):")
    wrong = []
    for key, after in race.get("eliminations", []):
        group, point = key.group, (key.batch_size, key.num_workers)
        in_full = full_answers.get(group)
        mark = ""
        if in_full is not None and point in in_full.tie_set:
            mark = "  <- in full's tie set"
            if point == in_full.pick:
                mark += " (full's pick)"
            wrong.append(f"{fmt_group(group)} {fmt_point(point)}")
        print(f"  {fmt_group(group)} {fmt_point(point)}: round {after}{mark}")
    if not race.get("eliminations"):
        print("  nothing")
    print(f"eliminated points in full's tie set: {len(wrong)}")
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
    return {
        "rounds": rounds,
        "full": _jsonable_sweep(full),
        "race": _jsonable_sweep(race),
        "job_seconds_ratio": ratio,
        "jobs_ratio": jobs_ratio,
        "floor": min(1.0, 2 / rounds),
        "eliminated_in_full_tie": wrong,
        "answers": groups_out,
    }


# ============================================================ (c) harness vs bare loop


def part_harness(args: argparse.Namespace, workdir: Path) -> dict:
    b, w = args.harness_batch, args.harness_workers
    heading(f"(c) harness vs bare loop: batch {b}, workers {w}, {args.pairs} pairs per mode")
    folder = workdir / "harness"
    config = load_default_config()
    config.update(batch_sizes=[b], num_workers=[w], modes=args.harness_modes)
    config.setdefault("measure", {})["ceiling"] = False
    configfile = write_config(folder, config)
    target = {
        mode: f"results/runs/{mode}/small_cnn/bs{b}_acc1_nw{w}_seed0_round1.json"
        for mode in args.harness_modes
    }
    print(
        "A: one bench job through the workflow, `snakemake --force <target>` (samples_per_s of"
        " its result: median of its windows; also measured_samples / measured_s)\n"
        "B: `stability_benchmark.py bare-loop` in a fresh process (no batchscope import),"
        " as many measured steps as the A before it"
    )
    print("preparing (dataset, specs, one unmeasured job per mode) ...", flush=True)
    run_logged(snakemake_cmd(args, folder, configfile, *target.values()), folder / "prepare.log")
    rows: dict[str, list[dict]] = {mode: [] for mode in args.harness_modes}
    print(
        f"{'mode':<5}  {'pair':>4}  {'A samples/s':>11}  {'A mean/s':>9}  {'B bare/s':>9}"
        f"  {'A/B':>6}  {'Amean/B':>7}  {'steps':>5}  {'A job s':>7}"
    )
    for i in range(1, args.pairs + 1):
        for mode in args.harness_modes:
            cmd = snakemake_cmd(args, folder, configfile, "--force", target[mode])
            outside = run_logged(cmd, folder / f"a-{mode}-{i}.log")
            result = json.loads((folder / target[mode]).read_text())
            if result.get("status") != "ok":
                raise SweepFailed(f"A {mode} pair {i}: status {result.get('status')}")
            spec = json.loads(
                (folder / "specs" / target[mode].removeprefix("results/")).read_text()
            )
            a = float(result["samples_per_s"])
            a_mean = result["measured_samples"] / result["measured_s"]
            bare = run_bare(args, folder, spec, result, mode, i)
            row = {
                "pair": i,
                "a_samples_per_s": a,
                "a_mean_samples_per_s": a_mean,
                "b_samples_per_s": bare["samples_per_s"],
                "steps": result["measured_steps"],
                "warmup": result["warmup_steps"],
                "a_threads": result.get("torch_threads"),
                "b_threads": bare["threads"],
                "a_command_s": outside,
                "b_loaded_batchscope": bare["batchscope_loaded"],
            }
            rows[mode].append(row)
            print(
                f"{mode:<5}  {i:>4}  {a:>11.1f}  {a_mean:>9.1f}  {bare['samples_per_s']:>9.1f}"
                f"  {a / bare['samples_per_s']:>6.3f}  {a_mean / bare['samples_per_s']:>7.3f}"
                f"  {row['steps']:>5}  {outside:>7.1f}",
                flush=True,
            )
    out: dict[str, Any] = {"batch_size": b, "num_workers": w, "pairs": rows, "modes": {}}
    print()
    for mode, mode_rows in rows.items():
        ratios = [r["a_samples_per_s"] / r["b_samples_per_s"] for r in mode_rows]
        means = [r["a_mean_samples_per_s"] / r["b_samples_per_s"] for r in mode_rows]
        s, m = ratio_summary(ratios), ratio_summary(means)
        threads = {(r["a_threads"], r["b_threads"]) for r in mode_rows}
        leaked = any(r["b_loaded_batchscope"] for r in mode_rows)
        print(
            f"{mode}: median A/B = {s['median']:.3f}   (the goal: >= {HARNESS_GOAL});"
            f" IQR {s['iqr']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}; with A's"
            f" measured_samples/measured_s: median {m['median']:.3f}; threads A/B {threads};"
            f" B imported batchscope: {'YES' if leaked else 'no'}"
        )
        if s["iqr"] > 1 - HARNESS_GOAL:
            print(
                f"  note: the per-pair ratios spread wider (IQR {s['iqr']:.3f}) than the"
                f" {1 - HARNESS_GOAL:.2f} margin judged: the machine's noise decides this median"
            )
        out["modes"][mode] = {"ratio": s, "ratio_of_means": m}
    return out


def run_bare(
    args: argparse.Namespace, folder: Path, spec: dict, result: dict, mode: str, pair: int
) -> dict:
    """Side B in a fresh process: this file's bare-loop, nothing of batchscope on its path."""
    train = spec.get("train") or {}
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "bare-loop",
        "--mode", mode,
        "--data-root", str(folder / spec["dataset"]["root"]),
        "--batch-size", str(spec["batch_size"]),
        "--num-workers", str(spec["num_workers"]),
        "--threads", str(args.cores),
        "--seed", str(spec["seed"]),
        "--warmup", str(result["warmup_steps"]),
        "--steps", str(result["measured_steps"]),
        "--lr", str(train.get("lr", 0.05)),
        "--momentum", str(train.get("momentum", 0.9)),
        "--deterministic" if spec.get("deterministic") else "--no-deterministic",
    ]  # fmt: skip
    env = {k: v for k, v in subprocess_env().items() if k != "PYTHONPATH"}
    log = folder / f"b-{mode}-{pair}.log"
    done = subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True)
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SweepFailed(f"bare loop exited {done.returncode}; {log}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ============================================================ B: the bare loop

BARE_DOC = """A bare PyTorch loop, written without batchscope (side B of part (c)).

Prints one JSON line: samples_per_s over the measured steps, the threads used, and whether
batchscope was imported (it must not be)."""


def bare_loop(argv: Sequence[str]) -> int:
    p = argparse.ArgumentParser(prog="stability_benchmark.py bare-loop", description=BARE_DOC)
    p.add_argument("--mode", choices=("train", "infer"), required=True)
    p.add_argument("--data-root", required=True, help="a prepared fashion_mnist folder")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, required=True, help="measured steps")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    a = p.parse_args(argv)

    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.utils.data import DataLoader
    from torchvision import transforms
    from torchvision.datasets import FashionMNIST

    torch.set_num_threads(a.threads)
    if a.deterministic:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.use_deterministic_algorithms(True, warn_only=True)

    class SmallCNN(nn.Module):  # batchscope.bench.models.SmallCNN, by hand
        def __init__(self, in_channels: int = 1, num_classes: int = 10, width: int = 32):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(in_channels, width, 3, padding=1),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
                nn.Conv2d(width, 2 * width, 3, padding=1),
                nn.BatchNorm2d(2 * width),
                nn.ReLU(inplace=True),
                nn.AdaptiveAvgPool2d(4),
            )
            self.classifier = nn.Sequential(
                nn.Flatten(),
                nn.Linear(2 * width * 16, 128),
                nn.ReLU(inplace=True),
                nn.Linear(128, num_classes),
            )

        def forward(self, x):
            return self.classifier(self.features(x))

    train = a.mode == "train"
    transform = transforms.Compose(
        [transforms.ToTensor(), transforms.Normalize((0.2860,), (0.3530,))]
    )
    data = FashionMNIST(a.data_root, train=train, transform=transform, download=False)
    torch.manual_seed(a.seed)
    model = SmallCNN()
    model.train(train)
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    loader = DataLoader(
        data,
        batch_size=a.batch_size,
        shuffle=train,
        drop_last=True,
        num_workers=a.num_workers,
        generator=torch.Generator().manual_seed(a.seed),
    )

    def batches():
        while True:
            yield from loader

    stream = batches()
    started = 0.0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            started = time.perf_counter()
        x, y = next(stream)
        if train:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        else:
            with torch.inference_mode():
                model(x)
    elapsed = time.perf_counter() - started
    stream.close()
    print(
        json.dumps(
            {
                "samples_per_s": a.steps * a.batch_size / elapsed,
                "measured_s": elapsed,
                "steps": a.steps,
                "threads": torch.get_num_threads(),
                "batchscope_loaded": any(m.split(".")[0] == "batchscope" for m in sys.modules),
            }
        )
    )
    return 0


# ============================================================ main


def _jsonable_sweep(s: Mapping[str, Any]) -> dict[str, Any]:
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


def _jsonable_agreement(found: Mapping[str, Any], answers: Sequence[Answer | None]) -> dict:
    return {
        **{k: v for k, v in found.items() if k != "contradictions"},
        "picks": [None if a is None else a.pick for a in answers],
        "tie_sets": [None if a is None else a.tie_set for a in answers],
        "contradictions": [
            {"claimant": c.claimant + 1, "other": c.other + 1, "point": c.point, "kind": c.kind}
            for c in found["contradictions"]
        ],
    }


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reruns", type=int, default=3, help="(a) reruns of the default sweep")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE",
        help="(a) override of the default sweep, e.g. measure.rounds=2 (repeatable)",
    )  # fmt: skip
    p.add_argument("--race-batch-sizes", type=_ints, default=[32, 64, 128, 256])
    p.add_argument("--race-workers", type=_ints, default=[0, 1, 2])
    p.add_argument("--race-modes", type=_names, default=["train"])
    p.add_argument("--race-ceiling", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument(
        "--race-config", action="append", default=[], metavar="KEY=VALUE",
        help="(b) override of the full/race sweeps (repeatable)",
    )  # fmt: skip
    p.add_argument("--pairs", type=int, default=5, help="(c) A B pairs per mode")
    p.add_argument("--harness-batch", type=int, default=64)
    p.add_argument("--harness-workers", type=int, default=0)
    p.add_argument("--harness-modes", type=_names, default=["train", "infer"])
    p.add_argument("--skip-reruns", action="store_true")
    p.add_argument("--skip-race", action="store_true")
    p.add_argument("--skip-harness", action="store_true")
    p.add_argument("--cores", type=int, default=2, help="snakemake --cores; B's torch threads")
    p.add_argument("--workdir", type=Path, default=None, help="where the sweeps go (kept)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument(
        "--snakemake", default=str(Path(sys.executable).parent / "snakemake"),
        help="the snakemake of the project's environment",
    )  # fmt: skip
    args = p.parse_args(argv)
    if min(args.reruns, args.pairs, args.cores) < 1:
        p.error("--reruns, --pairs and --cores must be at least 1")
    try:
        for text in (*args.config, *args.race_config):
            configuration.parse_override(text)
    except ValueError as exc:
        p.error(str(exc))
    return args


def _default(value: Any) -> Any:
    if isinstance(value, tuple | set):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {type(value)}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bare-loop"]:
        return bare_loop(argv[1:])
    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="batchscope-stability-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    print(f"stability benchmark: {REPO} -> {workdir} (kept); snakemake --cores {args.cores}")
    started = time.perf_counter()
    report: dict[str, Any] = {"workdir": str(workdir), "argv": argv}

    def save() -> None:
        if args.json:
            report["elapsed_s"] = time.perf_counter() - started
            args.json.write_text(json.dumps(report, indent=2, default=_default) + "\n")

    parts = (
        ("reruns", args.skip_reruns, part_reruns),
        ("race", args.skip_race, part_race),
        ("harness", args.skip_harness, part_harness),
    )
    for name, skip, part in parts:
        if skip:
            continue
        try:
            report[name] = part(args, workdir)
        except SweepFailed as exc:
            print(f"part {name} FAILED: {exc}", flush=True)
            report[name] = {"failed": str(exc)}
        save()
    print(f"\nstability benchmark done in {fmt_s(time.perf_counter() - started)}")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
