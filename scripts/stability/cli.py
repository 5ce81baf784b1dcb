"""The stability benchmark's command line: its options, and the parts run in turn, the figures
written to ``--json`` after each."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeps import REPO

from batchscope.core import config as configuration
from stability.harness import part_harness
from stability.race import part_race
from stability.reruns import part_reruns
from stability.sweep import SweepFailed
from stability.text import fmt_s, json_default


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None, description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reruns", type=int, default=3, help="(a) reruns of the default sweep")
    p.add_argument(
        "--config", action="append", default=[], metavar="KEY=VALUE",
        help="(a) override of the default sweep, e.g. measure.rounds=2 (repeatable)",
    )  # fmt: skip
    p.add_argument("--race-batch-sizes", type=ints, default=[32, 64, 128, 256])
    p.add_argument("--race-workers", type=ints, default=[0, 1, 2])
    p.add_argument("--race-modes", type=names, default=["train"])
    p.add_argument("--race-ceiling", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument(
        "--race-config", action="append", default=[], metavar="KEY=VALUE",
        help="(b) override of the full/race sweeps (repeatable)",
    )  # fmt: skip
    p.add_argument("--pairs", type=int, default=5, help="(c) A B pairs per mode")
    p.add_argument("--harness-batch", type=int, default=64)
    p.add_argument("--harness-workers", type=int, default=0)
    p.add_argument("--harness-modes", type=names, default=["train", "infer"])
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


def main(argv: Sequence[str], description: str) -> int:
    """Every part not skipped, in turn; a part whose sweep fails is printed FAILED and the
    next one runs."""
    argv = list(argv)
    args = parse_args(argv, description)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="batchscope-stability-"))
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = workdir.resolve()
    print(f"stability benchmark: {REPO} -> {workdir} (kept); snakemake --cores {args.cores}")
    started = time.perf_counter()
    report: dict[str, Any] = {"workdir": str(workdir), "argv": argv}

    def save() -> None:
        if args.json:
            report["elapsed_s"] = time.perf_counter() - started
            args.json.write_text(json.dumps(report, indent=2, default=json_default) + "\n")

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
