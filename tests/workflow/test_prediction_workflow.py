"""train.predict end to end with the cheaper calibration (noise_scale): short runs, one
full-length batch size (the grid's geometric middle), prediction.csv and the report, through
Snakemake on a tiny synthetic config whose target every run meets at once."""

import json

import pandas as pd
import pytest

from tests.workflow.helpers import snakemake, write_config

pytestmark = pytest.mark.e2e

#: A target any run meets at its first validation (every 16 samples). The calibration size is 8,
#: the one nearest sqrt(4·32) = 11.3; 4 and 32 get short runs.
CONFIG = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 12, "num_samples": 512},
    "models": ["small_cnn"],
    "modes": ["train"],
    "batch_sizes": [4, 8, 32],
    "num_workers": [0],
    "seeds": [0, 1],
    "measure": {"warmup_steps": 2, "ceiling": False, "rounds": 1},
    "sweep": {"strategy": "full"},
    "train": {"max_steps": 40, "eval_every_samples": 16, "eval_samples": 32,
              "target_accuracy": 0.0, "stop_at_target": True, "noise_scale_every_steps": 2,
              "predict": True, "predict_steps": 6, "predict_calibration": "noise_scale"},
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
        for batch in (4, 32):  # predict_steps updates, not stopped by the target
            short = _result(sweep, batch, seed)
            assert short["max_steps"] == 6 and short["steps_run"] == 6
            assert not short["stopped_early"]
        assert _result(sweep, 8, seed)["stopped_early"] is True  # full length: to the target


def test_prediction_csv(sweep):
    table = pd.read_csv(sweep / "results/convergence/prediction.csv").set_index(
        "effective_batch_size"
    )
    assert table.index.tolist() == [4, 8, 32]
    assert table["calibration"].tolist() == [False, True, False]
    assert table["note"].str.startswith("no prediction").sum() == 0
    # B_noise is the short runs' pooled B_simple; the curve passes through the calibration
    # size's measured mean steps
    assert table["b_noise"].iloc[0] == pytest.approx(table["b_simple_early"].iloc[0])
    assert table.loc[8, "predicted_steps_to_target"] == pytest.approx(
        table.loc[8, "measured_steps_to_target"]
    )
    s_min, b_noise = table["s_min"].iloc[0], table["b_noise"].iloc[0]
    for batch in (4, 32):
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
    best = int(table.loc[table["predicted_best"], "effective_batch_size"].iloc[0])
    text = (sweep / "results/convergence/convergence.md").read_text()
    assert f"Predicted best batch size (train.predict): {best}" in text
    assert (sweep / "results/convergence/convergence_prediction.png").stat().st_size > 0
