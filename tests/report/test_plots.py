"""Tests for batchscope.report.plots.build on small synthetic summary/curves tables."""

from __future__ import annotations

import itertools
import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import LineCollection

from batchscope.core import outputs, results
from batchscope.report.plots import breakdown as plots_time
from batchscope.report.plots import build as plots
from batchscope.report.plots import lines as plots_lines
from batchscope.report.plots import loss as plots_loss
from batchscope.report.plots import panels as plots_panels
from tests.factories import summary_row

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(
    mode="train",
    model="small_cnn",
    batch_size=64,
    num_workers=0,
    seed=0,
    status="ok",
    accumulation_steps=1,
):
    """One summary row; throughput grows with batch size, failed runs have no numbers."""
    grid = {"model": model, "batch_size": batch_size, "num_workers": num_workers, "seed": seed}
    measured = {
        "samples_per_s": 10.0 * batch_size + num_workers + seed,
        "step_time_ms_p50": 100.0,
        "step_time_ms_iqr": 2.0,
        "peak_mem_mb": 50.0 + batch_size,
        "data_wait_frac": 0.5 / (num_workers + 1),
    }
    if mode == "train":
        measured.update(final_loss=1.0, val_accuracy=0.6)
    return summary_row(
        mode,
        status=status,
        accumulation_steps=accumulation_steps,
        **grid,
        **(measured if status == "ok" else {}),
    )


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
                    **{k: r[k] for k in results.GRID_KEYS},
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
    fig = plots_lines.throughput_figure(summary)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [7, 50, 256, 1024]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["7", "50", "256", "1024"]
    assert "throughput (samples/s)" in ax.get_ylabel()
    assert "OOM" in [t.get_text() for t in ax.texts]
    assert "OOM" in [t.get_text() for t in ax.get_legend().get_texts()]
    marked = [c.get_offsets()[:, 0].tolist() for c in ax.collections]
    assert [1024.0] in marked


def _error_bars(ax) -> list[tuple[float, float, float]]:
    """(x, bottom, top) of every vertical error bar on ``ax``, sorted."""
    bars = []
    for collection in ax.collections:
        if isinstance(collection, LineCollection):
            for (x0, y0), (x1, y1) in collection.get_segments():
                if x0 == x1:
                    bars.append((float(x0), float(min(y0, y1)), float(max(y0, y1))))
    return sorted(bars)


def _line(ax, workers: int):
    (line,) = [line for line in ax.lines if line.get_gid() == f"workers={workers}"]
    return line


def test_throughput_line_is_mean_over_seeds_with_a_confidence_interval():
    summary = sweep(modes=("infer",), sizes=(8, 16), seeds=(0, 1, 2))
    fig = plots_lines.throughput_figure(summary)
    assert "95% CI of the mean over runs (seeds x rounds)" in fig.texts[0].get_text()
    ax = fig.axes[0]
    line = _line(ax, 0)
    # workers 0, sizes 8 and 16, seeds add 0/1/2 -> mean adds 1
    assert list(line.get_ydata()) == [81.0, 161.0]
    # seeds 80, 81, 82: sd 1, t(2) = 4.3027, half-width 4.3027 / sqrt(3)
    half = 4.302652729749464 / 3**0.5
    bars = _error_bars(ax)
    assert len(bars) == 4  # two sizes x two worker counts
    assert bars[0] == (8.0, pytest.approx(81.0 - half), pytest.approx(81.0 + half))
    assert bars[1] == (8.0, pytest.approx(83.0 - half), pytest.approx(83.0 + half))


def test_single_seed_error_bars_are_the_window_iqr_and_noisy_points_are_hollow():
    summary = pd.DataFrame([run("infer", batch_size=b) for b in (8, 16, 32)]).assign(
        samples_per_s=[1000.0, 2000.0, 2500.0],
        samples_per_s_iqr=[40.0, 100.0, 500.0],
        noisy=[False, False, True],
    )
    fig = plots_lines.throughput_figure(summary)
    assert "one run: median ± IQR/2 of its measurement windows" in fig.texts[0].get_text()
    assert "CI" not in fig.texts[0].get_text()
    ax = fig.axes[0]
    assert _error_bars(ax) == [(8.0, 980.0, 1020.0), (16.0, 1950.0, 2050.0), (32.0, 2250.0, 2750.0)]
    (hollow,) = [c for c in ax.collections if c.get_gid() == "noisy"]
    assert hollow.get_offsets().tolist() == [[32.0, 2500.0]]
    assert tuple(hollow.get_facecolors()[0]) == (1.0, 1.0, 1.0, 1.0)
    assert plots_lines.NOISY_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]


