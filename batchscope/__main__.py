"""The package's command line: ``batchscope compare A B`` and ``batchscope sweep ...`` (or
``python -m batchscope ...``).

The workflow's stages have their own entry points (``python -m batchscope.bench`` and so on);
this one is for people: ``sweep`` starts the common sweep without a config file (it writes the
one it means), ``compare`` reads results.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path


def _add_sweep(commands) -> None:
    sweep = commands.add_parser(
        "sweep",
        help="write the config a few arguments mean, then run the workflow on it",
        description="Writes the config the arguments mean (printed, and saved to --config-out"
        " for keeping and editing), then runs the workflow on it through Snakemake's API.",
    )
    sweep.add_argument("--model", required=True, help="model name(s), comma-separated")
    sweep.add_argument(
        "--data",
        required=True,
        help="a folder of class subfolders of images, or fashion_mnist, cifar10, synthetic",
    )
    sweep.add_argument("--batch-sizes", required=True, help="e.g. 8,16,32, or auto")
    sweep.add_argument(
        "--workers", help="DataLoader workers, e.g. 0,2 (left out: the config's default)"
    )
    sweep.add_argument(
        "--mode",
        choices=["train", "infer", "both"],
        help="left out: the config's default modes",
    )
    sweep.add_argument("--image-size", type=int, help="resize images to this many px square")
    sweep.add_argument(
        "--cores", type=int, default=os.cpu_count() or 1, help="cores for the jobs (all)"
    )
    sweep.add_argument("--directory", default=".", help="where results/ goes (here)")
    sweep.add_argument(
        "--config-out", help="where the config is saved (DIRECTORY/batchscope-sweep.yaml)"
    )
    sweep.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")


def _sweep(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from batchscope.core import results, sweep

    def fail(message: str) -> None:
        parser.exit(2, f"batchscope sweep: error: {message}\n")

    if args.cores < 1:
        fail(f"--cores {args.cores}: at least 1")
    models = [m.strip() for m in args.model.split(",")]
    try:
        config = sweep.sweep_config(
            models=models,
            data=args.data,
            batch_sizes=args.batch_sizes,
            workers=args.workers,
            mode=args.mode,
            image_size=args.image_size,
        )
    except sweep.SweepArgumentError as exc:
        fail(str(exc))
    directory = Path(args.directory)
    out = Path(args.config_out) if args.config_out else directory / "batchscope-sweep.yaml"
    command = shlex.join(["python", "-m", "batchscope", *sys.argv[1:]])
    text = sweep.config_text(config, command)
    results.write_text(out, text)
    print(text, end="")
    again = shlex.join(
        ["snakemake", "-s", str(sweep.SNAKEFILE), "--directory", str(directory.absolute()),
         "--configfile", str(out.absolute()), "--cores", str(args.cores)]
    )  # fmt: skip
    print(f"# saved to {out}; the same sweep with the snakemake command:\n#   {again}", flush=True)
    ok = sweep.run(out, directory, args.cores, dry_run=args.dry_run)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batchscope")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_sweep(commands)
    cmp = commands.add_parser(
        "compare", help="environment and metric differences between two result folders"
    )
    cmp.add_argument("a", help="a results folder (holding summary.csv and env/environment.json)")
    cmp.add_argument("b", help="the results folder to compare it with")
    cmp.add_argument("--output", help="also write the Markdown here")
    args = parser.parse_args(argv)
    if args.command == "sweep":
        return _sweep(commands.choices["sweep"], args)

    from batchscope.core import results
    from batchscope.report import compare

    try:
        text = compare.compare(args.a, args.b)
    except FileNotFoundError as exc:
        parser.exit(2, f"batchscope compare: error: no such file: {exc.filename}\n")
    print(text)
    if args.output:
        results.write_text(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
