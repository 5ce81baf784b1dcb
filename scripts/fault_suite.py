"""Inject faults into small real sweeps and print what each one does, as one table.

    python scripts/fault_suite.py [--cases kill-job,sigterm] [--markdown] [--workdir DIR]

Each case (``scripts/faults/``, one module per family) starts from a tiny sweep run once
(small_cnn, Fashion-MNIST from Debian's local copy or synthetic data, two batch sizes, no
workers, a few steps), injects one fault during ``snakemake --cores 2`` and reads four things:
the one line the user sees, the status recorded for the points the fault hit (the result's
``status``, or ``failed``/``missing`` as ``--config partial=True`` records a point without
one), how many finished results were lost, and what a plain rerun redoes once the cause is
gone (the plan of ``snakemake -n``). Exits 1 when a case lost a finished result or its rerun
would redo a job the fault did not touch (or could not be planned); 2 when a case could not be
run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from faults import CASES  # noqa: E402 - after the checkout is on the path
from faults.harness import Row, Suite, clip  # noqa: E402

from tests.workflow.helpers import DEBIAN_FMNIST  # noqa: E402

HEADER = ("case", "what the user sees", "status recorded", "finished results lost",
          "rerun redoes")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", help=f"comma-separated, of: {', '.join(CASES)} (default: all)")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    p.add_argument("--workdir", type=Path, help="folder for the sweeps (default: a temporary "
                   "one, removed unless a case failed)")  # fmt: skip
    args = p.parse_args(argv)
    args.cases = args.cases.split(",") if args.cases else list(CASES)
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    return args


def cells(row: Row) -> list[str]:
    redoes = row.redoes
    if row.unaffected:
        redoes += f" ({row.unaffected} job(s) the fault did not touch)"
    return [row.case, row.sees, row.status, str(row.lost), redoes]


def table(rows: list[Row], markdown: bool) -> str:
    lines = [list(HEADER)] + [cells(row) for row in rows]
    if markdown:
        out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(HEADER)]
        out += ["| " + " | ".join(c.replace("|", "/") for c in line) + " |" for line in lines[1:]]
    else:
        widths = [max(len(line[i]) for line in lines) for i in range(len(HEADER))]
        out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
               for line in lines]  # fmt: skip
        out.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"- {row.case}: {row.how}" for row in rows if row.how]
    return "\n".join(out + ([""] + notes if notes else []))


def run_case(name: str, suite: Suite) -> tuple[Row, bool]:
    """The case's row, and whether it ran (an exception in the suite itself is a row too)."""
    started = time.perf_counter()
    try:
        row, ran = CASES[name](suite), True
    except Exception as exc:  # the suite's own failure: said in the row, the rest go on
        traceback.print_exc()
        row, ran = Row(name, clip(f"suite error: {exc}"), "?", 0, "?", 0, plan_ok=False), False
    verdict = "ok" if row.ok else "FAULT"
    print(f"{name}: {verdict} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return row, ran


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not DEBIAN_FMNIST.is_dir():
        raise SystemExit(f"needs {DEBIAN_FMNIST}: apt-get install dataset-fashion-mnist")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="batchscope-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    suite = Suite(root)
    outcomes = [run_case(name, suite) for name in args.cases]
    rows = [row for row, _ in outcomes]
    print(table(rows, args.markdown))
    print(f"\n{len(rows)} case(s) in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    failed = [row.case for row in rows if not row.ok]
    if failed or args.workdir:
        print(f"folders kept: {root}", file=sys.stderr)
    else:
        shutil.rmtree(root)
    if not all(ran for _, ran in outcomes):
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
