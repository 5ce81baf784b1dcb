"""What the report's commands share on their command line: ``python -m <module>`` and the
tables of ``batchscope.report.summary.aggregate`` they read."""

from __future__ import annotations

import argparse

FROM_AGGREGATE = "CSV from batchscope.report.summary.aggregate"


def parser(module: str, description: str, *, curves: bool = False) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``, with ``--summary`` (and, with ``curves``,
    ``--curves``) read from the aggregate step."""
    out = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    out.add_argument("--summary", required=True, help=f"summary {FROM_AGGREGATE}")
    if curves:
        out.add_argument("--curves", required=True, help=f"curves {FROM_AGGREGATE}")
    return out