def test_failed_and_missing_points_are_marked_everywhere():
    summary = pd.concat(
        [
            sweep(modes=("train",), sizes=(32, 64), oom=128),
            pd.DataFrame([run(batch_size=256, status="failed")]),
            pd.DataFrame([run(batch_size=256, num_workers=2, status="missing")]),
        ],
        ignore_index=True,
    )
    for figure in (
        plots_lines.throughput_figure,
        plots_lines.peak_memory_figure,
        plots_lines.val_accuracy_figure,
    ):
        (ax,) = figure(summary).axes
        labels = [t.get_text() for t in ax.texts]
        assert {"OOM", "failed", "missing"} <= set(labels)
        assert {"failed", "missing"} <= {t.get_text() for t in ax.get_legend().get_texts()}
        assert 256 in ax.get_xticks()
    heat = plots_time.data_wait_figure(summary).axes[0]
    cells = [t.get_text() for t in heat.texts]
    assert cells.count("failed") == 1 and cells.count("missing") == 1
    found = texts(plots_loss.loss_curves_figure(curves_for(summary), summary))
    assert "failed (no result): batch size 256" in found
    assert "missing (no result): batch size 256" in found
    assert "OOM (no steps): batch size 128" in found


def breakdown_rows(mode: str, batch_size: int, num_workers: int, seed: int = 0, **parts):
    """A summary row with a step-time breakdown whose parts add up to step_time_ms_mean."""
    times = {
        "time_runner_ms": 0.5,
        "time_data_wait_ms": 4.0 / (num_workers + 1),
        "time_h2d_ms": 0.25,
        "time_forward_ms": batch_size / 8 + seed,
        "time_backward_ms": batch_size / 4 if mode == "train" else np.nan,
        "time_optimizer_ms": 1.0 if mode == "train" else np.nan,
        "time_other_ms": 0.75,
        **parts,
    }
    step = sum(v for v in times.values() if not np.isnan(v))
    row = run(mode, batch_size=batch_size, num_workers=num_workers, seed=seed)
    return {**row, **times, "step_time_ms_mean": step}


def _stacks(ax) -> dict[float, float]:
    """Bar centre -> summed height of the bars stacked there."""
    totals: dict[float, float] = {}
    for patch in ax.patches:
        centre = round(patch.get_x() + patch.get_width() / 2, 6)
        totals[centre] = totals.get(centre, 0.0) + patch.get_height()
    return totals


def test_breakdown_bars_and_dash_come_from_the_runs_that_timed_a_breakdown():
    """Only a point's first round times the breakdown; its later rounds (slower here) leave
    the time_*_ms keys empty and neither the bars nor the dash take them in."""
    first = breakdown_rows("infer", 64, 0)
    blank = {key: np.nan for key in first if key.startswith("time_")}
    later = [{**first, **blank, "round": r, "step_time_ms_mean": 50.0} for r in (2, 3)]
    ax = plots_time.breakdown_figure(pd.DataFrame([first, *later])).axes[0]
    (stack,) = _stacks(ax).values()
    assert stack == pytest.approx(first["step_time_ms_mean"])
    (dashes,) = [c for c in ax.collections if c.get_label() == "mean step time"]
    assert dashes.get_offsets()[:, 1].tolist() == pytest.approx([first["step_time_ms_mean"]])


