"""The pieces the recommendation and the convergence report share to write their documents: a
Markdown table and a standalone HTML page. Plain pandas, no plotting and no torch."""

from __future__ import annotations

import html
from collections.abc import Iterable

import pandas as pd

CSS = """
body { font-family: sans-serif; max-width: 72em; margin: 2em auto; line-height: 1.4; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f0f0f0; }
p.rec { font-size: 1.1em; }
"""


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a GitHub-flavoured Markdown table (a ``|`` in a cell is escaped)."""

    def cells(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    lines = [cells(table.columns), "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += [cells(row) for row in table.itertuples(index=False)]
    return "\n".join(lines)


def html_table(table: pd.DataFrame) -> str:
    """``table`` as an HTML table, its cells escaped."""
    return table.to_html(index=False, border=0, escape=True)


def html_page(title: str, body: Iterable[str]) -> str:
    """A standalone UTF-8 page titled ``title`` (escaped) around the ``body`` elements (HTML)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
    ]
    return "\n".join([*head, *body, "</body></html>"]) + "\n"
