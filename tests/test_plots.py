"""Tests for batchscope.plots on small synthetic summary/curves tables."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from batchscope import plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(mode="train", model="small_cnn", batch_size=64, num_workers=0, seed=0, status="ok"):
    """One summary row; throughput grows with batch size, failed runs have no numbers."""
    ok = status == "ok"
    train = mode == "train"
    return {
        "mode": mode,
        "model": model,
        "dataset": "synthetic",
        "batch_size": batch_size,
        "num_workers": num_workers,
        "seed": seed,
        "device": "cpu",
        "status": status,
        "samples_per_s": 10.0 * batch_size + num_workers + seed if ok else np.nan,
        "step_time_ms_p50": 100.0 if ok else np.nan,
        "step_time_ms_iqr": 2.0 if ok else np.nan,
        "peak_mem_mb": 50.0 + batch_size if ok else np.nan,
        "data_wait_frac": 0.5 / (num_workers + 1) if ok else np.nan,
        "final_loss": 1.0 if ok and train else np.nan,
        "val_accuracy": 0.6 if ok and train else np.nan,
        "env_fingerprint": "0123456789ab",
    }


def sweep(modes=("train", "infer"), sizes=(7, 50, 256), oom=1024, seeds=(0,)):
    """A full grid per mode: ``sizes`` ok, ``oom`` out of memory, workers 0 and 2."""
    rows = [
        run(mode, batch_size=b, num_workers=w, seed=s)
        for mode in modes
        for b in sizes
        for w in (0, 2)
        for s in seeds
    ]
    rows += [
        run(mode, batch_size=oom, num_workers=w, status="oom") for mode in modes for w in (0, 2)
    ]
    return pd.DataFrame(rows)


def curves_for(summary: pd.DataFrame, steps: int = 5) -> pd.DataFrame:
    """Steps rows for every run of ``summary`` that has steps (all but OOM)."""
    rows = []
    for _, r in summary[summary["status"] != "oom"].iterrows():
        train = r["mode"] == "train"
        for i in range(steps):
            loss = 2.0 / (i + 1) if train else np.nan
            if r["status"] == "diverged" and i == steps - 1:
                loss = np.inf
            rows.append(
                {
                    **{k: r[k] for k in plots.GRID_KEYS},
                    "step": i,
                    "phase": "warmup" if i < 2 else "measured",
                    "samples_seen": (i + 1) * r["batch_size"],
                    "elapsed_s": 0.1 * i,
                    "step_time_ms": 10.0,
                    "data_wait_ms": 1.0,
                    "loss": loss,
                    "lr": 0.1 if train else np.nan,
                }
            )
    return pd.DataFrame(rows)


def texts(fig) -> list[str]:
    """Every piece of text on the figure: titles, annotations, legends, tick labels."""
    return [t.get_text() for t in fig.findobj(plt.Text)]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_throughput_marks_oom_and_uses_actual_batch_sizes():
    summary = sweep(modes=("infer",))
    fig = plots.throughput_figure(summary)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [7, 50, 256, 1024]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["7", "50", "256", "1024"]
    assert "throughput (samples/s)" in ax.get_ylabel()
    assert "OOM" in [t.get_text() for t in ax.texts]
    assert "OOM" in [t.get_text() for t in ax.get_legend().get_texts()]
    marked = [c.get_offsets()[:, 0].tolist() for c in ax.collections]
    assert [1024.0] in marked


def test_throughput_line_is_mean_over_seeds():
    summary = sweep(modes=("infer",), sizes=(8, 16), seeds=(0, 1, 2))
    fig = plots.throughput_figure(summary)
    assert "mean ± sd over seeds" in fig.texts[0].get_text()
    line = next(line for line in fig.axes[0].lines if len(line.get_xdata()) == 2)
    # workers 0, sizes 8 and 16, seeds add 0/1/2 -> mean adds 1
    assert list(line.get_ydata()) == [81.0, 161.0]


def test_panel_without_successful_runs_still_shows_the_failures():
    summary = pd.DataFrame([run(batch_size=b, status="oom") for b in (512, 1024)])
    fig = plots.peak_memory_figure(summary)
    found = texts(fig)
    assert "no successful runs" in found
    assert found.count("OOM") >= 2
    assert fig.axes[0].get_ylabel() == "peak memory (MB)"


def test_diverged_points_have_their_own_mark():
    summary = pd.DataFrame(
        [
            run(batch_size=32),
            run(batch_size=64),
            run(batch_size=64, num_workers=2, status="diverged"),
        ]
    )
    found = texts(plots.throughput_figure(summary))
    assert "diverged" in found


def test_data_wait_heatmap_labels_oom_cells():
    summary = sweep(modes=("train",))
    fig = plots.data_wait_figure(summary)
    ax = fig.axes[0]
    cell_texts = [t.get_text() for t in ax.texts]
    assert cell_texts.count("OOM") == 2  # batch 1024 x workers 0, 2
    assert "0.50" in cell_texts and "0.17" in cell_texts
    colorbar = fig.axes[1]
    assert colorbar.get_ylabel() == "data wait (fraction of step time)"


def test_loss_curves_show_phases_oom_and_divergence():
    summary = pd.concat(
        [sweep(modes=("train",)), pd.DataFrame([run(batch_size=128, status="diverged")])],
        ignore_index=True,
    )
    fig = plots.loss_curves_figure(curves_for(summary), summary)
    found = texts(fig)
    assert "OOM (no steps): batch size 1024" in found
    assert "bs 128 diverged" in found
    assert {"warm-up step", "7", "50", "256"} <= set(found)
    assert fig.axes[0].get_xlabel() == "samples seen (samples)"


@pytest.mark.parametrize("figure", [plots.loss_curves_figure, plots.val_accuracy_figure])
def test_train_figures_without_train_runs_say_so(figure):
    summary = sweep(modes=("infer",))
    fig = figure(curves_for(summary)) if figure is plots.loss_curves_figure else figure(summary)
    assert plots.NO_TRAIN_RUNS in texts(fig)


def test_empty_sweep_gives_placeholders():
    empty = pd.DataFrame(columns=list(run()))
    for fig in plots.all_figures(empty, pd.DataFrame(columns=[*plots.GRID_KEYS, "loss"])).values():
        assert {plots.NO_RUNS, plots.NO_TRAIN_RUNS} & set(texts(fig))


def test_main_writes_every_png(tmp_path):
    summary = sweep(modes=("infer",), sizes=(4, 8))
    summary_csv, curves_csv = tmp_path / "summary.csv", tmp_path / "curves.csv"
    summary.to_csv(summary_csv, index=False)
    curves_for(summary).to_csv(curves_csv, index=False)
    outdir = tmp_path / "plots"

    argv = ["--summary", str(summary_csv), "--curves", str(curves_csv), "--outdir", str(outdir)]
    assert plots.main(argv) == 0

    names = {"throughput.png", "peak_memory.png", "data_wait.png"}
    names |= {"loss_curves.png", "val_accuracy.png"}
    assert {p.name for p in outdir.iterdir()} == names
    for name in names:
        data = (outdir / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
