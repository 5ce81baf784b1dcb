"""Tests for batchscope.report.recommend.build on small synthetic summary tables."""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd
import pytest

from batchscope.report.recommend import build as recommend
from batchscope.report.recommend import pages as recommend_pages
from batchscope.report.recommend import target as recommend_target
from tests.factories import summary_row

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
    window_iqr_pct=None,
    data_wait=0.05,
    error=None,
    **extra,
):
    """One summary row; p50 is 100 ms, so ``iqr_ms`` is also the step-time spread in %.
    ``window_iqr_pct`` sets ``samples_per_s_iqr`` (the windows' spread) as a % of throughput;
    without it the row has no such value (as results from before the windows); ``extra`` adds
    or overrides columns."""
    ok = status == "ok"
    windows = np.nan if window_iqr_pct is None or not ok else samples_per_s * window_iqr_pct / 100
    measured = {
        "samples_per_s": samples_per_s,
        "samples_per_s_iqr": windows,
        "step_time_ms_p50": 100.0,
        "step_time_ms_iqr": iqr_ms,
        "peak_mem_mb": 10.0 * batch_size,
        "data_wait_frac": data_wait,
    }
    if mode == "train":
        measured.update(val_accuracy=val_accuracy, final_loss=final_loss)
    row = {
        "model": model,
        "batch_size": batch_size,
        "num_workers": num_workers,
        "seed": seed,
        "device": "cuda:0",
        "error": error if error or ok else "CUDA out of memory",
        "achieved_tflops": None,  # not measured unless a test says so
        **(measured if ok else {}),
    }
    return summary_row(mode, status=status, **{**row, **extra})


def rounds(batch_size, num_workers, median, n=3, spread=0.01, **kw):
    """``n`` runs of one point, one per round, at ``median`` x (1 - spread, 1, 1 + spread, ...):
    what a sweep with ``measure.rounds: n`` measures of a point whose processes vary little.
    The factors go in an order of the point's own (a rotation): the same order for every point
    would be a drift of the machine between rounds, which the verdict takes out."""
    factors = [1.0 + spread * k for k in (0, -1, 1, -2, 2, -3, 3)[:n]]
    turn = (batch_size.bit_length() + num_workers) % n
    factors = factors[turn:] + factors[:turn]
    return [
        run(batch_size, num_workers, median * f, round=r, **kw)
        for r, f in enumerate(factors, start=1)
    ]


def only(recs, mode="train", model="small_cnn"):
    (rec,) = [r for r in recs if r["mode"] == mode and r["model"] == model]
    return rec


def test_picks_the_separated_best_and_reports_failures():
    summary = pd.DataFrame(
        rounds(32, 0, 1000.0)
        + rounds(64, 0, 1500.0)
        + rounds(64, 2, 2000.0, val_accuracy=0.40, final_loss=1.7)
        + rounds(128, 2, 1200.0, val_accuracy=0.70, final_loss=0.9)
        + [
            run(256, 2, status="diverged"),
            run(512, 0, status="oom"),
            run(1024, 2, status="oom"),
        ]
    )
    rec = only(recommend.recommend(summary))

    assert (rec["best"]["batch_size"], rec["best"]["num_workers"]) == (64, 2)
    assert rec["best"]["samples_per_s"] == pytest.approx(2000.0)
    assert rec["verdict"]["verdict"] == "separated"
    assert (rec["runner_up"]["batch_size"], rec["runner_up"]["num_workers"]) == (64, 0)
    assert rec["gap_pct"] == pytest.approx(100 * (2000 / 1500 - 1))
    assert rec["largest_ok_batch_size"] == 128
    assert rec["oom_batch_sizes"] == [512, 1024]
    assert rec["diverged_batch_sizes"] == [256]
    assert rec["best"]["peak_mem_mb"] == 640.0
    assert rec["best"]["data_wait_frac"] == pytest.approx(0.05)
    assert rec["best"]["val_accuracy"] == pytest.approx(0.40)
    best_accuracy = rec["best_accuracy"]
    assert (best_accuracy["batch_size"], best_accuracy["val_accuracy"]) == (128, pytest.approx(0.7))
    assert rec["recommendation"].startswith(
        "Separated: it is faster than every other point measured, so use batch_size=64,"
        " num_workers=2: 2000.0 samples/s (median of 3 runs, each its own process, over 3"
        " round(s); 95% interval"
    )
    assert "next fastest is batch_size=64, num_workers=0 at 1500.0" in rec["recommendation"]
    assert len(rec["evidence"]) == 15