def test_breakdown_bars_add_up_to_the_mean_step_time():
    rows = [
        breakdown_rows(mode, b, w, seed)
        for mode in ("train", "infer")
        for b in (16, 64)
        for w in (0, 2)
        for seed in (0, 1)
    ]
    rows.append(run("train", batch_size=128, num_workers=0, status="failed"))
    summary = pd.DataFrame(rows)
    fig = plots_time.breakdown_figure(summary)
    assert [ax.get_title() for ax in fig.axes] == [
        "infer / small_cnn (synthetic)",
        "train / small_cnn (synthetic)",
    ]
    for ax, mode in zip(fig.axes, ("infer", "train"), strict=True):
        ticks = [t.get_text() for t in ax.get_xticklabels()]
        expected = ["16/0", "16/2", "64/0", "64/2"] + (["128/0"] if mode == "train" else [])
        assert ticks == expected
        stacks = _stacks(ax)
        assert len(stacks) == 4  # the failed point has no bar, only its label
        ok = summary[(summary["mode"] == mode) & (summary["status"] == "ok")]
        want = ok.groupby(["batch_size", "num_workers"])["step_time_ms_mean"].mean().tolist()
        assert [stacks[x] for x in sorted(stacks)] == pytest.approx(want)
        stacked = [bars.get_label() for bars in ax.containers]
        parts = ["runner", "data wait", "host-to-device copy", "forward"]
        parts += ["backward", "optimizer"] if mode == "train" else []
        assert stacked == [*parts, "other"]  # bottom to top; infer has no backward, optimizer
        # the dash marking the step time sits on top of each stack
        (dashes,) = [c for c in ax.collections if c.get_label() == "mean step time"]
        assert dashes.get_offsets()[:, 1].tolist() == pytest.approx(want)
    assert "failed" in [t.get_text() for t in fig.axes[1].texts]
    (legend,) = fig.legends  # one for all panels, top of the stack first
    assert [t.get_text() for t in legend.get_texts()] == [
        "other",
        "optimizer",
        "backward",
        "forward",
        "host-to-device copy",
        "data wait",
        "runner",
        "mean step time",
    ]


def test_breakdown_without_timings_says_so():
    summary = sweep(modes=("infer",))
    older = summary.drop(columns=[c for c in summary if re.fullmatch(r"time_\w+_ms", c)])
    assert plots_time.NO_BREAKDOWN in texts(plots_time.breakdown_figure(older))


