"""The answer, machine-readable: ``results/recommendation.json``.

    python -m batchscope.report.answer --summary results/summary.csv \\
        --by-point results/summary_by_point.csv --level 0.05 \\
        --foreign-cpu-limit 0.1 [--energy-eta 0.5] --output results/recommendation.json

Per mode × model × dataset × accumulation, the points (batch size × workers) are compared on
their per-run throughputs: one number per fresh process, over rounds and seeds, never windows
inside one process (``batchscope.core.verdict.decide``: the leader, the points not
significantly slower than it, and the verdict ``separated``, ``tie`` or ``too_noisy``). The pick
is the leader when it is separated, else the tie set's point with the least peak memory, then
the fewest workers, then the highest median. The schema is
``batchscope/core/recommendation_schema.json`` (docs/results.md); the Markdown and HTML
recommendation, the plots and the report read this file and derive no answer of their own.

Each answer also says what to use per objective (``objectives``,
``batchscope.report.objectives``): the pick as the fastest, and where the runs measured energy
the point of least energy per sample and the time/energy trade-off's (``--energy-eta``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import pandas as pd

from batchscope.core import config, paths, recommendation, results, verdict
from batchscope.report import objectives
from batchscope.report.result_files import with_grid_defaults

#: One answer per distinct value of these.
#: (``sequence_length``: token data, one answer per length; empty for images)
GROUP_KEYS = ["mode", "model", "dataset", "sequence_length", "accumulation_steps", "devices"]


def _point_rows(by_point: pd.DataFrame) -> dict[tuple, dict[str, Any]]:
    """(group..., batch_size, num_workers) -> what the pick rule reads of that point."""
    rows = {}
    for _, row in by_point.iterrows():
        key = (*_group(row[k] for k in GROUP_KEYS), int(row["batch_size"]), int(row["num_workers"]))
        memory = row.get("peak_mem_mb_mean")
        rows[key] = {
            "batch_size": int(row["batch_size"]),
            "num_workers": int(row["num_workers"]),
            "peak_mem_mb": None if pd.isna(memory) else float(memory),
        }
    return rows


def by_group(answer: Mapping[str, Any]) -> dict[tuple, dict[str, Any]]:
    """The answers of ``recommendation.json`` by their GROUP_KEYS value (an image answer's
    sequence length None; an answer from before the devices axis on one device)."""
    return {
        (
            a["mode"],
            a["model"],
            a.get("dataset"),
            a.get("sequence_length"),
            a["accumulation_steps"],
            a.get("devices", 1),
        ): a
        for a in answer["answers"]
    }


def _int(value: Any) -> int | None:
    return None if pd.isna(value) else int(value)


def _group(values) -> tuple:
    """A group's key with an empty sequence length (images) as None, which equals itself."""
    return tuple(None if pd.isna(v) else v for v in values)


def _left_out(run: Any) -> dict[str, Any]:
    """A run left out for foreign load: its keys within the answer, its share, its file."""
    text_keys = ("mode", "model", "dataset")
    grid = {k: run[k] if k in text_keys else _int(run[k]) for k in results.GRID_KEYS}
    return {
        **{k: grid[k] for k in ("batch_size", "num_workers", "seed", "round")},
        "foreign_cpu_frac": float(run["foreign_cpu_frac"]),
        "result": f"{paths.run_stem(grid)}.json",
    }


