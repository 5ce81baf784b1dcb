"""prediction.csv from a sweep's summary (batchscope.report.convergence.prediction_table)."""

import pandas as pd
import pytest

from batchscope.report.convergence.prediction_table import best_line, predict_frame

TWO_POINT = {"predict_steps": 6, "calibration": "two_point"}
NOISE_SCALE = {"predict_steps": 6, "calibration": "noise_scale"}


def _run(batch, seed, *, steps=None, speed=100.0, wall=10.0, batchnorm=0):
    """One training run's summary row; ``steps`` None: a short run, stopped before the target."""
    reached = steps is not None
    return {
        "mode": "train", "model": "m", "dataset": "synthetic", "batch_size": batch,
        "accumulation_steps": 1, "num_workers": 0, "seed": seed, "round": 1, "status": "ok",
        "target_reached": reached, "steps_to_target": steps,
        "samples_to_target": steps * batch if reached else None,
        "seconds_to_target": steps * batch / speed if reached else None,
        "samples_per_s": speed, "wall_s": wall, "lr_warmup_steps": 0,
        "batchnorm_layers": batchnorm,
    }  # fmt: skip


def _sweep(big_steps=(60, 64, 62), batchnorm=0):
    rows = [_run(16, s, steps=st, batchnorm=batchnorm) for s, st in enumerate((400, 420, 410))]
    # short runs: their validation after training may meet a loose target, at their last step
    rows += [_run(b, s, steps=6, speed=100.0 + b, batchnorm=batchnorm) for b in (32, 64)
             for s in range(3)]  # fmt: skip
    rows += [_run(256, s, steps=st, speed=300.0, batchnorm=batchnorm) if st else _run(256, s)
             for s, st in enumerate(big_steps)]  # fmt: skip
    return pd.DataFrame(rows)


def test_predicts_every_batch_size_from_the_two_calibration_sizes():
    table = predict_frame(_sweep(), **TWO_POINT).set_index("effective_batch_size")
    assert table["calibration"].tolist() == [True, False, False, True]
    assert table["note"].str.startswith("no prediction").sum() == 0
    # measured only where runs went to the target: the short runs stop before it
    assert table["measured_seconds_to_target"].notna().tolist() == [True, False, False, True]
    assert table.loc[32, "samples_per_s"] == pytest.approx(132.0)
    assert table["device_seconds"].iloc[0] == pytest.approx(12 * 10.0)
    assert table["predicted_best"].sum() == 1
    assert table["flags"].fillna("").eq("").all()  # no warm-up, no BatchNorm, no extrapolation


def test_the_time_per_update_comes_from_short_runs_at_the_calibration_sizes_too():
    # the calibration sizes' full-length runs (round 1) read faster than their short runs
    # (round 2): only the short runs time the updates, as at every other size; the full
    # ones still give the steps and the measured seconds
    sweep = _sweep()
    short = [dict(_run(b, s, speed=speed), round=2, short_run=True)
             for b, speed in ((16, 50.0), (256, 150.0)) for s in range(3)]  # fmt: skip
    sweep["short_run"] = [False] * 3 + [True] * 6 + [False] * 3
    sweep = pd.concat([sweep, pd.DataFrame(short)], ignore_index=True)
    table = predict_frame(sweep, **TWO_POINT).set_index("effective_batch_size")
    assert table["note"].str.startswith("no prediction").sum() == 0
    assert table.loc[16, "samples_per_s"] == pytest.approx(50.0)
    assert table.loc[256, "samples_per_s"] == pytest.approx(150.0)
    assert table.loc[32, "samples_per_s"] == pytest.approx(132.0)
    assert table.loc[16, "measured_steps_to_target"] == pytest.approx(410.0)
    assert table.loc[256, "measured_seconds_to_target"] == pytest.approx(62 * 256 / 300.0, rel=0.01)
    assert table.loc[16, "predicted_seconds_to_target"] == pytest.approx(
        table.loc[16, "predicted_steps_to_target"] * 16 / 50.0
    )
    assert table["device_seconds"].iloc[0] == pytest.approx(18 * 10.0)


def test_a_calibration_run_that_missed_the_target_is_one_line_not_a_guess():
    table = predict_frame(_sweep(big_steps=(60, None, 62)), **TWO_POINT)
    assert table["predicted_steps_to_target"].isna().all()
    assert not table["predicted_best"].any()
    note = table["note"].iloc[0]
    assert note == "no prediction: 1 of 3 calibration runs at batch 256 did not reach the target"
    assert best_line(table) == note


