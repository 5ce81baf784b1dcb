"""The shared document pieces: Markdown tables and standalone HTML pages."""

import re

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


def test_sample_counts_read_the_same_in_both_reports():
    text = documents.samples_text
    assert [text(v) for v in (1234.6, 64.0, 7.25, 0.5)] == ["1235", "64", "7.2", "0.5"]
    # an open bound: inf in the convergence report's tables, null in its JSON findings
    assert text(float("inf")) == "∞" and text(None) == "∞"
    assert text(float("nan")) == "–" and text(float("-inf")) == "–"
    assert documents.sizes_text([16, 32.0, 64]) == "16, 32, 64"


def test_learning_rate_text_names_the_scaling_when_there_was_one():
    lr_text = documents.lr_text
    scaled = {"lr": 0.1, "base_lr": 0.05, "lr_scaling": "linear"}
    assert lr_text(scaled) == "0.1 (linear scaling of base lr 0.05)"
    assert lr_text({**scaled, "lr_scaling": "none"}) == "0.1"
    assert lr_text({**scaled, "base_lr": float("nan")}) == "0.1"  # a table's empty cell
    assert lr_text({"lr": None}) == lr_text({"lr": float("nan")}) == "unknown"


def _layout_block(layout: str, room: str) -> str:
    """The layout's lines about ``room`` (``"plots/"``): its line and those indented under it."""
    lines = layout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(room))
    block = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("    "):
            break
        block.append(line)
    return "\n".join(block)


def test_the_readme_layout_names_every_module_and_rules_file_and_nothing_else():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    layout = readme[readme.index("## Layout") :]
    layout = layout[: layout.index("\n```\n", layout.index("```") + 3)]
    floors = [root / "batchscope" / floor for floor in ("core", "bench", "report")]
    modules = {
        p.relative_to(floor): p.name
        for floor in floors
        for p in floor.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    for path, name in sorted(modules.items()):
        if len(path.parts) == 1:
            prefix = name.removesuffix(".py").split("_")[0]
            families = (f"{prefix}*.py", f"{prefix}_*.py")
            assert name in layout or any(f in layout for f in families), f"Layout lacks {name}"
        else:  # a room's module: its stem among the room's lines
            room = _layout_block(layout, f"{path.parts[0]}/")
            assert re.search(rf"\b{path.stem}\b", room), f"Layout lacks {path}"
    for rules in (root / "workflow" / "rules").glob("*.smk"):
        assert f"workflow/rules/{rules.name}" in layout
    named = set(re.findall(r"\b(\w+\.py)\b", layout))
    scripts = {p.name for p in (root / "scripts").glob("*.py")}
    unknown = named - set(modules.values()) - scripts
    assert not unknown, f"Layout names what does not exist: {unknown}"
