"""train.predict end to end: short runs, two calibration batch sizes, prediction.csv and the
report, through Snakemake on a tiny synthetic config whose target every run meets at once."""

import json

import pandas as pd
import pytest

from tests.workflow.test_workflow import snakemake, write_config

pytestmark = pytest.mark.e2e

#: A target any run meets at its first validation (every 16 samples): steps to it fall as the
#: batch grows, so the calibration sizes 4 and 32 admit a curve.
CONFIG = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 12, "num_samples": 512},
    "models": ["small_cnn"],
    "modes": ["train"],
    "batch_sizes": [4, 8, 32],
    "num_workers": [0],
    "seeds": [0, 1],
    "measure": {"warmup_steps": 2, "ceiling": False, "rounds": 1},
    "train": {"max_steps": 40, "eval_every_samples": 16, "eval_samples": 32,
              "target_accuracy": 0.0, "stop_at_target": True, "noise_scale_every_steps": 2,
              "predict": True, "predict_steps": 6},
}  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("predict")
    config = write_config(workdir, **CONFIG)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def _result(workdir, batch, seed):
    path = workdir / f"results/runs/train/small_cnn/bs{batch}_acc1_nw0_seed{seed}_round1.json"
    return json.loads(path.read_text())


def test_short_runs_everywhere_but_the_calibration_sizes(sweep):
    for seed in (0, 1):
        short = _result(sweep, 8, seed)  # predict_steps updates, not stopped by the target
        assert short["max_steps"] == 6 and short["steps_run"] == 6
        assert not short["stopped_early"]
        for batch in (4, 32):  # full length: to the target
            assert _result(sweep, batch, seed)["stopped_early"] is True


def test_prediction_csv(sweep):
    table = pd.read_csv(sweep / "results/convergence/prediction.csv").set_index("batch_size")
    assert table.index.tolist() == [4, 8, 32]
    assert table["calibration"].tolist() == [True, False, True]
    assert table["note"].str.startswith("no prediction").sum() == 0
    # two calibration sizes: the curve passes through their measured mean steps
    for batch in (4, 32):
        assert table.loc[batch, "predicted_steps_to_target"] == pytest.approx(
            table.loc[batch, "measured_steps_to_target"]
        )
    # in between, S_min (1 + B_noise/B) with one S_min and B_noise for the model
    s_min, b_noise = table["s_min"].iloc[0], table["b_noise"].iloc[0]
    for batch in (8,):
        row = table.loc[batch]
        assert row["predicted_steps_to_target"] == pytest.approx(s_min * (1 + b_noise / batch))
        assert row["predicted_seconds_to_target"] == pytest.approx(
            row["predicted_steps_to_target"] * batch / row["samples_per_s"]
        )
        assert pd.isna(row["measured_seconds_to_target"])  # short runs measure no target
    assert table["predicted_best"].sum() == 1
    runs = (sweep / "results/runs/train/small_cnn").glob("*.json")
    spent = sum(json.loads(path.read_text())["wall_s"] for path in runs)
    assert table["device_seconds"].iloc[0] == pytest.approx(spent)
    assert table["b_simple_early"].notna().all()


def test_report_says_the_predicted_best(sweep):
    table = pd.read_csv(sweep / "results/convergence/prediction.csv")
    best = int(table.loc[table["predicted_best"], "batch_size"].iloc[0])
    text = (sweep / "results/convergence/convergence.md").read_text()
    assert f"Predicted best batch size (train.predict): {best}" in text
    assert (sweep / "results/convergence/convergence_prediction.png").stat().st_size > 0