def test_points_apart_only_in_their_windows_are_a_tie_not_a_winner():
    # one process each; their windows are tight (IQR 0.1%), and 20% apart: the windows of one
    # process say nothing of the next process, so nothing separates the two
    apart = pd.DataFrame(
        [
            run(64, 0, 1000.0, iqr_ms=0.1, window_iqr_pct=0.1),
            run(128, 0, 1200.0, iqr_ms=0.1, window_iqr_pct=0.1),
        ]
    )
    rec = only(recommend.recommend(apart))
    assert rec["verdict"]["verdict"] == "undetermined"
    assert rec["verdict"]["detectable_diff_frac"] is None
    assert len(rec["verdict"]["tie_set"]) == 2
    assert rec["recommendation"].startswith("Undetermined: with one run per point")
    assert "faster than every other point" not in rec["recommendation"]
    assert "run-to-run noise is unknown" in rec["recommendation"]
    assert "Set measure.rounds to 2 or more." in rec["recommendation"]


def test_undetermined_names_the_best_estimate_what_could_be_as_fast_and_what_would_settle_it():
    # 3 rounds, 8% run-to-run spread, medians 2% apart: neither separated nor within 5%
    summary = pd.DataFrame(
        rounds(64, 0, 1000.0, spread=0.08) + rounds(128, 0, 1020.0, spread=0.08)
        + rounds(32, 2, 500.0, spread=0.01)
    )  # fmt: skip
    rec = only(recommend.recommend(summary))
    answer = rec["verdict"]
    assert answer["verdict"] == "undetermined"
    assert {(m["batch_size"], m["num_workers"]) for m in answer["tie_set"]} == {(64, 0), (128, 0)}
    # the best estimate, not the least memory: nothing is shown within the margin
    assert (rec["best"]["batch_size"], rec["best"]["num_workers"]) == (128, 0)
    text = rec["recommendation"]
    assert text.startswith("Undetermined: the runs ran out before the best was told apart, so")
    assert "use batch_size=128, num_workers=0: 1020.0 samples/s" in text
    assert "is the best estimate" in text
    assert "But batch 64 with 0 workers could still be as fast" in text
    assert "could be told apart on this machine" in text
    assert f"About {answer['to_settle']['rounds']} rounds per point" in text


def test_equivalent_points_are_picked_by_least_memory_and_said_to_be_as_good():
    summary = pd.DataFrame(
        rounds(64, 0, 1000.0, n=4, spread=0.003) + rounds(128, 0, 1001.0, n=4, spread=0.003)
        + rounds(32, 2, 500.0, n=4, spread=0.002)
    )  # fmt: skip
    rec = only(recommend.recommend(summary))
    assert rec["verdict"]["verdict"] == "equivalent"
    assert (rec["best"]["batch_size"], rec["best"]["num_workers"]) == (64, 0)  # 640 MB < 1280
    assert rec["recommendation"].startswith(
        "Equivalent: batch 64, 128 with 0 workers are all within 5% of the best, so any of them"
        " will do; use batch_size=64, num_workers=0"
    )
    assert "picked from the 2 points within 5% by least peak memory" in rec["recommendation"]


def test_noisy_best_point_gets_a_note():
    rec = only(recommend.recommend(pd.DataFrame([run(64, 0, 1000.0, window_iqr_pct=12.5)])))
    assert any(
        note.startswith("Its spread (12.5%, throughput IQR over measurement windows) is over 10%")
        for note in rec["notes"]
    )


