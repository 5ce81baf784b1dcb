"""The token sweep's memory figure: peak memory against batch x sequence length."""

import pandas as pd

from batchscope.core import results
from batchscope.report.plots import build
from batchscope.report.plots.memory_tokens import memory_tokens_figure
from tests.factories import fake_result


def _summary(rows) -> pd.DataFrame:
    return pd.DataFrame(
        [
            fake_result("infer", sequence_length=s, batch_size=b, peak_mem_mb=mem, status=status)
            for s, b, mem, status in rows
        ]
    )


def test_one_line_per_sequence_length_over_the_tokens_a_step_holds():
    summary = _summary(
        [(16, 4, 100.0, "ok"), (16, 8, 130.0, "ok"), (64, 4, 190.0, "ok"), (64, 8, 0, "oom")]
    )
    fig = memory_tokens_figure(summary)
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["16", "64"]
    drawn = [
        (line.get_xdata().tolist(), line.get_ydata().tolist())
        for line in ax.get_lines()
        if len(line.get_xdata())
    ]
    assert drawn == [([64, 128], [100.0, 130.0]), ([256], [190.0])]
    # the batch that ran out of memory is marked at its tokens, 64 x 8
    marks = [c.get_offsets()[:, 0].tolist() for c in ax.collections if len(c.get_offsets())]
    assert [512.0] in marks
    assert "tokens per step" in ax.get_xlabel()


def test_only_a_sweep_over_token_data_draws_it():
    curves = pd.DataFrame(columns=list(results.curve_dtypes()))
    images = pd.DataFrame([fake_result("infer")])
    assert "memory_tokens.png" not in build.all_figures(images, curves)
    tokens = _summary([(16, 4, 100.0, "ok")])
    assert "memory_tokens.png" in build.all_figures(tokens, curves)
