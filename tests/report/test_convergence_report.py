"""Tests for batchscope.report.convergence.build on crafted summary and curves tables."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml

from batchscope.core.config import check, load_schema
from batchscope.core.stats import log_mean_ci, mean_ci
from batchscope.report.convergence import build as cr
from batchscope.report.convergence import figures as figs
from batchscope.report.convergence import fits, pages, tables
from tests.factories import summary_row

ROOT = Path(__file__).resolve().parents[2]

#: Steps to the target follow S = S_MIN (1 + B_NOISE/B); each seed is off by these factors.
S_MIN, B_NOISE = 100.0, 64.0
SEED_FACTORS = (0.95, 1.0, 1.05)
SIZES = (16, 32, 64, 128, 256)
#: t(0.975, df=2), from tables.
T_2 = 4.302652729911275


def step_time(batch: int) -> float:
    """Seconds per update: throughput grows with the batch, so the largest is the fastest."""
    return 0.01 + 0.0005 * batch


def run(batch, seed, *, reached=True, status="ok", workers=0, b_simple=70.0, steps_run=None):
    steps = S_MIN * (1 + B_NOISE / batch) * SEED_FACTORS[seed]
    ok = status == "ok"
    reached = reached and ok
    measured = {
        "samples_per_s": batch / step_time(batch),
        "steps_run": steps_run or round(steps * 1.5),
        "target_reached": reached,
        "steps_to_target": steps if reached else None,
        "samples_to_target": steps * batch if reached else None,
        "seconds_to_target": steps * step_time(batch) if reached else None,
        "lr": 0.05 * batch / 64,
        "base_lr": 0.05,
        "lr_scaling": "linear",
        "noise_scale_b_simple": b_simple + seed,
        "noise_scale_ci95_low": b_simple / 2,
        "noise_scale_ci95_high": b_simple * 2,
        "noise_scale_measurements": 40,
    }
    return summary_row(
        "train",
        status=status,
        dataset="fashion_mnist",
        batch_size=batch,
        num_workers=workers,
        seed=seed,
        target=0.8,
        **(measured if ok else {}),
    )


def sweep(**overrides) -> pd.DataFrame:
    """Every size x 3 seeds; at 256 seed 2 does not reach the target (ran 200 steps); 512 OOM."""
    rows = []
    for batch in SIZES:
        for seed in range(3):
            missed = batch == 256 and seed == 2
            rows.append(run(batch, seed, reached=not missed, steps_run=200 if missed else None))
    rows += [run(512, seed, status="oom") for seed in range(3)]
    frame = pd.DataFrame(rows)
    for column, value in overrides.items():
        frame[column] = value
    return frame


def curves_for(summary: pd.DataFrame, steps: int = 40) -> pd.DataFrame:
    """Per-step rows of the ok runs: loss falls, validation every 10 steps, and noise-scale
    measurements every 5 steps consistent with |G|² = 1 and tr Σ = B_NOISE (B_simple = 64)."""
    rows = []
    for r in summary[summary["status"] == "ok"].itertuples(index=False):
        small, big = r.batch_size // 4, r.batch_size
        for step in range(1, steps + 1):
            row = {
                "mode": r.mode,
                "model": r.model,
                "dataset": r.dataset,
                "batch_size": r.batch_size,
                "num_workers": r.num_workers,
                "seed": r.seed,
                "step": step,
                "phase": "measured",
                "samples_seen": step * r.batch_size,
                "elapsed_s": step * step_time(r.batch_size),
                "step_time_ms": 1000 * step_time(r.batch_size),
                "data_wait_ms": 0.1,
                "loss": 2.3 / (1 + 0.1 * step) + 0.01 * r.seed,
                "lr": r.lr,
                "val_accuracy": 0.5 + step / 100 if step % 10 == 0 else np.nan,
                "val_loss": 2.0 / (1 + 0.1 * step) if step % 10 == 0 else np.nan,
                "noise_sq_small": 1 + B_NOISE / small if step % 5 == 0 else np.nan,
                "noise_sq_big": 1 + B_NOISE / big if step % 5 == 0 else np.nan,
            }
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def by_gid(fig, gid):
    return [a for ax in fig.axes for a in ax.get_children() if a.get_gid() == gid]


# --- statistics --------------------------------------------------------------------------------


def test_mean_ci_is_student_t_over_the_finite_values():
    mean, low, high = mean_ci([475.0, 500.0, 525.0, np.nan, "x"])
    half = T_2 * 25.0 / math.sqrt(3)
    assert mean == pytest.approx(500.0)
    assert (low, high) == pytest.approx((500.0 - half, 500.0 + half), rel=1e-9)
    assert math.isnan(mean_ci([3.0])[1]) and mean_ci([3.0])[0] == 3.0
    assert all(math.isnan(v) for v in mean_ci([]))


def test_table_intervals_counts_and_lr():
    reports = cr.analyse(sweep())
    assert len(reports) == 1
    table = reports[0].table.set_index("effective_batch_size")
    steps16 = [S_MIN * (1 + B_NOISE / 16) * f for f in SEED_FACTORS]
    half = T_2 * np.std(steps16, ddof=1) / math.sqrt(3)
    assert table.at[16, "steps_mean"] == pytest.approx(np.mean(steps16))
    assert table.at[16, "steps_low"] == pytest.approx(np.mean(steps16) - half)
    assert table.at[16, "steps_high"] == pytest.approx(np.mean(steps16) + half)
    assert table.at[16, "samples_mean"] == pytest.approx(np.mean(steps16) * 16)
    assert table.at[32, "lr"] == pytest.approx(0.025)
    # the seed that did not reach the target is counted, its budget kept, never averaged in
    assert (table.at[256, "n_seeds"], table.at[256, "n_reached"]) == (3, 2)
    assert table.at[256, "n_not_reached"] == 1 and not table.at[256, "all_reached"]
    assert table.at[256, "budget_steps"] == (200.0,)
    steps256 = [S_MIN * (1 + B_NOISE / 256) * f for f in SEED_FACTORS[:2]]
    assert table.at[256, "steps_mean"] == pytest.approx(np.mean(steps256))
    # OOM seeds are counted as failures of their batch size
    assert table.at[512, "n_failed"] == 3 and table.at[512, "n_reached"] == 0
    assert table.at[512, "failures"] == "0:oom;1:oom;2:oom"


def test_the_seconds_interval_is_taken_on_log_seconds_and_never_reaches_below_zero():
    # seconds spread as a noisy machine spreads them: on the seconds, 25 s [-11, 61]
    summary = _with_seconds(sweep(), {32: [8.0, 16.0, 51.0]})
    row = cr.analyse(summary)[0].table.set_index("effective_batch_size").loc[32]
    logs = np.log([8.0, 16.0, 51.0])
    half = T_2 * np.std(logs, ddof=1) / math.sqrt(3)
    assert row["seconds_mean"] == pytest.approx(math.exp(logs.mean()))
    assert row["seconds_low"] == pytest.approx(math.exp(logs.mean() - half))
    assert 0 < row["seconds_low"] < row["seconds_mean"] < row["seconds_high"]


# --- the knee --------------------------------------------------------------------------------


def test_fit_knee_recovers_the_curve_and_its_edges():
    sizes = [8, 16, 32, 64, 128, 256]
    exact = [S_MIN * (1 + B_NOISE / b) for b in sizes]
    knee = fits.fit_knee(sizes, exact)
    assert knee.edge is None
    assert knee.b_noise == pytest.approx(B_NOISE, rel=1e-4)
    assert knee.s_min == pytest.approx(S_MIN, rel=1e-4)
    assert knee.rms_log_residual < 1e-6
    perfect = fits.fit_knee(sizes, [1000.0 / b for b in sizes])
    assert perfect.edge == "above" and perfect.b_noise is None
    assert perfect.steps(8.0) == pytest.approx(125.0)
    flat = fits.fit_knee(sizes, [50.0] * len(sizes))
    assert flat.edge == "below" and flat.steps(1000.0) == pytest.approx(50.0)
    with pytest.raises(ValueError):
        fits.fit_knee([64, 64], [10.0, 11.0])


def test_knee_fit_uses_only_batch_sizes_every_seed_reached():
    report = cr.analyse(sweep())[0]
    assert [b for b, _ in report.knee.points] == [16, 32, 64, 128]
    assert report.knee.b_noise == pytest.approx(B_NOISE, rel=0.05)
    low, high = report.knee.interval
    assert low <= report.knee.b_noise <= high
    assert "256" in report.knee_note
    regimes = dict(zip(report.table["effective_batch_size"], report.table["regime"], strict=True))
    assert regimes[16] == fits.regime(16, report.knee.b_noise)  # on the edge: 16 = 64/4
    assert regimes[32] == regimes[64] == regimes[128] == "diminishing returns"
    assert regimes[256] == "no benefit"  # 256 >= 4 * 64


def test_no_knee_through_two_batch_sizes():
    # two points fix S_min and B_noise exactly, whatever the steps: a fit would always "fit"
    with pytest.raises(ValueError, match="3 or more batch sizes"):
        fits.fit_knee([16, 64], [500.0, 200.0])
    summary = sweep()
    report = cr.analyse(summary[summary["batch_size"].isin([16, 32, 256])])[0]
    assert report.knee is None
    assert "(2; at least 3 needed" in report.knee_note
    assert "the knee could not be fitted" in report.recommendation


def test_relation_and_regime_thresholds():
    assert fits.relation(32, 100) == "below"
    assert fits.relation(64, 100) == "around"
    assert fits.relation(200, 100) == "around"
    assert fits.relation(256, 100) == "above"
    assert fits.regime(16, 64) == "perfect scaling"
    assert fits.regime(100, 64) == "diminishing returns"
    assert fits.regime(256, 64) == "no benefit"


# --- the recommendation -------------------------------------------------------------------------


def test_recommends_lowest_time_to_target_not_highest_throughput():
    report = cr.analyse(sweep())[0]
    # seconds: 16 -> 9.0, 32 -> 7.8, 64 -> 8.4, 128 -> 11.1 (mean over seeds); 256 is the fastest
    # per sample and did not reach the target in every seed
    assert report.best["effective_batch_size"] == 32
    text = report.recommendation
    assert "batch size 32" in text and "0.025" in text and "linear scaling" in text
    assert "highest throughput is at batch size 256" in text
    assert "reached the target in 2 of 3 seeds" in text
    # 32 is under half of B_simple (median 71), and within x2 of the knee (about 64)
    assert "below the gradient noise scale B_simple ≈ 71" in text
    assert "around the knee" in text


def _with_seconds(summary: pd.DataFrame, seconds: dict[int, list[float]]) -> pd.DataFrame:
    summary = summary.copy()
    for batch, values in seconds.items():
        rows = summary.index[summary["batch_size"] == batch]
        summary.loc[rows, "seconds_to_target"] = values
    return summary


def test_runner_up_is_judged_by_a_test_across_seeds_not_by_overlapping_intervals():
    # means 7.8 and 8.1 s, each seed 0.1 s apart: the 95% intervals (±0.25 s) overlap, yet
    # Welch's test separates them (one-sided p ≈ 0.01)
    summary = _with_seconds(sweep(), {32: [7.7, 7.8, 7.9], 64: [8.0, 8.1, 8.2]})
    report = cr.analyse(summary)[0]
    table = report.table.set_index("effective_batch_size")
    assert table.loc[64, "seconds_low"] < table.loc[32, "seconds_high"]  # they overlap
    assert report.best["effective_batch_size"] == 32
    assert "The next, batch size 64, took 8.1 s (longer beyond the seeds' noise" in (
        report.recommendation
    )
    assert "within the seeds' noise" not in report.recommendation

    spread = _with_seconds(sweep(), {32: [7.7, 7.8, 7.9], 64: [7.0, 8.1, 9.2]})
    text = cr.analyse(spread)[0].recommendation
    assert "(not separated from batch size 32 by the seeds" in text

    one_seed = sweep()
    one_seed = one_seed[(one_seed["seed"] == 0) | ~one_seed["batch_size"].isin([32, 64])]
    text = cr.analyse(one_seed)[0].recommendation
    assert "the seed-to-seed noise is unknown" in text


def test_no_run_reaching_the_target_gives_a_plain_statement():
    summary = sweep()
    summary["target_reached"] = np.where(summary["status"] == "ok", False, np.nan)
    for column in ("steps_to_target", "samples_to_target", "seconds_to_target"):
        summary[column] = np.nan
    report = cr.analyse(summary)[0]
    assert report.best is None and report.knee is None
    assert report.recommendation.startswith("No run of small_cnn reached the target")
    assert "val_accuracy ≥ 0.8" in report.recommendation
    fig = figs.steps_figure([report])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "no run reached the target" in texts
    assert len(by_gid(fig, figs.GID_NOT_REACHED)[0].get_offsets()) == 15  # every ok seed shown
    markdown = pages.render_markdown([report])
    assert "No run of small_cnn reached the target" in markdown


def test_partial_reach_everywhere_recommends_nothing():
    summary = sweep()
    summary.loc[summary["seed"] == 0, ["target_reached", "seconds_to_target"]] = [False, np.nan]
    summary.loc[summary["seed"] == 0, ["steps_to_target", "samples_to_target"]] = np.nan
    report = cr.analyse(summary)[0]
    assert report.best is None
    assert "in every seed, so none is recommended" in report.recommendation


def test_worker_count_with_most_runs_then_smallest():
    both = pd.concat([sweep(), sweep(num_workers=2).head(6)], ignore_index=True)
    assert tables.chosen_workers(both) == 0
    tie = pd.concat([sweep(), sweep(num_workers=2)], ignore_index=True)
    assert tables.chosen_workers(tie) == 0
    more = pd.concat([sweep().head(3), sweep(num_workers=2)], ignore_index=True)
    report = cr.analyse(more)[0]
    assert report.workers == 2 and report.other_workers == (0,)
    assert "Runs with 0 worker(s) are left out" in pages.render_markdown([report])


def test_no_target_configured():
    summary = sweep().drop(columns=["target_metric", "target", "target_reached"])
    report = cr.analyse(summary)[0]
    assert report.metric is None and report.best is None
    assert "No training target was configured" in report.recommendation


# --- figures ----------------------------------------------------------------------------------


def test_steps_figure_has_the_perfect_scaling_line_and_the_markers():
    report = cr.analyse(sweep())[0]
    fig = figs.steps_figure([report])
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    (perfect,) = by_gid(fig, figs.GID_PERFECT)
    x, y = perfect.get_data()
    mean16 = report.table.set_index("effective_batch_size").at[16, "steps_mean"]
    assert np.interp(16.0, x, y) == pytest.approx(mean16, rel=0.02)  # through the smallest batch
    assert np.allclose(x * y, 16 * mean16)  # slope -1 on log-log axes
    (b_simple,) = by_gid(fig, figs.GID_B_SIMPLE)
    assert b_simple.get_xdata()[0] == pytest.approx(71.0)  # median of 70, 71, 72 per batch size
    assert by_gid(fig, figs.GID_B_SIMPLE_BAND)
    (knee,) = by_gid(fig, figs.GID_KNEE)
    assert knee.get_xdata()[0] == pytest.approx(report.knee.b_noise)
    assert by_gid(fig, figs.GID_FIT) and by_gid(fig, figs.GID_REGIME)
    (mean,) = by_gid(fig, figs.GID_MEAN)
    assert list(mean.get_xdata()) == [16, 32, 64, 128, 256]
    (missed,) = by_gid(fig, figs.GID_NOT_REACHED)
    assert missed.get_offsets().tolist() == [[256.0, 200.0]]
    counts = [a.get_text() for a in by_gid(fig, figs.GID_NOT_REACHED_COUNT)]
    assert counts == ["1/3\nmissed", "3/3\nmissed"]  # 256, and 512 (OOM)


def test_loss_and_noise_figures():
    summary = sweep()
    curves = curves_for(summary)
    reports = cr.analyse(summary)
    fig = figs.loss_figure(reports, summary, curves, "samples_seen")
    (ax,) = fig.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert [f"B = {b}" for b in SIZES] == [lab for lab in labels if lab.startswith("B =")]
    time_fig = figs.loss_figure(reports, summary, curves, "elapsed_s")
    line = time_fig.axes[0].get_lines()[0]
    assert line.get_xdata()[-1] == pytest.approx(40 * step_time(16))
    noise = figs.noise_figure(reports, summary, curves)
    values = np.concatenate([line.get_ydata() for line in noise.axes[0].get_lines()[:5]])
    assert np.allclose(values, B_NOISE)


def test_noise_figure_without_a_positive_b_simple_draws_instead_of_failing():
    """A few updates can leave only B_simple <= 0 (noise swamps |G|²): a log axis then has
    nothing to scale and matplotlib raised on saving (a train.predict calibration run of two
    updates did this)."""
    summary = sweep()
    curves = curves_for(summary)
    curves["noise_sq_small"], curves["noise_sq_big"] = (
        curves["noise_sq_big"],
        curves["noise_sq_small"],
    )
    fig = figs.noise_figure(cr.analyse(summary), summary, curves)
    fig.savefig(io.BytesIO(), format="png")
    assert fig.axes[0].get_yscale() == "linear"


def test_noise_history_recovers_b_simple_and_an_interval():
    summary = sweep()
    curves = curves_for(summary)
    rows = curves[curves["batch_size"] == 64].merge(
        summary[["batch_size", "seed", "noise_scale_batch_small", "noise_scale_batch_big"]]
    )
    rng = np.random.default_rng(1)
    rows["noise_sq_small"] *= 1 + 0.05 * rng.standard_normal(len(rows))
    history = fits.noise_history(rows, bins=4)
    assert len(history) == 4 and (history["n"] == 6).all()
    assert np.allclose(history["b_simple"], B_NOISE, rtol=0.5)
    assert (history["low"] <= history["b_simple"]).all()
    assert (history["b_simple"] <= history["high"]).all()


def test_placeholders_without_training_runs():
    summary = sweep(mode="infer")
    assert cr.analyse(summary) == []
    fig = figs.steps_figure([])
    assert figs.NO_TARGET in [t.get_text() for ax in fig.axes for t in ax.texts]
    assert "No training runs in this sweep." in pages.render_markdown([])


# --- documents and the command line -------------------------------------------------------------


def test_cli_writes_figures_and_documents(tmp_path):
    summary = sweep()
    summary.to_csv(tmp_path / "summary.csv", index=False)
    curves_for(summary, steps=20).to_csv(tmp_path / "curves.csv", index=False)
    out = tmp_path / "convergence"
    assert (
        cr.main(
            [
                "--summary",
                str(tmp_path / "summary.csv"),
                "--curves",
                str(tmp_path / "curves.csv"),
                "--outdir",
                str(out),
            ]
        )
        == 0
    )
    for name in (figs.STEPS_PNG, figs.LOSS_SAMPLES_PNG, figs.LOSS_TIME_PNG, figs.NOISE_PNG):
        assert (out / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    markdown = (out / pages.MARKDOWN).read_text()
    assert "| 32 ★ | 0.025 | 3/3 |" in markdown
    assert "| 512 | – | 0/3 (0:oom;1:oom;2:oom) |" in markdown
    assert "B_simple ≈ 71 samples" in markdown and "Knee B_noise ≈" in markdown
    assert "How to read this." in markdown
    page = (out / pages.HTML).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<table" in page and "How to read this." in page


def test_eval_spacing_is_the_median_gap_between_evaluations():
    summary = sweep()
    reports = cr.analyse(summary, curves_for(summary))
    # every 10 steps: 160, 320, 640, 1280 and 2560 samples apart, as often each
    assert reports[0].eval_every == 640
    assert "evaluated every 640 samples" in pages.render_markdown(reports)


def test_the_shipped_convergence_config_is_valid():
    schema = load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    config = yaml.safe_load((ROOT / "config" / "convergence.yaml").read_text())
    check(config, schema)
    assert config["modes"] == ["train"] and len(config["seeds"]) >= 3
    assert config["train"]["target_accuracy"] and config["train"]["noise_scale_every_steps"]
    assert config["measure"]["ceiling"] is False


# --- the findings (convergence.json) -----------------------------------------------------------


def _strict_json(path: Path) -> dict:
    """The file as JSON, refusing NaN and Infinity (which are not JSON)."""

    def refuse(name):
        raise ValueError(f"{path} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


def _markdown_rows(markdown: str) -> dict[int, list[str]]:
    """The document's per-batch-size table: batch size -> its cells."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].split(" ")[0].isdigit():
            rows[int(cells[0].split(" ")[0])] = cells
    return rows