def write_search(path, limit=3000, mode="train", model="small_cnn"):
    search = {
        "mode": mode,
        "model": model,
        "limit": limit,
        "usable_mb": 5000.0,
        "curve": [{"batch_size": b, "peak_mem_mb": 100 + 1.6 * b} for b in (1, 2, 4, 2048, limit)],
        "trials": [
            {"batch_size": 4096, "fits": False, "peak_mem_mb": 6600.0, "status": "oom"},
            {"batch_size": 8192, "fits": False, "peak_mem_mb": None, "status": "oom"},
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(search))
    return path


def test_memory_figure_marks_the_largest_batch_that_fits(tmp_path):
    summary = sweep(modes=("train", "infer"), sizes=(32, 64), oom=128)
    search = plots.read_maxbatch([write_search(tmp_path / "maxbatch" / "train" / "x.json")])
    assert list(search) == [("train", "small_cnn")]
    fig = plots_lines.peak_memory_figure(summary, search)
    infer, train = fig.axes
    limits = [line for line in train.lines if line.get_label() == plots_lines.LIMIT_LABEL]
    assert len(limits) == 1 and list(limits[0].get_xdata()) == [3000, 3000]
    assert "largest batch that fits: 3000" in [t.get_text() for t in train.texts]
    (trials,) = [line for line in train.lines if line.get_label() == "search trials that ran"]
    assert list(trials.get_xdata()) == [1, 2, 4, 2048, 3000]
    (misses,) = [c for c in train.collections if c.get_label() == "search trials that did not fit"]
    assert misses.get_offsets().tolist() == [[4096.0, 6600.0]]
    assert 3000 in train.get_xticks() and train.get_xlim()[1] > 4096
    assert not [line for line in infer.lines if line.get_label() == plots_lines.LIMIT_LABEL]
    # without a search file nothing is drawn
    plain = plots_lines.peak_memory_figure(summary).axes[1]
    assert not [line for line in plain.lines if line.get_label() == plots_lines.LIMIT_LABEL]


def test_search_files_are_matched_by_path_without_mode_keys(tmp_path):
    path = write_search(tmp_path / "maxbatch" / "infer" / "resnet18.json")
    data = json.loads(path.read_text())
    del data["mode"], data["model"]
    path.write_text(json.dumps(data))
    assert list(plots.read_maxbatch([path])) == [("infer", "resnet18")]


def test_panel_without_successful_runs_still_shows_the_failures():
    summary = pd.DataFrame([run(batch_size=b, status="oom") for b in (512, 1024)])
    fig = plots_lines.peak_memory_figure(summary)
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
    found = texts(plots_lines.throughput_figure(summary))
    assert "diverged" in found


def test_data_wait_heatmap_labels_oom_cells():
    summary = sweep(modes=("train",))
    fig = plots_time.data_wait_figure(summary)
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
    fig = plots_loss.loss_curves_figure(curves_for(summary), summary)
    found = texts(fig)
    assert "OOM (no steps): batch size 1024" in found
    assert "bs 128 diverged" in found
    assert {"warm-up step", "7", "50", "256"} <= set(found)
    assert fig.axes[0].get_xlabel() == "samples seen (samples)"


def test_each_accumulation_value_gets_its_own_panels():
    rows = [
        run("train", batch_size=b, num_workers=w, accumulation_steps=a)
        for b in (16, 64)
        for w in (0, 2)
        for a in (1, 4)
    ]
    rows += [run("infer", batch_size=b, num_workers=w) for b in (16, 64) for w in (0, 2)]
    summary = pd.DataFrame(rows)
    accumulated = (
        "train / small_cnn (synthetic)\n4 accumulation steps (effective batch = batch size x 4)"
    )
    expected = [
        "infer / small_cnn (synthetic)",
        "train / small_cnn (synthetic)",
        accumulated,
    ]
    figures = [plots_lines.throughput_figure(summary), plots_time.data_wait_figure(summary)]
    for fig in figures:
        assert [ax.get_title() for ax in fig.axes if ax.get_title()] == expected
    loss = plots_loss.loss_curves_figure(curves_for(summary), summary)
    assert [ax.get_title() for ax in loss.axes] == expected[1:]
    # the x axis stays the micro-batch size each run was given
    throughput = figures[0].axes[2]
    assert [t.get_text() for t in throughput.get_xticklabels()] == ["16", "64"]


@pytest.mark.parametrize("figure", [plots_loss.loss_curves_figure, plots_lines.val_accuracy_figure])
def test_train_figures_without_train_runs_say_so(figure):
    summary = sweep(modes=("infer",))
    fig = (
        figure(curves_for(summary)) if figure is plots_loss.loss_curves_figure else figure(summary)
    )
    assert plots_panels.NO_TRAIN_RUNS in texts(fig)


def test_empty_sweep_gives_placeholders():
    empty = pd.DataFrame(columns=list(run()))
    for fig in plots.all_figures(
        empty, pd.DataFrame(columns=[*results.GRID_KEYS, "loss"])
    ).values():
        assert {plots_panels.NO_RUNS, plots_panels.NO_TRAIN_RUNS} & set(texts(fig))


def test_main_writes_every_png(tmp_path):
    summary = pd.DataFrame(
        [breakdown_rows(mode, b, w) for mode in ("train", "infer") for b in (4, 8) for w in (0, 2)]
    )
    summary_csv, curves_csv = tmp_path / "summary.csv", tmp_path / "curves.csv"
    summary.to_csv(summary_csv, index=False)
    curves_for(summary).to_csv(curves_csv, index=False)
    outdir = tmp_path / "plots"
    search = write_search(tmp_path / "maxbatch" / "train" / "small_cnn.json", limit=16)

    argv = ["--summary", str(summary_csv), "--curves", str(curves_csv), "--outdir", str(outdir)]
    assert plots.main([*argv, "--maxbatch", str(search)]) == 0

    names = {figure.file for figure in outputs.plots(tokens=False)}  # what the rule declares
    assert {p.name for p in outdir.iterdir()} == names
    for name in names:
        data = (outdir / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert plots.main(argv) == 0  # --maxbatch is optional


def test_throughput_draws_the_compute_only_ceiling_when_known():
    summary = pd.DataFrame(
        {"mode": "infer", "model": "m", "dataset": "d", "batch_size": [8, 16], "num_workers": 0,
         "seed": 0, "status": "ok", "samples_per_s": [50.0, 80.0], "samples_per_s_iqr": 1.0,
         "noisy": False, "ceiling_samples_per_s": [200.0, 300.0]}
    )  # fmt: skip
    fig = plots_lines.throughput_figure(summary)
    lines = [ln for ln in fig.axes[0].get_lines() if "ceiling" in str(ln.get_label())]
    assert len(lines) == 1 and list(lines[0].get_ydata()) == [200.0, 300.0]
    no_ceiling = plots_lines.throughput_figure(summary.drop(columns="ceiling_samples_per_s"))
    assert not [ln for ln in no_ceiling.axes[0].get_lines() if "ceiling" in str(ln.get_label())]


def test_the_throughput_figure_marks_the_pick_its_tie_set_and_the_eliminated_points():
    summary = sweep(modes=("train",))
    answer = {
        "answers": [
            {
                "mode": "train",
                "model": "small_cnn",
                "dataset": "synthetic",
                "accumulation_steps": 1,
                "pick": {"batch_size": 50, "num_workers": 0},
                "tie_set": [
                    {"batch_size": 50, "num_workers": 2},
                    {"batch_size": 50, "num_workers": 0},
                ],
                "verdict": "tie",
            }
        ]
    }
    eliminated = {("train", "small_cnn", None, 7, 1, 0, 1): 2}
    fig = plots_lines.throughput_figure(summary, answer, eliminated)
    (ax,) = [a for a in fig.axes if a.get_title().startswith("train")]
    offsets = {c.get_gid(): c.get_offsets().tolist() for c in ax.collections if c.get_gid()}
    assert [x for x, _ in offsets["pick"]] == [50]
    assert [x for x, _ in offsets["tie_set"]] == [50]  # the other member, not the pick again
    assert [x for x, _ in offsets["eliminated"]] == [7]
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"pick (tie)", "tied with the pick", "left the race (slower)"} <= labels
    # without an answer nothing is marked
    plain = plots_lines.throughput_figure(summary)
    assert not any(c.get_gid() in ("pick", "tie_set", "eliminated") for a in plain.axes
                   for c in a.collections)  # fmt: skip


def _cielab(rgb) -> np.ndarray:
    """An sRGB colour (0-1) in CIELAB (D65): Euclidean distance there is the CIE76 ΔE, about
    2.3 for a just noticeable difference."""
    linear = np.array(rgb[:3], dtype=float)
    linear = np.where(linear > 0.04045, ((linear + 0.055) / 1.055) ** 2.4, linear / 12.92)
    to_xyz = np.array(
        [[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]
    )
    xyz = to_xyz @ linear / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_breakdown_parts_have_clearly_different_colours():
    summary = pd.DataFrame([breakdown_rows("train", b, w) for b in (16, 64) for w in (0, 2)])
    ax = plots_time.breakdown_figure(summary).axes[0]
    colours = {bars.get_label(): bars.patches[0].get_facecolor() for bars in ax.containers}
    assert len(colours) == len(plots_time.BREAKDOWN_PARTS)
    # the palette in order gave "data wait" and "forward" two oranges 25.6 ΔE apart
    for (a, ca), (b, cb) in itertools.combinations(colours.items(), 2):
        assert np.linalg.norm(_cielab(ca) - _cielab(cb)) > 30, (a, b)


def test_equal_validation_accuracies_of_two_worker_counts_stay_visible_side_by_side():
    summary = sweep(modes=("train",), sizes=(8, 64))  # every val_accuracy is 0.6
    ax = plots_lines.val_accuracy_figure(summary).axes[0]
    zero, two = _line(ax, 0), _line(ax, 2)
    assert list(zero.get_ydata()) == list(two.get_ydata()) == [0.6, 0.6]
    # drawn apart along x, so neither line covers the other, each still near its batch size
    assert all(a < b for a, b in zip(zero.get_xdata(), two.get_xdata(), strict=True))
    for line in (zero, two):
        assert np.allclose(line.get_xdata(), [8, 64], rtol=0.15)
        assert ax.get_xlim()[0] < min(line.get_xdata()) and max(line.get_xdata()) < ax.get_xlim()[1]
    # the throughput figure is not shifted
    throughput = plots_lines.throughput_figure(summary).axes[0]
    assert list(_line(throughput, 0).get_xdata()) == list(_line(throughput, 2).get_xdata())


def test_the_scaling_figure_draws_throughput_and_efficiency_against_devices():
    from batchscope.report.plots import scaling
    from batchscope.report.summary import aggregate, point_table
    from tests.factories import summary_row

    rows = [summary_row(devices=d, samples_per_s=r) for d, r in [(1, 100.0), (2, 150.0)]]
    summary = aggregate.add_scaling_efficiency(pd.DataFrame(rows))
    points = point_table.summarize_points(summary)
    fig = scaling.scaling_figure(points)
    speed, efficiency = [ax for ax in fig.axes if ax.get_visible()]
    throughput = speed.lines[0]
    assert list(throughput.get_xdata()) == [1, 2]
    assert list(throughput.get_ydata()) == pytest.approx([100.0, 150.0])
    assert list(efficiency.lines[0].get_ydata()) == pytest.approx([1.0, 0.75])
    # one devices value: nothing to scale, and the figure says so
    alone = scaling.scaling_figure(points[points["devices"] == 1])
    assert scaling.NO_SCALING in [t.get_text() for ax in alone.axes for t in ax.texts]