def test_runs_are_pooled_with_the_median_its_interval_and_the_run_to_run_spread():
    summary = pd.DataFrame(
        [
            run(64, 0, 1000.0, seed=0, window_iqr_pct=0.1),
            run(64, 0, 1200.0, seed=1, window_iqr_pct=0.1),
            run(128, 0, 1040.0, seed=0, window_iqr_pct=0.1),
            run(128, 0, 1060.0, seed=1, window_iqr_pct=0.1),
        ]
    )
    rec = only(recommend.recommend(summary))
    runner, best = rec["runner_up"], rec["best"]
    assert rec["verdict"]["verdict"] == "undetermined"  # two runs each: no separation
    assert best["batch_size"] == 64 and best["n_seeds"] == 2  # the best estimate
    assert (best["samples_per_s_min"], best["samples_per_s_max"]) == (1000.0, 1200.0)
    assert best["samples_per_s_median"] == pytest.approx(1100.0)
    assert best["samples_per_s_cv"] == pytest.approx(np.std([1000, 1200], ddof=1) / 1100.0)
    low, high = best["samples_per_s_median_ci95_low"], best["samples_per_s_median_ci95_high"]
    assert low < 1000.0 and high > 1200.0  # 1 degree of freedom: a wide interval
    assert runner["batch_size"] == 128
    assert f"95% interval {low:.1f}-{high:.1f}; run-to-run CV 12.9%" in rec["recommendation"]


def test_tight_rounds_separate_two_points():
    summary = pd.DataFrame(
        [run(64, 0, v, round=r) for r, v in enumerate((999.0, 1000.0, 1001.0), start=1)]
        + [run(128, 0, v, round=r) for r, v in enumerate((1099.0, 1100.0, 1101.0), start=1)]
    )
    rec = only(recommend.recommend(summary))
    assert rec["verdict"]["verdict"] == "separated"
    assert rec["best"]["batch_size"] == 128
    assert rec["recommendation"].startswith("Separated: it is faster than every other point")


def test_diagnosis_names_the_worker_count_that_removed_the_stall():
    summary = pd.DataFrame(
        rounds(64, 0, 800.0, data_wait=0.5)
        + rounds(64, 1, 900.0, data_wait=0.3)
        + rounds(64, 2, 1500.0, data_wait=0.05)
        + rounds(64, 4, 1400.0, data_wait=0.04)
    )
    rec = only(recommend.recommend(summary))
    assert (rec["best"]["num_workers"], rec["best"]["bound"]) == (2, "compute")
    assert [p["num_workers"] for p in rec["stall_fixes"]] == [0, 1]
    assert (
        "Diagnosis: compute-bound (data wait 0.050 of the step time, at most 0.2); at this batch "
        "size num_workers=0 (data wait 0.500), num_workers=1 (data wait 0.300) were input-bound, "
        "and num_workers=2 removed the stall."
    ) in rec["notes"]
    evidence = {e["num_workers"]: e["bound"] for e in rec["evidence"]}
    assert evidence == {0: "input", 1: "input", 2: "compute", 4: "compute"}


def test_diagnosis_of_an_input_bound_best_point():
    summary = pd.DataFrame(
        rounds(64, 0, 800.0, data_wait=0.6) + rounds(64, 2, 900.0, data_wait=0.4)
    )
    rec = only(recommend.recommend(summary))
    assert rec["best"]["bound"] == "input"
    assert rec["best"]["stall_removed_by_workers"] == "none"
    diagnosis = next(n for n in rec["notes"] if n.startswith("Diagnosis"))
    assert diagnosis.startswith("Diagnosis: input-bound (data wait 0.400 of the step time, over")
    assert "no larger worker count measured removed the stall" in diagnosis

    fixed = pd.DataFrame(rounds(64, 0, 900.0, data_wait=0.6) + rounds(64, 2, 800.0, data_wait=0.1))
    rec = only(recommend.recommend(fixed))
    assert rec["best"]["stall_removed_by_workers"] == 2
    assert "num_workers=2 removed the stall at this batch size." in " ".join(rec["notes"])


