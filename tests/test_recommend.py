"""Tests for batchscope.recommend on small synthetic summary tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from batchscope import recommend

ENV = {"fingerprint": "0123456789ab", "torch": "2.14.1", "device_name": "Test GPU"}


def run(
    batch_size,
    num_workers=0,
    samples_per_s=None,
    *,
    mode="train",
    model="small_cnn",
    seed=0,
    status="ok",
    iqr_ms=1.0,
    val_accuracy=0.5,
    final_loss=1.0,
):
    """One summary row; p50 is 100 ms, so ``iqr_ms`` is also the spread in %."""
    ok = status == "ok"
    train = mode == "train"
    return {
        "mode": mode,
        "model": model,
        "dataset": "synthetic",
        "batch_size": batch_size,
        "num_workers": num_workers,
        "seed": seed,
        "device": "cuda:0",
        "status": status,
        "error": None if ok else "CUDA out of memory",
        "samples_per_s": samples_per_s if ok else np.nan,
        "step_time_ms_p50": 100.0 if ok else np.nan,
        "step_time_ms_iqr": iqr_ms if ok else np.nan,
        "peak_mem_mb": 10.0 * batch_size if ok else np.nan,
        "data_wait_frac": 0.05 if ok else np.nan,
        "final_loss": final_loss if ok and train else np.nan,
        "val_accuracy": val_accuracy if ok and train else np.nan,
        "env_fingerprint": ENV["fingerprint"],
    }


def only(recs, mode="train", model="small_cnn"):
    (rec,) = [r for r in recs if r["mode"] == mode and r["model"] == model]
    return rec


def test_picks_best_and_reports_failures():
    summary = pd.DataFrame(
        [
            run(32, 0, 1000.0),
            run(64, 0, 1500.0),
            run(64, 2, 2000.0, val_accuracy=0.40, final_loss=1.7),
            run(128, 2, 1200.0, val_accuracy=0.70, final_loss=0.9),
            run(256, 2, status="diverged"),
            run(512, 0, status="oom"),
            run(1024, 2, status="oom"),
        ]
    )
    rec = only(recommend.recommend(summary))

    assert (rec["best"]["batch_size"], rec["best"]["num_workers"]) == (64, 2)
    assert rec["best"]["samples_per_s"] == 2000.0
    assert (rec["runner_up"]["batch_size"], rec["runner_up"]["num_workers"]) == (64, 0)
    assert rec["gap_pct"] == pytest.approx(100 * (2000 / 1500 - 1))
    assert rec["within_noise"] is False
    assert rec["largest_ok_batch_size"] == 128
    assert rec["oom_batch_sizes"] == [512, 1024]
    assert rec["diverged_batch_sizes"] == [256]
    assert rec["best"]["peak_mem_mb"] == 640.0
    assert rec["best"]["data_wait_frac"] == 0.05
    assert rec["best"]["val_accuracy"] == 0.40
    assert (rec["best_accuracy"]["batch_size"], rec["best_accuracy"]["val_accuracy"]) == (128, 0.7)
    assert rec["recommendation"].startswith("Use batch_size=64, num_workers=2: 2000.0 samples/s")
    assert "within noise" not in rec["recommendation"]
    assert len(rec["evidence"]) == 7


def test_close_points_are_within_noise_far_ones_are_not():
    close = pd.DataFrame([run(64, 0, 1000.0, iqr_ms=5.0), run(128, 0, 1020.0, iqr_ms=5.0)])
    rec = only(recommend.recommend(close))
    assert rec["within_noise"] is True
    assert rec["noise_pct"] == pytest.approx(5.0)
    assert "within noise" in rec["recommendation"]

    far = pd.DataFrame([run(64, 0, 1000.0, iqr_ms=5.0), run(128, 0, 1300.0, iqr_ms=5.0)])
    rec = only(recommend.recommend(far))
    assert rec["within_noise"] is False
    assert "within noise" not in rec["recommendation"]
    assert "30.0% faster" in rec["recommendation"]


def test_seeds_are_pooled_and_their_spread_is_the_noise():
    summary = pd.DataFrame(
        [
            run(64, 0, 900.0, seed=0, iqr_ms=0.1),
            run(64, 0, 1100.0, seed=1, iqr_ms=0.1),  # mean 1000, range 20% of it
            run(128, 0, 1050.0, seed=0, iqr_ms=0.1),
            run(128, 0, 1050.0, seed=1, iqr_ms=0.1),  # mean 1050, no spread
        ]
    )
    rec = only(recommend.recommend(summary))
    assert rec["best"]["batch_size"] == 128 and rec["best"]["n_seeds"] == 2
    assert rec["runner_up"]["spread_pct"] == pytest.approx(20.0)
    assert rec["runner_up"]["spread_source"] == "seed range"
    assert (rec["runner_up"]["samples_per_s_min"], rec["runner_up"]["samples_per_s_max"]) == (
        900.0,
        1100.0,
    )
    assert rec["within_noise"] is True
    assert "mean of 2 seeds" in rec["recommendation"]


def test_no_ok_point_says_so_plainly():
    summary = pd.DataFrame(
        [run(64, 0, 1000.0, mode="infer"), run(512, 0, status="oom"), run(1024, 0, status="oom")]
    )
    rec = only(recommend.recommend(summary), mode="train")
    assert rec["best"] is None and rec["largest_ok_batch_size"] is None
    assert rec["recommendation"].startswith("No grid point ran ok for train / small_cnn")
    assert "no recommendation" in rec["recommendation"]
    assert "No grid point ran ok" in recommend.render_markdown(recommend.recommend(summary), ENV)


def test_single_ok_point_has_no_runner_up():
    rec = only(recommend.recommend(pd.DataFrame([run(64, 0, 1000.0), run(128, 0, status="oom")])))
    assert rec["runner_up"] is None and rec["within_noise"] is None
    assert "only configuration that ran ok" in rec["recommendation"]


def test_markdown_carries_environment_numbers_and_evidence():
    summary = pd.DataFrame(
        [
            run(64, 0, 1234.5, mode="infer"),
            run(128, 4, 2345.6, mode="infer"),
            run(256, 4, status="oom", mode="infer"),
        ]
    )
    text = recommend.render_markdown(recommend.recommend(summary), ENV)
    assert "0123456789ab" in text and "Test GPU" in text and "2.14.1" in text
    assert "## infer / small_cnn (synthetic)" in text
    assert "Use batch_size=128, num_workers=4: 2345.6 samples/s" in text
    assert "Largest batch size that ran ok: 128." in text
    assert "Out of memory (OOM) at batch size(s): 256." in text
    assert "| 64 | 0 | 0 | ok | 1234.5 |" in text
    assert "| 256 | 4 | 0 | oom | - |" in text
    assert "val_accuracy" not in text  # not a train section


def test_html_is_a_standalone_page_with_the_same_content():
    summary = pd.DataFrame([run(64, 0, 1000.0), run(128, 0, 1600.0), run(256, 0, status="oom")])
    page = recommend.render_html(recommend.recommend(summary), ENV)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<h2>train / small_cnn (synthetic)</h2>" in page
    assert "Use batch_size=128, num_workers=0: 1600.0 samples/s" in page
    assert "<td>1600.0</td>" in page and "<td>oom</td>" in page
    assert "0123456789ab" in page


def test_main_writes_markdown_and_html(tmp_path):
    summary_csv, env_json = tmp_path / "summary.csv", tmp_path / "environment.json"
    pd.DataFrame([run(64, 0, 1000.0), run(128, 2, 1500.0)]).to_csv(summary_csv, index=False)
    env_json.write_text(json.dumps(ENV))
    markdown, page = tmp_path / "out" / "rec.md", tmp_path / "out" / "rec.html"
    argv = ["--summary", str(summary_csv), "--env", str(env_json)]
    argv += ["--markdown", str(markdown), "--html", str(page)]

    assert recommend.main(argv) == 0

    assert "Use batch_size=128, num_workers=2: 1500.0 samples/s" in markdown.read_text()
    assert "Use batch_size=128, num_workers=2: 1500.0 samples/s" in page.read_text()


def test_empty_summary():
    assert recommend.recommend(pd.DataFrame()) == []
    assert "No results in this sweep." in recommend.render_markdown([], ENV)


def test_best_that_failed_on_another_seed_carries_a_caution():
    summary = pd.DataFrame(
        [
            run(64, 0, 1000.0, seed=0),
            run(64, 0, seed=1, status="diverged"),
            run(32, 0, 500.0, seed=0),
            run(32, 0, 500.0, seed=1),
        ]
    )
    rec = only(recommend.recommend(summary))
    assert rec["best"]["batch_size"] == 64 and rec["best"]["n_failed"] == 1
    assert any(note.startswith("Caution: 1 other run(s)") for note in rec["notes"])
    assert rec["diverged_batch_sizes"] == [64] and rec["largest_ok_batch_size"] == 64
