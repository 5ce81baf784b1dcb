"""The answer, machine-readable: ``results/recommendation.json``.

    python -m batchscope.report.recommend.answer --summary results/summary.csv \\
        --by-point results/summary_by_point.csv --level 0.05 --margin 0.05 --strategy race \\
        --rounds 2 --max-rounds 8 --foreign-cpu-limit 0.1 [--energy-eta 0.5] \\
        --output results/recommendation.json

Per mode × model × dataset × accumulation, the points (batch size × workers) are compared on
their per-run throughputs: one number per process, over rounds and seeds, never windows
inside one process (``batchscope.core.verdict.decide``: multiple comparisons with the best on a
run-to-run spread pooled over the group's points; the tie set of points that could be the best
and the verdict ``separated``, ``equivalent`` or ``undetermined``). The pick
(``batchscope.core.recommendation.choose``) is the best when separated, the least peak memory
(then fewest workers) among points shown within ``sweep.margin_frac`` of the best, else the best
estimate. The schema is
``batchscope/core/recommendation_schema.json`` (docs/results.md); the Markdown and HTML
recommendation, the plots and the report read this file and derive no answer of their own.

Each answer also says what to use per objective ( ``batchscope.report.recommend.objectives``): the
pick as the fastest, and where the runs measured energy the point of least energy per sample and
the time/energy trade-off's (``--energy-eta``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import pandas as pd

from batchscope.core import config, paths, recommendation, results, rounds, verdict
from batchscope.report.recommend import objectives
from batchscope.report.summary.result_files import with_grid_defaults

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
            "eliminated_at_round": _int(row.get("eliminated_at_round")),
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


def _spent(point_runs: pd.DataFrame, eliminated: Any) -> dict[str, Any]:
    """What measuring a point took: its rounds, runs per round (seeds), device-seconds (each
    run's ``process_s`` x devices, where recorded) and when the race eliminated it."""
    seconds = pd.to_numeric(point_runs.get("process_s", pd.Series(dtype=float)), errors="coerce")
    devices = pd.to_numeric(point_runs["devices"], errors="coerce").fillna(1)
    device_s = (seconds * devices).dropna()
    return {
        "rounds": int(point_runs["round"].nunique()),
        "runs_per_round": int(point_runs["seed"].nunique()),
        "device_s": float(device_s.sum()) if len(device_s) == len(point_runs) else None,
        "eliminated_at_round": _int(eliminated),
    }


def answers(
    summary: pd.DataFrame,
    by_point: pd.DataFrame,
    design: verdict.Design,
    foreign_cpu_limit: float,
    energy_eta: float | None = None,
) -> list[dict[str, Any]]:
    """One answer per group that has a point with an ok run; groups in sorted order.

    Runs measured under foreign load (``foreign_cpu_frac`` above ``foreign_cpu_limit``) are
    left out of the comparison; when that leaves a point with fewer than 2 runs, the answer is
    ``disturbed`` and names no point. The final analysis of a group is at the level the race's
    looks left (``design``: the looks after every round before the group's last)."""
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
    eliminated = {key: row.get("eliminated_at_round") for key, row in rows.items()}
    out = []
    for group, runs in ok.groupby(GROUP_KEYS, sort=True, dropna=False):
        group = _group(group)
        everything: dict[tuple, list[float]] = {}
        clean: dict[tuple, list[float]] = {}
        blocks: dict[tuple, list[int]] = {}
        n_loaded: dict[tuple, int] = {}
        spent: dict[tuple, dict[str, Any]] = {}
        for (b, w), point_runs in runs.groupby(["batch_size", "num_workers"], sort=True):
            key = (*group, int(b), int(w))
            mask = loaded.loc[point_runs.index]
            everything[key] = [float(v) for v in point_runs["samples_per_s"]]
            clean[key] = [float(v) for v in point_runs.loc[~mask, "samples_per_s"]]
            blocks[key] = [int(r) for r in point_runs.loc[~mask, "round"]]
            n_loaded[key] = int(mask.sum())
            spent[key] = _spent(point_runs, eliminated.get(key))
        left_out = [_left_out(run) for _, run in runs[loaded.loc[runs.index]].iterrows()]
        short = verdict.short_of_clean_runs(clean, n_loaded)
        if short:
            decision = verdict.disturbed_verdict(everything, design.level, design.margin)
        else:
            clean = {key: values for key, values in clean.items() if values}
            decision = verdict.decide(
                clean,
                design.level,
                design.margin,
                blocks={key: blocks[key] for key in clean},
                level_final=design.final_level(int(runs["round"].max())),
                eliminated=[key for key in clean if eliminated.get(key)],
            )
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
            short=short,
            spent={key: spent[key] for key in decision.stats},
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
    design: verdict.Design,
    foreign_cpu_limit: float,
    energy_eta: float | None = None,
) -> dict[str, Any]:
    """The whole file, checked against its schema."""
    found = answers(summary, by_point, design, foreign_cpu_limit, energy_eta)
    doc = recommendation.to_document(found, design.level)
    jsonschema.validate(results.finite_or_null(doc), recommendation.load_schema())
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.recommend.answer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--summary", required=True, help="summary CSV (one row per run)")
    parser.add_argument("--by-point", required=True, help="summary_by_point CSV")
    parser.add_argument("--level", type=float, required=True, help="sweep.level")
    parser.add_argument("--margin", type=float, required=True, help="sweep.margin_frac")
    parser.add_argument("--strategy", choices=rounds.STRATEGIES, required=True)
    parser.add_argument("--rounds", type=int, required=True, help="measure.rounds")
    parser.add_argument("--max-rounds", type=int, required=True, help="sweep.max_rounds")
    parser.add_argument(
        "--foreign-cpu-limit", type=float, required=True, help="sweep.foreign_cpu_limit_frac"
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
    design = verdict.Design(
        args.level, args.margin, args.strategy, first_look=args.rounds, max_rounds=args.max_rounds
    )
    doc = document(summary, by_point, design, args.foreign_cpu_limit, args.energy_eta)
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
