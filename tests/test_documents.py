"""The shared document pieces: Markdown tables and standalone HTML pages."""

import pandas as pd

from batchscope.report import documents


def test_markdown_table_has_a_header_rule_and_escapes_pipes():
    table = pd.DataFrame({"batch_size": [32, 64], "note": ["a|b", "ok"]})
    lines = documents.markdown_table(table).splitlines()
    assert lines[0] == "| batch_size | note |"
    assert lines[1] == "|---|---|"
    assert lines[2] == "| 32 | a\\|b |"
    assert lines[3] == "| 64 | ok |"
    assert len(lines) == 4


def test_html_page_is_standalone_and_escapes_its_title_and_cells():
    table = documents.html_table(pd.DataFrame({"error": ["<oom & more>"]}))
    page = documents.html_page("a <b> & c", ["<h1>x</h1>", table])
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</body></html>\n")
    assert "<title>a &lt;b&gt; &amp; c</title>" in page
    assert "&lt;oom &amp; more&gt;" in page and "<oom" not in page
    assert page.index("<h1>x</h1>") < page.index("<table")