def test_batchnorm_is_flagged_on_every_batch_size():
    table = predict_frame(_sweep(batchnorm=2), **TWO_POINT)
    assert table["flags"].str.contains("BatchNorm").all()


def test_another_sweeps_measured_runs_fill_every_batch_size():
    measured = pd.DataFrame(
        [_run(b, s, steps=st) for b, st in ((16, 400), (32, 220), (64, 130), (256, 60))
         for s in range(2)]
    )  # fmt: skip
    table = predict_frame(_sweep(), measured=measured, **TWO_POINT).set_index(
        "effective_batch_size"
    )
    assert table.loc[64, "measured_steps_to_target"] == pytest.approx(130)


def _noise_curves(sweep, b_noise, steps=6):
    """Each run's first ``steps`` updates, with noise measurements whose unbiased |G|² is 1
    and tr Σ is ``b_noise``: E|G_B|² = |G|² + tr Σ / B at the two noise batch sizes 4 and 16."""
    rows = [
        {"mode": "train", "model": "m", "batch_size": r["batch_size"], "accumulation_steps": 1,
         "num_workers": 0, "seed": r["seed"], "step": step,
         "noise_sq_small": 1 + b_noise / 4, "noise_sq_big": 1 + b_noise / 16}
        for r in sweep.to_dict("records") for step in range(1, steps + 1)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def _noise_sweep():
    """Full-length runs at 64 (the geometric middle of 16-256), short runs elsewhere."""
    rows = [_run(64, s, steps=st) for s, st in enumerate((150, 160, 155))]
    rows += [_run(b, s, speed=100.0 + b) for b in (16, 32, 256) for s in range(3)]
    sweep = pd.DataFrame(rows)
    return sweep.assign(noise_scale_batch_small=4, noise_scale_batch_big=16)


def test_noise_scale_calibration_runs_one_size_and_takes_b_noise_from_the_short_runs():
    sweep = _noise_sweep()
    table = predict_frame(sweep, _noise_curves(sweep, 48.0), **NOISE_SCALE)
    table = table.set_index("effective_batch_size")
    assert table["calibration"].tolist() == [False, False, True, False]
    assert table["b_noise"].iloc[0] == pytest.approx(48.0)
    assert table["s_min"].iloc[0] == pytest.approx(155.0 / (1 + 48.0 / 64))
    assert table.loc[16, "predicted_steps_to_target"] == pytest.approx(
        155.0 / (1 + 48.0 / 64) * (1 + 48.0 / 16)
    )
    assert "extrapolated x4 beyond the calibration size 64" in table.loc[16, "flags"]
    assert "no prediction" not in table["note"].iloc[0]


def test_noise_scale_calibration_without_noise_measurements_is_one_line():
    table = predict_frame(_noise_sweep(), None, **NOISE_SCALE)
    assert table["predicted_steps_to_target"].isna().all()
    assert (
        table["note"].iloc[0].startswith("no prediction: the runs measured no usable noise scale")
    )


def test_late_noise_takes_b_noise_near_the_target_not_early():
    sweep = _noise_sweep()
    full = sweep[sweep["batch_size"] == 64]
    early = _noise_curves(sweep, 24.0)  # every run's first 6 updates: B_simple 24
    # the calibration runs near the target (their last third, steps 120-150): B_simple 128
    late = _noise_curves(full, 128.0, steps=150)
    late = late[late["step"] > 120]
    table = predict_frame(
        sweep, pd.concat([early, late]), predict_steps=6, calibration="late_noise"
    ).set_index("effective_batch_size")
    assert table["calibration"].tolist() == [False, False, True, False]
    assert table["b_noise"].iloc[0] == pytest.approx(128.0)
    assert table["b_simple_early"].iloc[0] == pytest.approx(24.0)
    # the corner through 64 (below the critical batch: perfect scaling, 155 x 64 samples)
    assert table["s_min"].iloc[0] == pytest.approx(155.0 * 64 / 128)
    assert table.loc[16, "predicted_steps_to_target"] == pytest.approx(155.0 * 4)
    assert table.loc[256, "predicted_steps_to_target"] == pytest.approx(155.0 / 2)
    assert "near the target" in table["note"].iloc[0]
    assert "noise scale drifts" in table.loc[16, "flags"]