def test_failed_and_missing_points_are_listed_not_dropped():
    summary = pd.DataFrame(
        [
            run(64, 0, 1000.0),
            run(128, 0, 1500.0),
            run(256, 0, status="failed", error="RuntimeError: CUDA error: an illegal access"),
            run(256, 2, status="missing"),
        ]
    )
    summary.loc[summary["status"] == "missing", "error"] = None
    rec = only(recommend.recommend(summary))
    assert rec["best"]["batch_size"] == 128  # one run each: undetermined, the best estimate
    assert [(p["batch_size"], p["num_workers"], p["status"]) for p in rec["absent_points"]] == [
        (256, 0, "failed"),
        (256, 2, "missing"),
    ]
    assert rec["notes"][0] == (
        "Not measured: 2 of 4 grid points failed or are missing, so the recommendation is among "
        "those that finished: batch_size=256, num_workers=0, seed 0: failed (RuntimeError: CUDA "
        "error: an illegal access); batch_size=256, num_workers=2, seed 0: missing (no result, "
        "no log)."
    )
    assert rec["env_mismatch_runs"] == 0  # rows without a result have no fingerprint
    text = recommend_pages.render_markdown([rec], ENV)
    assert "| 256 | 0 | 0 | failed | - |" in text
    assert "| 256 | 2 | 0 | missing | - |" in text
    assert "RuntimeError: CUDA error: an illegal access" in text
    page = recommend_pages.render_html([rec], ENV)
    assert "<td>missing</td>" in page and "Not measured: 2 of 4 grid points" in page


def test_no_ok_point_counts_failed_and_missing():
    summary = pd.DataFrame(
        [run(64, 0, status="failed", error="boom"), run(128, 0, status="missing")]
    )
    rec = only(recommend.recommend(summary))
    assert rec["best"] is None
    assert (
        "0 diverged, 1 run(s) failed, 1 missing), so there is no recommendation."
        in (rec["recommendation"])
    )
    assert rec["notes"][0].startswith("Not measured: 2 of 2 grid points")


def test_achieved_tflops_and_mfu_are_reported_when_measured():
    summary = pd.DataFrame(
        [run(64, 0, 1000.0, achieved_tflops=1.5, mfu=0.25, peak_tflops=6.0, mode="infer")]
    )
    rec = only(recommend.recommend(summary), mode="infer")
    assert (
        "Compute at the recommended point: 1.5 TFLOP/s achieved, MFU 25.0% of the 6 TFLOP/s peak."
        in rec["notes"]
    )
    cpu = pd.DataFrame([run(64, 0, 1000.0, achieved_tflops=0.012, mfu=None, mode="infer")])
    rec = only(recommend.recommend(cpu), mode="infer")
    assert "Compute at the recommended point: 0.012 TFLOP/s achieved." in rec["notes"]
    plain = only(recommend.recommend(pd.DataFrame([run(64, 0, 1000.0)])))
    assert not any(note.startswith("Compute at") for note in plain["notes"])


def test_no_ok_point_says_so_plainly():
    summary = pd.DataFrame(
        [run(64, 0, 1000.0, mode="infer"), run(512, 0, status="oom"), run(1024, 0, status="oom")]
    )
    rec = only(recommend.recommend(summary), mode="train")
    assert rec["best"] is None and rec["largest_ok_batch_size"] is None
    assert rec["recommendation"].startswith("No grid point ran ok for train / small_cnn")
    assert "no recommendation" in rec["recommendation"]
    assert "No grid point ran ok" in recommend_pages.render_markdown(
        recommend.recommend(summary), ENV
    )


def test_single_ok_point_has_no_runner_up():
    rec = only(recommend.recommend(pd.DataFrame([run(64, 0, 1000.0), run(128, 0, status="oom")])))
    assert rec["runner_up"] is None and rec["gap_pct"] is None
    assert "only configuration that ran ok" in rec["recommendation"]


