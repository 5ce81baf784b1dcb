"""Tests for batchscope.report.summary.aggregate on small synthetic result files."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pandas as pd
import pytest

from batchscope.core import results
from batchscope.core.stats import mean_ci
from batchscope.report.summary import aggregate, diagnosis, point_table, result_files
from tests.factories import FINGERPRINT, fake_result


def write_run(folder, steps: int = 4, **overrides):
    """Write a result JSON and its steps CSV under ``folder``; returns the JSON path."""
    result = fake_result(**overrides)
    name = (
        f"bs{result['batch_size']}_acc{result['accumulation_steps']}"
        f"_nw{result['num_workers']}_seed{result['seed']}"
    )
    path = folder / result["mode"] / result["model"] / f"{name}.json"
    results.write_json(path, result)
    train = result["mode"] == "train"
    rows = [
        {
            "step": i,
            "phase": "warmup" if i == 0 else "measured",
            "samples_seen": (i + 1) * result["batch_size"],
            "elapsed_s": 0.1 * (i + 1),
            "step_time_ms": 60.0 + i,
            "data_wait_ms": 5.0,
            "loss": 2.0 - 0.1 * i if train else None,
            "lr": 0.1 if train else None,
        }
        for i in range(steps)
    ]
    results.write_csv(result_files.steps_path(path), rows, results.STEP_COLUMNS)
    return path


def write_env(folder, fingerprint: str = FINGERPRINT):
    path = folder / "env" / "environment.json"
    results.write_json(path, {"fingerprint": fingerprint, "torch": "2.14.1", "device_name": "cpu"})
    return path


def outputs(out):
    """The output flags of an aggregate run into ``out`` (no run flagged as loaded: limit 1)."""
    return [
        "--foreign-cpu-limit",
        "1",
        "--summary",
        str(out / "s.csv"),
        "--curves",
        str(out / "c.csv"),
    ]


def test_collect_rows_order_and_columns(tmp_path):
    paths = [
        write_run(tmp_path, batch_size=128, num_workers=2),
        write_run(tmp_path, mode="infer", batch_size=7, final_loss=None, val_accuracy=None),
        write_run(tmp_path, batch_size=64, num_workers=2, seed=1),
        write_run(tmp_path, batch_size=64, num_workers=2, seed=0),
        write_run(tmp_path, batch_size=64, num_workers=0),
    ]
    summary = aggregate.collect(paths)

    assert len(summary) == 5
    first = list(aggregate.FIRST_COLUMNS)
    assert list(summary.columns[: len(first)]) == first
    assert {"step_time_ms_p99", "wall_s", "schema_version"} <= set(summary.columns)
    order = summary[["mode", "batch_size", "num_workers", "seed"]].values.tolist()
    assert order == [
        ["infer", 7, 0, 0],
        ["train", 64, 0, 0],
        ["train", 64, 2, 0],
        ["train", 64, 2, 1],
        ["train", 128, 2, 0],
    ]


def test_collect_keeps_failed_runs_with_nulls(tmp_path):
    paths = [
        write_run(tmp_path, batch_size=64),
        write_run(
            tmp_path,
            batch_size=1024,
            status="oom",
            error="CUDA out of memory",
            samples_per_s=None,
            step_time_ms_p50=None,
            final_loss=None,
        ),
    ]
    summary = aggregate.collect(paths)
    oom = summary[summary["status"] == "oom"].iloc[0]
    assert oom["batch_size"] == 1024
    assert pd.isna(oom["samples_per_s"])
    assert oom["error"] == "CUDA out of memory"


def test_duplicate_grid_point_is_rejected(tmp_path):
    first = write_run(tmp_path / "a", batch_size=64)
    second = write_run(tmp_path / "b", batch_size=64)
    with pytest.raises(ValueError, match="duplicate grid point"):
        aggregate.collect([first, second])


def test_unknown_status_and_missing_key_are_rejected(tmp_path):
    bad = write_run(tmp_path, status="exploded")
    with pytest.raises(ValueError, match="unknown status"):
        aggregate.collect([bad])
    path = tmp_path / "partial.json"
    results.write_json(path, {"mode": "train"})
    with pytest.raises(ValueError, match="lacks key"):
        aggregate.collect([path])


def test_fingerprint_mismatch_is_flagged_not_fatal(tmp_path):
    paths = [
        write_run(tmp_path, batch_size=64),
        write_run(tmp_path, batch_size=128, env_fingerprint="ffffffffffff"),
    ]
    stream = io.StringIO()
    checked = diagnosis.check_environment(
        aggregate.collect(paths), {"fingerprint": FINGERPRINT}, stream=stream
    )
    assert checked.set_index("batch_size")["env_matches_capture"].to_dict() == {
        64: True,
        128: False,
    }
    warning = stream.getvalue()
    assert warning.startswith("WARNING") and warning.count("\n") == 1
    assert "ffffffffffff" in warning and "batch_size=128" in warning


def test_matching_fingerprints_print_nothing(tmp_path):
    stream = io.StringIO()
    checked = diagnosis.check_environment(
        aggregate.collect([write_run(tmp_path)]), {"fingerprint": FINGERPRINT}, stream=stream
    )
    assert checked["env_matches_capture"].all()
    assert stream.getvalue() == ""


def test_curves_carry_grid_keys(tmp_path):
    paths = [
        write_run(tmp_path, batch_size=32, steps=3),
        write_run(tmp_path, batch_size=16, num_workers=1, steps=2),
        write_run(tmp_path, batch_size=999, status="oom", steps=0),
    ]
    curves = aggregate.collect_curves(
        (result_files.steps_path(p), json.loads(p.read_text())) for p in paths
    )
    assert list(curves.columns) == [*results.GRID_KEYS, *results.STEP_COLUMNS]
    assert len(curves) == 5
    assert curves[["batch_size", "num_workers", "step"]].values.tolist() == [
        [16, 1, 0],
        [16, 1, 1],
        [32, 0, 0],
        [32, 0, 1],
        [32, 0, 2],
    ]
    assert set(curves["phase"]) == {"warmup", "measured"}
    assert (curves["mode"] == "train").all()


def test_main_writes_summary_and_curves(tmp_path, capsys):
    paths = [
        write_run(tmp_path / "runs", batch_size=64),
        write_run(tmp_path / "runs", batch_size=50, env_fingerprint="aaaaaaaaaaaa"),
        write_run(tmp_path / "runs", mode="infer", final_loss=None, val_accuracy=None),
    ]
    env = write_env(tmp_path)
    summary_csv, curves_csv = tmp_path / "out" / "summary.csv", tmp_path / "out" / "curves.csv"
    argv = ["--results", *map(str, paths), "--env", str(env)]
    argv += ["--foreign-cpu-limit", "1", "--summary", str(summary_csv), "--curves", str(curves_csv)]

    assert aggregate.main(argv) == 0

    summary = pd.read_csv(summary_csv)
    assert summary[["mode", "batch_size"]].values.tolist() == [
        ["infer", 64],
        ["train", 50],
        ["train", 64],
    ]
    assert summary["env_matches_capture"].tolist() == [True, False, True]
    curves = pd.read_csv(curves_csv)
    assert len(curves) == 12
    assert curves.loc[curves["mode"] == "infer", "loss"].isna().all()
    assert "WARNING" in capsys.readouterr().err
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_steps_path_is_derived_from_the_json_path(tmp_path):
    steps = result_files.steps_path("r/bs64_acc1_nw2_seed0.json")
    assert steps.name == "bs64_acc1_nw2_seed0.steps.csv"
    with pytest.raises(ValueError):
        result_files.steps_path("r/bs64.csv")


def test_written_tables_feed_recommend_and_plots(tmp_path):
    """The CSVs round-trip: the next stages read them as written (bools, empty cells, OOM)."""
    import matplotlib.pyplot as plt

    from batchscope.report.plots import build as plots
    from batchscope.report.recommend import build as recommend

    runs = tmp_path / "runs"
    paths = [write_run(runs, batch_size=b, samples_per_s=10.0 * b) for b in (16, 32)]
    paths.append(write_run(runs, batch_size=64, status="oom", samples_per_s=None, steps=0))
    out = tmp_path / "out"
    argv = ["--results", *map(str, paths), "--env", str(write_env(tmp_path))]
    argv += outputs(out)
    assert aggregate.main(argv) == 0

    summary, curves = pd.read_csv(out / "s.csv"), pd.read_csv(out / "c.csv")
    (rec,) = recommend.recommend(summary)
    assert rec["best"]["batch_size"] == 32 and rec["oom_batch_sizes"] == [64]
    assert rec["env_mismatch_runs"] == 0
    figures = plots.all_figures(summary, curves)
    assert "OOM" in [t.get_text() for t in figures["throughput.png"].findobj(plt.Text)]
    plt.close("all")


def test_mean_ci_is_the_student_t_interval():
    mean, low, high = mean_ci([90.0, 100.0, 110.0])
    # sd 10, n 3, t(2) = 4.302653: half-width 4.302653 * 10 / sqrt(3) = 24.8414
    assert mean == 100.0
    assert (low, high) == (pytest.approx(75.1586, abs=1e-4), pytest.approx(124.8414, abs=1e-4))
    mean, low, high = mean_ci([1.0, 2.0])  # t(1) = 12.7062, sd 0.7071, n 2
    assert (low, high) == (pytest.approx(1.5 - 6.3531, abs=1e-4), pytest.approx(7.8531, abs=1e-4))
    mean, low, high = mean_ci([5.0, None, float("nan")])
    assert mean == 5.0 and math.isnan(low) and math.isnan(high)  # one value: no interval
    assert all(math.isnan(v) for v in mean_ci([]))


def test_points_pool_seeds_with_confidence_intervals(tmp_path):
    paths = [
        write_run(tmp_path, seed=s, samples_per_s=v, val_accuracy=a, final_loss=loss)
        for s, v, a, loss in ((0, 900.0, 0.5, 1.2), (1, 1000.0, 0.6, 1.0), (2, 1100.0, 0.7, 0.8))
    ]
    paths.append(write_run(tmp_path, batch_size=128, samples_per_s=1500.0, peak_mem_mb=180.0))
    paths.append(write_run(tmp_path, batch_size=256, samples_per_s=1600.0, peak_mem_mb=300.0))
    paths.append(
        write_run(
            tmp_path, batch_size=256, seed=1, status="oom", samples_per_s=None, peak_mem_mb=None
        )
    )
    points = point_table.summarize_points(aggregate.collect(paths)).set_index("batch_size")

    assert points.loc[64, ["n_seeds", "n_ok", "status"]].tolist() == [3, 3, "ok"]
    half = 4.302652729749464 * 100.0 / math.sqrt(3)
    assert points.loc[64, "samples_per_s_mean"] == pytest.approx(1000.0)
    assert points.loc[64, "samples_per_s_ci95_low"] == pytest.approx(1000.0 - half)
    assert points.loc[64, "samples_per_s_ci95_high"] == pytest.approx(1000.0 + half)
    assert points.loc[64, "val_accuracy_ci95_high"] == pytest.approx(0.6 + half / 1000)
    assert points.loc[64, "final_loss_ci95_low"] == pytest.approx(1.0 - 2 * half / 1000)
    # one seed: the mean is that seed, the interval is empty
    assert points.loc[128, "samples_per_s_mean"] == 1500.0
    assert points.loc[128, ["samples_per_s_ci95_low", "samples_per_s_ci95_high"]].isna().all()
    assert points.loc[128, "peak_mem_mb_mean"] == 180.0
    # a seed that failed counts in n_seeds, not in the means
    assert points.loc[256, ["n_seeds", "n_ok", "status", "failed_seeds"]].tolist() == [
        2,
        1,
        "mixed",
        "1:oom",
    ]
    assert points.loc[256, "samples_per_s_mean"] == 1600.0
    assert points.loc[256, "peak_mem_mb_mean"] == 300.0


def test_diagnosis_input_or_compute_bound_and_which_workers_removed_the_stall(tmp_path):
    waits = {  # (batch_size, num_workers, seed): data_wait_frac
        (64, 0, 0): 0.5,
        (64, 1, 0): 0.3,
        (64, 2, 0): 0.1,
        (64, 4, 0): 0.05,
        (64, 0, 1): 0.5,
        (64, 2, 1): 0.25,  # seed 1: two workers did not remove the stall ...
        (64, 4, 1): 0.2,  # ... four did (0.2 is not over the threshold)
        (128, 0, 0): 0.6,
        (128, 2, 0): 0.4,
    }
    paths = [
        write_run(tmp_path, batch_size=b, num_workers=w, seed=s, data_wait_frac=wait)
        for (b, w, s), wait in waits.items()
    ]
    paths.append(write_run(tmp_path, batch_size=256, status="oom", data_wait_frac=None))
    summary = aggregate.collect(paths)
    assert diagnosis.INPUT_BOUND_FRAC == 0.2
    got = {
        (r.batch_size, r.num_workers, r.seed): tuple(
            None if pd.isna(v) else v for v in (r.bound, r.stall_removed_by_workers)
        )
        for r in summary.itertuples()
    }
    assert got == {
        (64, 0, 0): ("input", 2),
        (64, 1, 0): ("input", 2),
        (64, 2, 0): ("compute", None),
        (64, 4, 0): ("compute", None),
        (64, 0, 1): ("input", 4),
        (64, 2, 1): ("input", 4),
        (64, 4, 1): ("compute", None),
        (128, 0, 0): ("input", "none"),
        (128, 2, 0): ("input", "none"),
        (256, 0, 0): (None, None),  # did not run ok: no diagnosis
    }
    # over seeds: nw2 at bs 64 waits (0.1 + 0.25) / 2 = 0.175 on average, so it is compute-bound
    points = point_table.summarize_points(summary).set_index(["batch_size", "num_workers"])
    assert points.loc[(64, 0), ["bound", "stall_removed_by_workers"]].tolist() == ["input", 2]
    assert points.loc[(64, 2), "data_wait_frac_mean"] == pytest.approx(0.175)
    assert points.loc[(64, 2), "bound"] == "compute"
    assert points.loc[(128, 0), "stall_removed_by_workers"] == "none"
    assert pd.isna(points.loc[(256, 0), "bound"])


def test_missing_and_failed_points_become_rows(tmp_path, capsys):
    runs = tmp_path / "runs" / "train" / "small_cnn"
    done = [write_run(tmp_path / "runs", batch_size=b) for b in (32, 64)]
    failed, missing = runs / "bs128_acc1_nw0_seed0.json", runs / "bs256_acc1_nw0_seed0.json"
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "failed.log").write_text(
        "batchscope bench: train small_cnn on synthetic, batch_size=128\n"
        "train bs=128 nw=0:  10%|#         | 1/10\r"
        "train bs=128 nw=0:  20%|##        | 2/10\n"
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "  RuntimeError: CUDA error: an illegal memory access was encountered   \n"
        "\n   \n"
    )
    log_paths = [logs / "a.log", logs / "b.log", logs / "failed.log", logs / "missing.log"]
    out = tmp_path / "out"
    argv = ["--results", *map(str, [*done, failed, missing]), "--allow-missing"]
    argv += ["--logs", *map(str, log_paths), "--env", str(write_env(tmp_path))]
    argv += outputs(out)
    argv += ["--by-point", str(out / "p.csv")]

    assert aggregate.main(argv) == 0

    summary = pd.read_csv(out / "s.csv").set_index("batch_size")
    assert summary["status"].to_dict() == {32: "ok", 64: "ok", 128: "failed", 256: "missing"}
    assert summary.loc[128, "error"] == (
        "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert pd.isna(summary.loc[256, "error"])
    assert summary.loc[128, ["mode", "model", "dataset", "num_workers", "seed"]].tolist() == [
        "train",
        "small_cnn",
        "synthetic",  # the dataset of the results that exist
        0,
        0,
    ]
    assert summary.loc[[128, 256], ["samples_per_s", "env_fingerprint"]].isna().all(axis=None)
    assert summary["env_matches_capture"].tolist() == [True, True, np.nan, np.nan]
    points = pd.read_csv(out / "p.csv").set_index("batch_size")
    assert points.loc[128, ["status", "n_ok", "failed_seeds"]].tolist() == ["failed", 0, "0:failed"]
    assert points.loc[256, "status"] == "missing"
    curves = pd.read_csv(out / "c.csv")
    assert sorted(set(curves["batch_size"])) == [32, 64]
    err = capsys.readouterr().err
    assert "aggregated 2 results (1 failed, 1 missing)" in err
    assert "WARNING" not in err  # rows without a result are not an environment mismatch


def test_missing_result_is_an_error_unless_allowed(tmp_path):
    present = write_run(tmp_path, batch_size=32)
    absent = tmp_path / "train" / "small_cnn" / "bs64_acc1_nw0_seed0.json"
    with pytest.raises(FileNotFoundError):
        result_files.read_grid([present, absent])
    pairs, rows = result_files.read_grid([present, absent], allow_missing=True, dataset="cifar10")
    assert len(pairs) == 1
    assert rows == [
        {
            "mode": "train",
            "model": "small_cnn",
            "dataset": "cifar10",
            "sequence_length": None,
            "batch_size": 64,
            "accumulation_steps": 1,
            "num_workers": 0,
            "devices": 1,
            "seed": 0,
            "round": 1,
            "status": "missing",
            "error": None,
        }
    ]


def test_logs_must_parallel_results(tmp_path, capsys):
    path = write_run(tmp_path)
    argv = ["--results", str(path), "--logs", "a.log", "b.log", "--env", "e.json"]
    with pytest.raises(SystemExit):
        aggregate.main(
            [*argv, "--foreign-cpu-limit", "1", "--summary", "s.csv", "--curves", "c.csv"]
        )
    assert "one log per result" in capsys.readouterr().err
    with pytest.raises(ValueError, match="one log per result"):
        result_files.read_grid([path], ["a.log", "b.log"])


def test_grid_point_of_a_path_follows_the_workflow_naming():
    grid = result_files.grid_of_path("results/runs/infer/resnet18/bs512_acc1_nw4_seed3_round2.json")
    assert grid == {
        "mode": "infer",
        "model": "resnet18",
        "batch_size": 512,
        "accumulation_steps": 1,
        "num_workers": 4,
        "devices": 1,
        "seed": 3,
        "round": 2,
        "sequence_length": None,
    }
    # a result from before rounds existed was the only round
    old = result_files.grid_of_path("results/runs/infer/resnet18/bs512_acc1_nw4_seed3.json")
    assert old == {**grid, "round": 1}
    # several devices: the tag one-device paths lack
    two = result_files.grid_of_path("results/runs/infer/resnet18/bs512_acc1_nw4_dev2_seed3.json")
    assert two == {**grid, "devices": 2, "round": 1}
    with pytest.raises(ValueError, match="cannot tell its grid point"):
        result_files.grid_of_path("results/runs/infer/resnet18/result.json")


def test_throughput_windows_are_one_cell(tmp_path):
    paths = [
        write_run(tmp_path, samples_per_s_windows=[990.5, 1000.0, 1012.25], noisy=False),
        write_run(tmp_path, batch_size=128, samples_per_s_windows=[2000.0], noisy=None),
    ]
    out = tmp_path / "out"
    argv = ["--results", *map(str, paths), "--env", str(write_env(tmp_path))]
    argv += outputs(out)
    assert aggregate.main(argv) == 0
    summary = pd.read_csv(out / "s.csv", dtype={"samples_per_s_windows": str})
    assert summary["samples_per_s_windows"].tolist() == ["990.5;1000.0;1012.25", "2000.0"]
    assert not (out / "p.csv").exists()  # --by-point is optional


def test_partial_tables_feed_recommend_and_plots(tmp_path):
    """Failed and missing points reach the recommendation and the figures from the CSVs."""
    import matplotlib.pyplot as plt

    from batchscope.report.plots import build as plots
    from batchscope.report.recommend import build as recommend

    runs = tmp_path / "runs"
    paths = [write_run(runs, batch_size=b, samples_per_s=10.0 * b) for b in (16, 32)]
    folder = runs / "train" / "small_cnn"
    paths += [folder / "bs64_acc1_nw0_seed0.json", folder / "bs128_acc1_nw0_seed0.json"]
    log_dir = tmp_path / "logs" / "bench"
    log = log_dir / "train" / "small_cnn" / "bs64_acc1_nw0_seed0.log"  # laid out as the results
    log.parent.mkdir(parents=True)
    log.write_text("Killed\n")
    assert result_files.log_path(log_dir, paths[2]) == log
    out = tmp_path / "out"
    argv = ["--results", *map(str, paths), "--env", str(write_env(tmp_path)), "--allow-missing"]
    argv += ["--log-dir", str(log_dir)]
    argv += outputs(out)
    assert aggregate.main(argv) == 0

    summary, curves = pd.read_csv(out / "s.csv"), pd.read_csv(out / "c.csv")
    (rec,) = recommend.recommend(summary)
    assert rec["best"]["batch_size"] == 32 and rec["env_mismatch_runs"] == 0
    assert [(p["batch_size"], p["status"], p["error"]) for p in rec["absent_points"]] == [
        (64, "failed", "Killed"),
        (128, "missing", None),
    ]
    figures = plots.all_figures(summary, curves)
    marks = [t.get_text() for t in figures["throughput.png"].findobj(plt.Text)]
    assert "failed" in marks and "missing" in marks
    plt.close("all")


def test_rows_are_held_against_the_compute_only_ceiling(tmp_path):
    from batchscope.report.summary.diagnosis import add_ceiling

    summary = pd.DataFrame(
        {"mode": ["train", "train"], "model": ["m", "m"], "batch_size": [8, 16],
         "num_workers": [0, 0], "samples_per_s": [50.0, 90.0]}
    )  # fmt: skip
    path = tmp_path / "bs8.json"
    results.write_json(
        path, {"mode": "train", "model": "m", "batch_size": 8, "samples_per_s": 200.0}
    )
    out = add_ceiling(summary, [path])
    assert out.loc[0, "ceiling_samples_per_s"] == 200.0
    assert out.loc[0, "frac_of_ceiling"] == 0.25
    assert pd.isna(out.loc[1, "frac_of_ceiling"])  # no ceiling run for batch 16
    assert add_ceiling(summary, []).equals(summary)


def test_scaling_efficiency_compares_per_point_medians_over_rounds_with_one_device():
    from tests.factories import summary_row

    rows = [
        # one device: rounds at 100, 110 and 400 (an outlier the median ignores): 110
        *(
            summary_row(devices=1, round=r, samples_per_s=v)
            for r, v in [(1, 100), (2, 110), (3, 400)]
        ),
        # two devices: 170 and 180 and 190: 180 = 2 x 110 x 0.818...
        *(
            summary_row(devices=2, round=r, samples_per_s=v)
            for r, v in [(1, 170), (2, 180), (3, 190)]
        ),
        # four devices at another batch size, whose one-device point was never measured
        summary_row(devices=4, batch_size=128, samples_per_s=900.0),
        # a failed run of the two-device point counts for nothing
        summary_row(devices=2, round=4, status="oom", samples_per_s=None),
    ]
    summary = aggregate.add_scaling_efficiency(pd.DataFrame(rows))
    by_devices = summary.groupby(["batch_size", "devices"])["scaling_efficiency"]
    assert set(by_devices.get_group((64, 1))) == {1.0}
    assert list(by_devices.get_group((64, 2))) == pytest.approx([180 / (2 * 110)] * 4)
    assert by_devices.get_group((128, 4)).isna().all()
    points = point_table.summarize_points(summary).set_index(["batch_size", "devices"])
    assert points.loc[(64, 2), "scaling_efficiency"] == pytest.approx(180 / 220)


def test_a_points_breakdown_and_accuracy_come_from_its_first_round_and_its_throughput_from_all():
    """A throughput run times its breakdown and validates in round 1 only: the points table
    takes those from the runs that have them, and the throughput from every round."""
    from tests.factories import summary_row

    later = {"val_accuracy": None, "val_loss": None, "val_samples": None}
    later |= {f"time_{p}_ms": None for p in ("runner", "data_wait", "h2d", "forward")}
    later |= {f"time_{p}_ms": None for p in ("backward", "optimizer", "other")}
    rows = [
        summary_row(round=1, samples_per_s=100.0, val_accuracy=0.7, time_forward_ms=30.0),
        summary_row(round=2, samples_per_s=110.0, **later),
        summary_row(round=3, samples_per_s=120.0, **later),
    ]
    (point,) = point_table.summarize_points(pd.DataFrame(rows)).to_dict("records")
    assert point["n_ok"] == 3 and point["samples_per_s_median"] == pytest.approx(110.0)
    assert point["val_accuracy_mean"] == 0.7 and point["time_forward_ms_mean"] == 30.0
    assert math.isnan(point["val_accuracy_ci95_low"])  # one value: no interval
