"""The package's command line: ``batchscope compare A B`` (or ``python -m batchscope ...``).

The workflow's stages have their own entry points (``python -m batchscope.bench`` and so on);
this one is for people reading results.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="batchscope")
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser(
        "compare", help="environment and metric differences between two result folders"
    )
    cmp.add_argument("a", help="a results folder (holding summary.csv and env/environment.json)")
    cmp.add_argument("b", help="the results folder to compare it with")
    cmp.add_argument("--output", help="also write the Markdown here")
    args = parser.parse_args(argv)

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
