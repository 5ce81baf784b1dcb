"""One sweep of the stability benchmark: its config file, the snakemake command run and logged,
and what the stability benchmark reads from the folder it leaves."""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps import REPO, snakemake_command, subprocess_env, tsv_seconds

from batchscope.core import grid
from stability.answers import Answer, Group, answers_of
from stability.text import fmt_s

PointKey = grid.GridPoint


class SweepFailed(RuntimeError):
    pass


def write_config(folder: Path, config: Mapping[str, Any]) -> Path:
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "stability-config.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


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


def bench_job_seconds(folder: Path) -> tuple[float, int]:
    """Sum of the bench jobs' benchmark TSVs (``s``) and their count."""
    paths = sorted((folder / "benchmarks" / "bench").rglob("*.tsv"))
    seconds = [tsv_seconds(p) for p in paths]
    if None in seconds:
        raise ValueError(f"a benchmark TSV without a row among {len(paths)} in {folder}")
    return sum(seconds), len(paths)


def point_key(row: Mapping[str, str]) -> PointKey:
    return grid.point_of({**row, "accumulation_steps": row.get("accumulation_steps") or 1})


def number(text: str | None) -> float | None:
    """A table cell as a number; None when empty, not a number, or NaN."""
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
            values = out.setdefault(point_key(row), [])
            rate = number(row.get("samples_per_s"))
            if row.get("status") == "ok" and rate:
                values.append(rate)
    return out


def read_round_runs(folder: Path) -> dict[PointKey, list[tuple[int, float]]]:
    """Per point, (round, samples_per_s) of its ok runs that no foreign load disturbed: the
    runs its verdict compares (results/summary.csv)."""
    out: dict[PointKey, list[tuple[int, float]]] = {}
    with (folder / "results" / "summary.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            rate = number(row.get("samples_per_s"))
            if row.get("status") == "ok" and rate and row.get("foreign_load") != "True":
                out.setdefault(point_key(row), []).append((int(row["round"]), rate))
    return out


def read_by_point(folder: Path) -> dict[PointKey, dict[str, Any]]:
    """Per point, samples_per_s_cv, n_rounds and eliminated_at_round of summary_by_point.csv."""
    out = {}
    with (folder / "results" / "summary_by_point.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            eliminated = number(row.get("eliminated_at_round"))
            out[point_key(row)] = {
                "cv": number(row.get("samples_per_s_cv")),
                "n_rounds": int(number(row.get("n_rounds")) or 0),
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
        (point_key({k: str(v) for k, v in e.items()}), int(e["eliminated_at_round"]))
        for e in decision["eliminated"]
    )


def run_and_read(args: argparse.Namespace, folder: Path, config: Mapping[str, Any]) -> dict:
    """One sweep from scratch in ``folder``; what it produced, or ``failed`` with the reason."""
    configfile = write_config(folder, config)
    cmd = snakemake_command(folder, args.cores, configfile, program=args.snakemake)
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
        out["round_runs"] = read_round_runs(folder)
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