def test_markdown_carries_environment_numbers_and_evidence():
    summary = pd.DataFrame(
        rounds(64, 0, 1234.5, mode="infer", spread=0.0)
        + rounds(128, 4, 2345.6, mode="infer", spread=0.0)
        + [run(256, 4, status="oom", mode="infer")]
    )
    text = recommend_pages.render_markdown(recommend.recommend(summary), ENV)
    assert "0123456789ab" in text and "Test GPU" in text and "2.14.1" in text
    assert "## infer / small_cnn (synthetic)" in text
    assert "use batch_size=128, num_workers=4: 2345.6 samples/s" in text
    assert "Largest batch size that ran ok: 128." in text
    assert "Out of memory (OOM) at batch size(s): 256." in text
    assert "| 64 | 0 | 0 | ok | 1234.5 |" in text
    assert "| 256 | 4 | 0 | oom | - |" in text
    assert "val_accuracy" not in text  # not a train section


def test_html_is_a_standalone_page_with_the_same_content():
    summary = pd.DataFrame(
        rounds(64, 0, 1000.0, spread=0.0)
        + rounds(128, 0, 1600.0, spread=0.0)
        + [run(256, 0, status="oom")]
    )
    page = recommend_pages.render_html(recommend.recommend(summary), ENV)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<h2>train / small_cnn (synthetic)</h2>" in page
    assert "use batch_size=128, num_workers=0: 1600.0 samples/s" in page
    assert "<td>1600.0</td>" in page and "<td>oom</td>" in page
    assert "0123456789ab" in page


def test_main_writes_markdown_and_html(tmp_path):
    summary_csv, env_json = tmp_path / "summary.csv", tmp_path / "environment.json"
    summary = pd.DataFrame(rounds(64, 0, 1000.0) + rounds(128, 2, 1500.0))
    summary.to_csv(summary_csv, index=False)
    env_json.write_text(json.dumps(ENV))
    markdown, page = tmp_path / "out" / "rec.md", tmp_path / "out" / "rec.html"
    argv = ["--summary", str(summary_csv), "--env", str(env_json)]
    argv += ["--markdown", str(markdown), "--html", str(page)]

    assert recommend.main(argv) == 0

    assert "use batch_size=128, num_workers=2: 1500.0 samples/s" in markdown.read_text()
    assert "use batch_size=128, num_workers=2: 1500.0 samples/s" in page.read_text()


def test_empty_summary():
    assert recommend.recommend(pd.DataFrame()) == []
    assert "No results in this sweep." in recommend_pages.render_markdown([], ENV)


def test_best_that_failed_on_another_seed_carries_a_caution():
    summary = pd.DataFrame(
        rounds(64, 0, 1000.0, seed=0)
        + [run(64, 0, seed=1, status="diverged")]
        + rounds(32, 0, 500.0, seed=0)
        + rounds(32, 0, 500.0, seed=1)
    )
    rec = only(recommend.recommend(summary))
    assert rec["best"]["batch_size"] == 64 and rec["best"]["n_failed"] == 1
    assert any(note.startswith("Caution: 1 other run(s)") for note in rec["notes"])
    assert rec["diverged_batch_sizes"] == [64] and rec["largest_ok_batch_size"] == 64


# --- time to target, from the convergence report's findings ------------------------------------


def convergence_sweep(step_time, seeds=(0, 1)) -> pd.DataFrame:
    """Training rows that reach a target: steps follow 100 (1 + 64/B), off by 2% per seed, each
    update takes ``step_time(B)`` seconds; the learning rate scales linearly from 0.05 at 64."""
    rows = []
    for batch in (32, 64, 128, 256):
        for seed in seeds:
            steps = 100 * (1 + 64 / batch) * (1 + 0.02 * seed)
            rows.append(
                run(
                    batch,
                    0,
                    batch / step_time(batch),
                    seed=seed,
                    dataset="fashion_mnist",
                    accumulation_steps=1,
                    effective_batch_size=batch,
                    lr=0.05 * batch / 64,
                    base_lr=0.05,
                    lr_scaling="linear",
                    target_metric="val_accuracy",
                    target=0.8,
                    target_reached=True,
                    steps_to_target=steps,
                    samples_to_target=steps * batch,
                    seconds_to_target=steps * step_time(batch),
                    noise_scale_b_simple=70.0,
                    noise_scale_ci95_low=35.0,
                    noise_scale_ci95_high=140.0,
                    noise_scale_measurements=40,
                )
            )
    return pd.DataFrame(rows)