def test_cli_writes_findings_that_agree_with_the_markdown(tmp_path):
    summary = sweep()
    summary.to_csv(tmp_path / "summary.csv", index=False)
    curves_for(summary, steps=20).to_csv(tmp_path / "curves.csv", index=False)
    out = tmp_path / "convergence"
    argv = ["--summary", str(tmp_path / "summary.csv"), "--curves", str(tmp_path / "curves.csv")]
    assert cr.main([*argv, "--outdir", str(out)]) == 0
    data = _strict_json(out / pages.FINDINGS)
    markdown = (out / pages.MARKDOWN).read_text()
    rows = _markdown_rows(markdown)
    assert data["version"] == pages.FINDINGS_VERSION and data["document"] == pages.HTML
    (group,) = data["groups"]
    assert (group["mode"], group["model"], group["dataset"]) == (
        "train",
        "small_cnn",
        "fashion_mnist",
    )
    assert group["num_workers"] == 0 and group["target"]["metric"] == "val_accuracy"

    # the best: lowest mean seconds among the batch sizes every seed reached, from the summary
    ok = summary[summary["status"] == "ok"]
    every = ok.groupby("batch_size")["target_reached"].all()
    seconds = ok[ok["batch_size"].isin(every[every].index)].groupby("batch_size")
    # seconds pooled on their logarithms (the geometric mean)
    expected = int(seconds["seconds_to_target"].apply(lambda s: np.log(s).mean()).idxmin())
    best = group["best"]
    assert best["effective_batch_size"] == expected
    assert group["candidates"] == sorted(int(b) for b in every[every].index)
    starred = [b for b, cells in rows.items() if cells[0].endswith("★")]
    assert starred == [expected]  # the markdown's ★ is the same batch size
    at_best = summary[summary["batch_size"] == expected]
    assert best["lr"] == pytest.approx(at_best["lr"].iloc[0])
    assert rows[expected][1] == f"{best['lr']:.4g}"
    # no accumulation: the micro-batch is the effective batch
    assert (best["batch_size"], best["accumulation_steps"]) == (expected, 1)
    for quantity in ("seconds", "steps", "samples"):
        interval = log_mean_ci if quantity == "seconds" else mean_ci
        mean, low, high = interval(at_best[f"{quantity}_to_target"])
        found = best[f"{quantity}_to_target"]
        assert (found["mean"], found["low"], found["high"]) == pytest.approx((mean, low, high))
    assert rows[expected][5].startswith(f"{best['seconds_to_target']['mean']:.1f} [")

    # B_simple and the knee, as the markdown states them
    b_simple = group["b_simple"]
    assert b_simple["value"] == pytest.approx(ok["noise_scale_b_simple"].median())
    assert b_simple["low"] <= b_simple["value"] <= b_simple["high"]
    assert f"B_simple ≈ {b_simple['value']:.0f} samples" in markdown
    knee = group["knee"]
    assert knee["edge"] is None and knee["b_noise"] == pytest.approx(B_NOISE, rel=0.05)
    assert knee["interval"][0] <= knee["b_noise"] <= knee["interval"][1]
    assert f"Knee B_noise ≈ {knee['b_noise']:.0f} samples" in markdown
    assert knee["fitted_batch_sizes"] == group["candidates"]

    # where the best sits, and the regimes, agree with the document
    where = best["position"]
    assert where["b_simple"] == fits.relation(expected, b_simple["value"])
    assert where["knee"] == fits.relation(expected, knee["b_noise"])
    assert where["regime"] == rows[expected][-1] == best["regime"]
    assert f"{where['b_simple']} the gradient noise scale B_simple" in markdown
    assert f"{where['knee']} the knee B_noise" in markdown
    assert where["text"] in markdown and group["recommendation"] in markdown
    for name, sizes in group["regimes"].items():
        assert all(rows[b][-1] == name for b in sizes)
    assert sorted(b for sizes in group["regimes"].values() for b in sizes) == list(SIZES)

    # the batch sizes short of the target: the table's 'reached' column
    assert group["never_reached"] == [b for b, cells in rows.items() if cells[2].startswith("0/")]
    assert group["never_reached"] == [512]  # all three seeds OOM
    assert group["partly_reached"] == [256]
    assert rows[256][2] == "2/3"
    by_batch = {entry["effective_batch_size"]: entry for entry in group["batches"]}
    assert by_batch[512]["failures"] == "0:oom;1:oom;2:oom" and by_batch[512]["lr"] is None
    assert by_batch[256]["budget_steps"] == [200.0]
    # the throughput pick, which the recommendation compares with
    fastest = int(ok.groupby("batch_size")["samples_per_s"].mean().idxmax())
    assert group["highest_throughput"]["effective_batch_size"] == fastest != expected
    assert f"highest throughput is at batch size {fastest}" in markdown


