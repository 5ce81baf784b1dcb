"""train.predict end to end with the default calibration (late_noise): throughput-only short
runs in two rounds (train.predict_rounds), one full-length batch size (nearest the third
quartile of the grid's log range) whose short runs come in the second round, prediction.csv
and the report, through Snakemake on a tiny synthetic config whose target every run meets at
once."""

import json

import numpy as np
import pandas as pd
import pytest

from tests.workflow.helpers import job_counts, snakemake, write_config

pytestmark = pytest.mark.e2e

#: A target any run meets at its first validation (every 16 samples). The calibration size is
#: 32, the one nearest the log range's third quartile (4·8^0.75 = 19); 4 and 8 get short runs.
#: The full-length runs train their whole epoch (16 updates of 32; no stop at the target), so
#: that they measure the noise scale late, past the short runs' 6 updates.
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
              "target_accuracy": 0.0, "noise_scale_every_steps": 2,
              "predict": True, "predict_steps": 6},
}  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("predict")
    config = write_config(workdir, **CONFIG)
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def _run(workdir, batch, seed, round_=1):
    name = f"bs{batch}_acc1_nw0_seed{seed}_round{round_}.json"
    return workdir / "results/runs/train/small_cnn" / name


def _result(workdir, batch, seed, round_=1):
    return json.loads(_run(workdir, batch, seed, round_).read_text())


def test_short_runs_everywhere_and_full_length_at_the_calibration_size(sweep):
    for seed in (0, 1):
        # throughput only: no validation, no noise scale, no target; train.predict_rounds (2)
        # over measure.rounds (1), the calibration size's in the round after its full run
        for batch, round_ in ((4, 1), (4, 2), (8, 1), (8, 2), (32, 2)):
            short = _result(sweep, batch, seed, round_)
            assert short["short_run"] is True
            assert short["max_steps"] == 6 and short["steps_run"] == 6
            assert short["val_accuracy"] is None and "target_reached" not in short
            assert "noise_scale_measurements" not in short
            assert short["samples_per_s"] > 0
        full = _result(sweep, 32, seed)  # full length, validated, its noise scale measured
        assert full["short_run"] is False
        assert full["steps_run"] == 512 // 32 and full["target_reached"] is True
        assert full["noise_scale_measurements"] > 0
        assert not _run(sweep, 32, seed, 3).exists()


@pytest.mark.parametrize(
    ("predict_rounds", "short_rounds", "calibration_rounds"),
    [(1, {"1"}, {"1", "2"}), (3, {"1", "2", "3"}, {"1", "2", "3"})],
)
def test_the_calibration_sizes_short_runs_come_after_their_full_length_ones(
    tmp_path, predict_rounds, short_rounds, calibration_rounds
):
    # 4 and 8 run short in predict_rounds rounds; 32 runs full length in round 1 (measure.rounds)
    # and short in the rounds after, up to predict_rounds but at least one
    train = {**CONFIG["train"], "predict_rounds": predict_rounds}
    config = write_config(tmp_path, **{**CONFIG, "train": train})
    done = snakemake(tmp_path, "-n", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [line for line in done.stdout.splitlines() if "output: " in line and ".json" in line]

    def rounds(batch):
        return {
            line.split(f"/bs{batch}_")[1].split("_round")[1].split(".")[0]
            for line in outputs
            if f"/bs{batch}_" in line and "results/runs/" in line
        }

    assert rounds(4) == rounds(8) == short_rounds
    assert rounds(32) == calibration_rounds
    bench = job_counts(done.stdout + done.stderr)["bench"]
    assert bench == 2 * (2 * len(short_rounds) + len(calibration_rounds))


def test_prediction_csv(sweep):
    table = pd.read_csv(sweep / "results/convergence/prediction.csv").set_index(
        "effective_batch_size"
    )
    assert table.index.tolist() == [4, 8, 32]
    assert table["calibration"].tolist() == [False, False, True]
    assert table["note"].str.startswith("no prediction").sum() == 0
    # B_noise is the calibration runs' B_simple near the target; the corner passes through
    # the calibration size's measured mean steps
    assert "calibration runs' B_simple near the target" in table["note"].iloc[0]
    assert table.loc[32, "predicted_steps_to_target"] == pytest.approx(
        table.loc[32, "measured_steps_to_target"]
    )
    # every short run's throughput counts, both rounds': the pooled log mean of its four; at
    # the calibration size, its two short runs' and not the full-length runs'
    runs = pd.read_csv(sweep / "results/summary.csv")
    for batch, count in ((4, 4), (8, 4), (32, 2)):
        speeds = runs.loc[(runs["batch_size"] == batch) & runs["short_run"], "samples_per_s"]
        assert len(speeds) == count
        assert table.loc[batch, "samples_per_s"] == pytest.approx(np.exp(np.log(speeds).mean()))
    s_min, b_noise = table["s_min"].iloc[0], table["b_noise"].iloc[0]
    for batch in (4, 8):
        row = table.loc[batch]
        assert row["predicted_steps_to_target"] == pytest.approx(s_min * max(1, b_noise / batch))
        assert row["predicted_seconds_to_target"] == pytest.approx(
            row["predicted_steps_to_target"] * batch / row["samples_per_s"]
        )
        assert pd.isna(row["measured_seconds_to_target"])  # short runs measure no target
    assert table["predicted_best"].sum() == 1
    runs = (sweep / "results/runs/train/small_cnn").glob("*.json")
    spent = sum(json.loads(path.read_text())["wall_s"] for path in runs)
    assert table["device_seconds"].iloc[0] == pytest.approx(spent)


def test_report_says_the_predicted_best(sweep):
    table = pd.read_csv(sweep / "results/convergence/prediction.csv")
    best = int(table.loc[table["predicted_best"], "effective_batch_size"].iloc[0])
    text = (sweep / "results/convergence/convergence.md").read_text()
    assert f"Predicted best batch size (train.predict): {best}" in text
    assert (sweep / "results/convergence/convergence_prediction.png").stat().st_size > 0
