"""batchscope.core.outputs: the table the rules declare their figures from."""

from pathlib import Path

from batchscope.core import outputs

REPORT = Path(__file__).resolve().parents[2] / "workflow" / "report"


def test_every_figure_has_its_caption_and_a_name_of_its_own():
    figures = outputs.FIGURES
    assert len({f.name for f in figures}) == len(figures)
    missing = [f.name for f in figures if not (REPORT / f"{f.name}.rst").is_file()]
    assert not missing, f"figures without a caption in workflow/report/: {missing}"
    assert all(f.path == f"{f.folder}/{f.name}.png" for f in figures)


def test_every_figure_a_rule_declares_is_a_row_of_the_table():
    """The rule files name no figure path of their own: each comes from the table."""
    rules = Path(__file__).resolve().parents[2] / "workflow" / "rules"
    for path in rules.glob("*.smk"):
        text = path.read_text(encoding="utf-8")
        assert "plots/" not in text.replace("outputs.PLOT_DIR", ""), f"{path.name} names a figure"


def test_a_token_sweep_adds_its_figure_to_the_image_sweeps():
    assert set(outputs.plots(tokens=True)) - set(outputs.plots(tokens=False)) == {
        *outputs.TOKEN_PLOTS
    }