def test_accumulated_runs_get_their_own_report_and_findings():
    plain = sweep()
    # the same effective batches, each made of two micro-batches of half the size
    accumulated = plain.assign(batch_size=plain["batch_size"] // 2, accumulation_steps=2)
    reports = cr.analyse(pd.concat([plain, accumulated], ignore_index=True))
    assert [r.accumulation for r in reports] == [1, 2]  # one effective batch, never pooled
    assert reports[1].title.endswith(", 2 accumulation steps")
    plain_found, found = (pages.findings(r) for r in reports)
    assert (plain_found["accumulation_steps"], found["accumulation_steps"]) == (1, 2)
    assert [b["n_seeds"] for b in found["batches"]] == [
        b["n_seeds"] for b in plain_found["batches"]
    ]
    best = found["best"]
    effective = best["effective_batch_size"]
    assert effective == plain_found["best"]["effective_batch_size"]
    # batch_size is the micro-batch, as in the summary and every run's spec
    assert (best["batch_size"], best["accumulation_steps"]) == (effective // 2, 2)
    assert f"({best['batch_size']} × 2 accumulated)" in reports[1].recommendation


def test_findings_without_a_batch_size_reaching_the_target(tmp_path):
    summary = sweep()
    summary["target_reached"] = np.where(summary["status"] == "ok", False, np.nan)
    for column in ("steps_to_target", "samples_to_target", "seconds_to_target"):
        summary[column] = np.nan
    reports = cr.analyse(summary)
    pages.write_findings(reports, tmp_path / pages.FINDINGS)
    (group,) = _strict_json(tmp_path / pages.FINDINGS)["groups"]
    assert group["best"] is None and group["knee"] is None and group["candidates"] == []
    assert group["never_reached"] == [*SIZES, 512] and group["partly_reached"] == []
    assert group["recommendation"] == reports[0].recommendation
    assert group["recommendation"].startswith("No run of small_cnn reached the target")
