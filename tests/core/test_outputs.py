"""batchscope.core.outputs: the table the rules declare their figures from."""

from pathlib import Path

from batchscope.core import outputs

REPORT = Path(__file__).resolve().parents[2] / "workflow" / "report"


def test_every_figure_has_its_caption_and_a_name_of_its_own():
    figures = outputs.PLOTS + outputs.TOKEN_PLOTS
    assert len({f.name for f in figures}) == len(figures)
    missing = [f.name for f in figures if not (REPORT / f"{f.name}.rst").is_file()]
    assert not missing, f"figures without a caption in workflow/report/: {missing}"
    assert all(f.path == f"results/plots/{f.name}.png" for f in figures)


def test_a_token_sweep_adds_its_figure_to_the_image_sweeps():
    assert set(outputs.plots(tokens=True)) - set(outputs.plots(tokens=False)) == {
        *outputs.TOKEN_PLOTS
    }