def write_inputs(tmp_path, summary):
    """The summary, environment and convergence findings files main reads; argv without the
    findings, and the findings path."""
    from batchscope.report.convergence import build as convergence_report
    from batchscope.report.convergence import pages as convergence_pages

    summary_csv, env_json = tmp_path / "summary.csv", tmp_path / "environment.json"
    summary.to_csv(summary_csv, index=False)
    env_json.write_text(json.dumps(ENV))
    findings = tmp_path / "convergence" / convergence_pages.FINDINGS
    convergence_pages.write_findings(convergence_report.analyse(summary), findings)
    argv = ["--summary", str(summary_csv), "--env", str(env_json)]
    argv += ["--markdown", str(tmp_path / "rec.md"), "--html", str(tmp_path / "rec.html")]
    return argv, findings


def ttt_part(markdown: str) -> str:
    """The time-to-target part of the markdown: from its heading to the evidence table."""
    start = markdown.index(f"### {recommend_target.TIME_TO_TARGET}")
    return markdown[start : markdown.index("Evidence (every grid point):", start)]


def test_time_to_target_names_its_batch_and_lr_and_differs_from_throughput(tmp_path):
    # throughput grows with the batch; the time to target is lowest at a small batch
    summary = convergence_sweep(lambda b: 0.01 + 0.0005 * b)
    argv, findings = write_inputs(tmp_path, summary)
    fastest = int(summary.groupby("batch_size")["seconds_to_target"].mean().idxmin())
    busiest = int(summary.groupby("batch_size")["samples_per_s"].mean().idxmax())
    assert fastest != busiest  # the case this test is about
    lr = summary.loc[summary["batch_size"] == fastest, "lr"].iloc[0]

    assert recommend.main([*argv, "--convergence", str(findings)]) == 0

    markdown = (tmp_path / "rec.md").read_text()
    page = (tmp_path / "rec.html").read_text()
    part = ttt_part(markdown)
    assert f"batch size {fastest} at learning rate {lr:.4g}" in part
    assert "linear scaling of base lr 0.05" in part
    assert f"the throughput pick (batch_size={busiest}, num_workers=0" in part
    assert "the fastest batch per second is not the fastest to the target" in part
    assert "the gradient noise scale B_simple ≈ 70" in part and "the knee B_noise ≈" in part
    assert str(findings.with_name("convergence.html")) in part
    # the throughput pick is still the document's headline; the part comes with it
    assert f"use batch_size={busiest}, num_workers=0" in markdown
    assert f"<h3>{recommend_target.TIME_TO_TARGET}</h3>" in page
    for paragraph in part.split("\n\n")[1:]:
        if paragraph.strip():
            assert f"<p>{html.escape(paragraph.strip())}</p>" in page


def test_time_to_target_says_when_the_throughput_pick_is_also_fastest(tmp_path):
    # every update takes as long: the largest batch is the fastest per second and to the target
    summary = convergence_sweep(lambda b: 0.02)
    argv, findings = write_inputs(tmp_path, summary)
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    part = ttt_part((tmp_path / "rec.md").read_text())
    assert "batch size 256 at learning rate 0.2" in part
    assert "It is also the throughput pick (batch_size=256, num_workers=0" in part
    assert "is not the fastest to the target" not in part