def answers(
    summary: pd.DataFrame,
    by_point: pd.DataFrame,
    level: float,
    foreign_cpu_limit: float,
    energy_eta: float | None = None,
) -> list[dict[str, Any]]:
    """One answer per group that has a point with an ok run; groups in sorted order.

    Runs measured under foreign load (``foreign_cpu_frac`` above ``foreign_cpu_limit``) are
    left out of the comparison; when that leaves a point with fewer than 2 runs, the answer is
    ``disturbed`` and names no point."""
    summary = with_grid_defaults(summary)
    ok = summary[summary["status"] == "ok"]
    ok = ok[pd.to_numeric(ok["samples_per_s"]) > 0].reset_index(drop=True)
    loaded = (
        ok.get("foreign_cpu_frac", pd.Series(None, index=ok.index, dtype=float))
        .map(lambda frac: verdict.under_foreign_load(frac, foreign_cpu_limit))
        .astype(bool)
    )
    by_point = with_grid_defaults(by_point)
    rows = _point_rows(by_point)
    if energy_eta is None:
        energy_eta = config.default("recommend.energy_eta")
    out = []
    for group, runs in ok.groupby(GROUP_KEYS, sort=True, dropna=False):
        group = _group(group)
        everything: dict[tuple, list[float]] = {}
        clean: dict[tuple, list[float]] = {}
        n_loaded: dict[tuple, int] = {}
        for (b, w), point_runs in runs.groupby(["batch_size", "num_workers"], sort=True):
            key = (*group, int(b), int(w))
            mask = loaded.loc[point_runs.index]
            everything[key] = [float(v) for v in point_runs["samples_per_s"]]
            clean[key] = [float(v) for v in point_runs.loc[~mask, "samples_per_s"]]
            n_loaded[key] = int(mask.sum())
        left_out = [_left_out(run) for _, run in runs[loaded.loc[runs.index]].iterrows()]
        if verdict.short_of_clean_runs(clean, n_loaded):
            decision = verdict.disturbed_verdict(everything, level)
        else:
            decision = verdict.decide(clean, level)
        named = dict(zip(GROUP_KEYS, group, strict=True))
        answer = recommendation.to_answer(
            decision,
            {key: rows[key] for key in everything},
            mode=named["mode"],
            model=named["model"],
            accumulation_steps=int(named["accumulation_steps"]),
            devices=int(named["devices"]),
            dataset=named["dataset"],
            left_out=left_out,
            foreign_cpu_limit=foreign_cpu_limit,
        )
        if _int(named["sequence_length"]) is not None:  # images' answers are as they were
            answer["sequence_length"] = _int(named["sequence_length"])
        out.append(answer)
        same = [_group(tuple(row)) == group for row in by_point[GROUP_KEYS].itertuples(False)]
        out[-1]["objectives"] = objectives.objectives(by_point[same], out[-1]["pick"], energy_eta)
    return out


def document(
    summary: pd.DataFrame,
    by_point: pd.DataFrame,
    level: float,
    foreign_cpu_limit: float,
    energy_eta: float | None = None,
) -> dict[str, Any]:
    """The whole file, checked against its schema."""
    found = answers(summary, by_point, level, foreign_cpu_limit, energy_eta)
    doc = recommendation.to_document(found, level)
    jsonschema.validate(results.finite_or_null(doc), recommendation.load_schema())
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.answer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--summary", required=True, help="summary CSV (one row per run)")
    parser.add_argument("--by-point", required=True, help="summary_by_point CSV")
    parser.add_argument("--level", type=float, required=True, help="sweep.level")
    parser.add_argument(
        "--foreign-cpu-limit", type=float, required=True, help="sweep.foreign_cpu_limit"
    )
    parser.add_argument(
        "--energy-eta",
        type=float,
        default=None,
        help="recommend.energy_eta: the trade-off's weight of time (default: the schema's)",
    )
    parser.add_argument("--output", required=True, help="recommendation JSON")
    args = parser.parse_args(argv)
    summary = pd.read_csv(args.summary)
    by_point = pd.read_csv(args.by_point)
    doc = document(summary, by_point, args.level, args.foreign_cpu_limit, args.energy_eta)
    results.write_json(args.output, doc)
    for answer in doc["answers"]:
        print(
            f"batchscope answer: {answer['mode']} {answer['model']}: {answer['verdict']},"
            f" pick {answer['pick']}",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
