"""prediction.csv from a sweep's summary (batchscope.report.prediction)."""

import pandas as pd
import pytest

from batchscope.report.prediction import best_line, predict_frame


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
    table = predict_frame(_sweep()).set_index("batch_size")
    assert table["calibration"].tolist() == [True, False, False, True]
    assert table["note"].str.startswith("no prediction").sum() == 0
    # measured only where runs went to the target: the short runs stop before it
    assert table["measured_seconds_to_target"].notna().tolist() == [True, False, False, True]
    assert table.loc[32, "samples_per_s"] == pytest.approx(132.0)
    assert table["device_seconds"].iloc[0] == pytest.approx(12 * 10.0)
    assert table["predicted_best"].sum() == 1
    assert table["flags"].fillna("").eq("").all()  # no warm-up, no BatchNorm, no extrapolation


def test_a_calibration_run_that_missed_the_target_is_one_line_not_a_guess():
    table = predict_frame(_sweep(big_steps=(60, None, 62)))
    assert table["predicted_steps_to_target"].isna().all()
    assert not table["predicted_best"].any()
    note = table["note"].iloc[0]
    assert note == "no prediction: 1 of 3 calibration runs at batch 256 did not reach the target"
    assert best_line(table) == note


def test_batchnorm_is_flagged_on_every_batch_size():
    table = predict_frame(_sweep(batchnorm=2))
    assert table["flags"].str.contains("BatchNorm").all()


def test_another_sweeps_measured_runs_fill_every_batch_size():
    measured = pd.DataFrame(
        [_run(b, s, steps=st) for b, st in ((16, 400), (32, 220), (64, 130), (256, 60))
         for s in range(2)]
    )  # fmt: skip
    table = predict_frame(_sweep(), measured=measured).set_index("batch_size")
    assert table.loc[64, "measured_steps_to_target"] == pytest.approx(130)