def test_time_to_target_is_absent_without_convergence_findings(tmp_path):
    summary = pd.concat(
        [convergence_sweep(lambda b: 0.02), pd.DataFrame([run(64, 0, 900.0, mode="infer")])]
    )
    argv, findings = write_inputs(tmp_path, summary)
    assert recommend.main(argv) == 0
    assert recommend_target.TIME_TO_TARGET not in (tmp_path / "rec.md").read_text()
    assert recommend_target.TIME_TO_TARGET not in (tmp_path / "rec.html").read_text()
    assert all(rec["time_to_target"] is None for rec in recommend.recommend(summary))
    # with them, only the training group (the one the findings cover) gets the part
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    markdown = (tmp_path / "rec.md").read_text()
    assert markdown.count(f"### {recommend_target.TIME_TO_TARGET}") == 1
    infer = markdown[markdown.index("## infer / small_cnn") : markdown.index("## train /")]
    assert recommend_target.TIME_TO_TARGET not in infer


def test_time_to_target_when_no_batch_size_reached_it_in_every_seed(tmp_path):
    summary = convergence_sweep(lambda b: 0.02)
    missed = summary["seed"] == 1
    summary.loc[missed, "target_reached"] = False
    summary.loc[missed, ["steps_to_target", "samples_to_target", "seconds_to_target"]] = np.nan
    argv, findings = write_inputs(tmp_path, summary)
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    part = ttt_part((tmp_path / "rec.md").read_text())
    assert (
        "No batch size of small_cnn reached the target (val_accuracy ≥ 0.8) in every seed" in part
    )
    assert "learning rate" not in part


def test_each_accumulation_value_gets_its_own_recommendation_and_findings(tmp_path):
    plain = convergence_sweep(lambda b: 0.02)
    # the same effective batches from two micro-batches of half the size, slower per update
    accumulated = convergence_sweep(lambda b: 0.03).assign(
        batch_size=lambda d: d["batch_size"] // 2, accumulation_steps=2
    )
    summary = pd.concat([plain, accumulated], ignore_index=True)
    argv, findings = write_inputs(tmp_path, summary)
    recs = recommend.recommend(summary)
    assert [rec["accumulation_steps"] for rec in recs] == [1, 2]
    assert [rec["n_runs"] for rec in recs] == [len(plain), len(accumulated)]  # never pooled
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    markdown = (tmp_path / "rec.md").read_text()
    heading = "## train / small_cnn (fashion_mnist), 2 accumulation steps"
    assert heading in markdown
    parts = markdown.split(heading)
    # each section's time to target comes from its own accumulation's findings
    assert "batch size 256 at learning rate 0.2" in ttt_part(parts[0])
    assert "batch size 256 (128 × 2 accumulated) at learning rate 0.2" in ttt_part(parts[1])


def test_an_unremoved_input_stall_is_said_in_a_whole_sentence():
    summary = pd.DataFrame(
        rounds(64, 0, 800.0, data_wait=0.6) + rounds(64, 2, 900.0, data_wait=0.4)
    )
    diagnosis = next(n for n in only(recommend.recommend(summary))["notes"] if "Diagnosis" in n)
    assert diagnosis.endswith(
        "no larger worker count measured removed the stall (more workers or a cheaper input "
        "pipeline may help)."
    )


def test_the_first_notes_say_plainly_that_workers_helped_and_what_limits():
    summary = pd.DataFrame(
        rounds(32, 0, 500.0, data_wait=0.17)
        + rounds(32, 2, 700.0, data_wait=0.005)
        + rounds(64, 0, 400.0, data_wait=0.3)
    )
    rec = only(recommend.recommend(summary))
    assert rec["notes"][:2] == [
        "Workers helped: 2 workers: +40.0% samples/s against 0 at batch 32; "
        "data wait 17.0% → 0.5% of the step time.",
        "Limit: the model's compute, not the input pipeline (data wait 0.5% of the step time).",
    ]


def test_more_workers_that_ran_slower_did_not_help_and_an_input_bound_pick_says_so():
    summary = pd.DataFrame(
        rounds(32, 0, 500.0, data_wait=0.3) + rounds(32, 2, 450.0, data_wait=0.25)
    )
    rec = only(recommend.recommend(summary))
    assert rec["notes"][:2] == [
        "More workers did not help: 2 workers: -10.0% samples/s against 0 at batch 32; "
        "data wait 30.0% → 25.0% of the step time.",
        "Limit: the input pipeline: the model waits for data 30.0% of the step time (over 20.0%).",
    ]


