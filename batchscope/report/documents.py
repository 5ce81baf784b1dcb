"""The pieces the recommendation and the convergence report share to write their documents: a
Markdown table, a standalone HTML page, and how a sample count, a list of batch sizes and a
learning rate read in their text. Plain pandas, no plotting and no torch."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from batchscope.core import results

#: The page's style. The Snakemake report shows a document in a frame about 900 px wide at a
#: 1,280 px window, so a wide table must fit it: headers break after their underscores (see
#: ``html_table``), long cells anywhere, and a table still wider scrolls inside its own box,
#: never the page.
CSS = """
body { font-family: sans-serif; max-width: 72em; margin: 1em auto; padding: 0 0.5em;
       line-height: 1.4; }
div.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.3em; text-align: right;
         overflow-wrap: break-word; }
th { background: #f0f0f0; overflow-wrap: normal; }
p.rec { font-size: 1.1em; }
"""

#: A header cell of ``DataFrame.to_html``.
_HEADER_CELL = re.compile(r"<th>(.*?)</th>", re.S)


def markdown_table(table: pd.DataFrame) -> str:
    """``table`` as a GitHub-flavoured Markdown table (a ``|`` in a cell is escaped)."""

    def cells(values) -> str:
        return "| " + " | ".join(str(v).replace("|", "\\|") for v in values) + " |"

    lines = [cells(table.columns), "|" + "|".join("---" for _ in table.columns) + "|"]
    lines += [cells(row) for row in table.itertuples(index=False)]
    return "\n".join(lines)


def html_table(table: pd.DataFrame) -> str:
    """``table`` as an HTML table in a ``div.table`` box, its cells escaped; a header may break
    after each underscore (``step_time_ms_p50`` takes the width of ``step_``, not the whole)."""
    text = table.to_html(index=False, border=0, escape=True)
    text = _HEADER_CELL.sub(lambda m: "<th>" + m.group(1).replace("_", "_<wbr>") + "</th>", text)
    return f'<div class="table">\n{text}\n</div>'


def html_page(title: str, body: Iterable[str]) -> str:
    """A standalone UTF-8 page titled ``title`` (escaped) around the ``body`` elements (HTML)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
    ]
    return "\n".join([*head, *body, "</body></html>"]) + "\n"


def samples_text(value: float | None) -> str:
    """A sample count (a batch size, B_simple, a knee) for text: whole from 10 up, two
    significant digits below; ∞ for +inf or None (an open bound, which JSON stores as null),
    – for NaN or −inf."""
    if value is None:
        return "∞"
    if not math.isfinite(value):
        return "∞" if value > 0 else "–"
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.2g}"


def sizes_text(sizes: Iterable[Any]) -> str:
    """Batch sizes for text: ``16, 32, 64``."""
    return ", ".join(str(int(s)) for s in sizes)


def lr_text(entry: Mapping[str, Any]) -> str:
    """The learning rate of a batch size (``lr``), and how it was scaled from ``base_lr`` when
    ``lr_scaling`` scaled it: ``0.1 (linear scaling of base lr 0.05)``; ``unknown`` without one."""
    lr = entry.get("lr")
    if results.is_missing(lr):
        return "unknown"
    text = f"{lr:.4g}"
    scaling, base = entry.get("lr_scaling"), entry.get("base_lr")
    if scaling and scaling != "none" and not results.is_missing(base):
        text += f" ({scaling} scaling of base lr {base:.4g})"
    return text