def test_workers_within_the_noise_or_unmeasured_are_not_called_a_help():
    tied = pd.DataFrame(rounds(32, 0, 500.0, spread=0.05) + rounds(32, 2, 505.0, spread=0.05))
    rec = only(recommend.recommend(tied))
    assert rec["verdict"]["verdict"] == "undetermined"
    assert "within the run-to-run noise: both could be the best" in rec["notes"][0]
    assert "helped:" not in rec["notes"][0]

    alone = pd.DataFrame(rounds(32, 0, 500.0) + rounds(64, 2, 400.0))
    assert only(recommend.recommend(alone))["notes"][0] == (
        "Workers: only num_workers=0 ran at batch 32, so whether more workers help was not "
        "measured."
    )


def test_skipped_images_are_in_the_recommendation():
    summary = pd.DataFrame(rounds(32, 0, 500.0, images_skipped=2) + rounds(64, 0, 400.0))
    rec = only(recommend.recommend(summary, answer=None), mode="train")
    assert rec["images_skipped"] == 2
    skipped = [n for n in rec["notes"] if "unreadable" in n]
    assert skipped == [
        "Data: 2 unreadable images in the image folder were skipped in every run, so the "
        "throughput is over the readable ones (each is named in logs/download/imagefolder.log)."
    ]
    assert skipped[0] in recommend_pages.render_markdown([rec], ENV)

    clean = only(recommend.recommend(pd.DataFrame(rounds(32, 0, 500.0) + rounds(64, 0, 400.0))))
    assert not [n for n in clean["notes"] if "unreadable" in n]


def test_one_run_per_point_calls_faster_workers_neither_a_help_nor_not():
    summary = pd.DataFrame(
        [run(32, 0, 500.0, round=1), run(32, 1, 900.0, round=1, val_accuracy=0.9)]
    )
    rec = only(recommend.recommend(summary))
    assert rec["verdict"]["verdict"] == "undetermined"
    assert rec["best"]["num_workers"] == 1  # the best estimate
    assert rec["notes"][0].startswith(
        "Whether more workers help is not known: 1 worker: +80.0% samples/s against 0 at batch "
        "32 (one run per point: the run-to-run noise is unknown)"
    )


def test_a_point_of_several_runs_has_its_spread_said_once_by_the_verdict_not_over_seeds():
    # one seed, 3 rounds, 12% apart: the spread is between runs (the verdict's CV), not seeds
    rec = only(recommend.recommend(pd.DataFrame(rounds(64, 0, 1000.0, spread=0.12))))
    text = " ".join([rec["recommendation"], *rec["notes"]])
    assert "run-to-run CV" in text
    assert "over seeds" not in text and "Its spread" not in text


def test_convergence_findings_of_version_1_read_as_version_2(tmp_path):
    """Version 1 of convergence.json had batch_size (effective) and micro_batch_size; a file
    kept from then gives the same time-to-target text as the current version."""
    summary = convergence_sweep(lambda b: 0.01 + 0.0005 * b)
    # every effective batch made of two micro-batches
    summary = summary.assign(batch_size=summary["batch_size"] // 2, accumulation_steps=2)
    argv, findings = write_inputs(tmp_path, summary)
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    current = ttt_part((tmp_path / "rec.md").read_text())
    assert "× 2 accumulated)" in current

    data = json.loads(findings.read_text())
    for group in data["groups"]:
        for e in filter(None, [group["best"], group["highest_throughput"], *group["batches"]]):
            e["batch_size"], e["micro_batch_size"] = e.pop("effective_batch_size"), e["batch_size"]
    data["version"] = 1
    findings.write_text(json.dumps(data))
    assert recommend.main([*argv, "--convergence", str(findings)]) == 0
    assert ttt_part((tmp_path / "rec.md").read_text()) == current

    data["version"] = 99
    findings.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="version 99"):
        recommend.main([*argv, "--convergence", str(findings)])
