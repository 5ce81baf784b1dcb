"""Tests for batchscope.aggregate on small synthetic result files."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from batchscope import aggregate, results

FINGERPRINT = "0123456789ab"


def make_result(**overrides) -> dict:
    """A complete, plausible result dict for one grid point; keys overridable."""
    result = {
        "schema_version": results.SCHEMA_VERSION,
        "mode": "train",
        "model": "small_cnn",
        "dataset": "synthetic",
        "batch_size": 64,
        "num_workers": 0,
        "seed": 0,
        "device": "cpu",
        "device_name": "test cpu",
        "status": "ok",
        "error": None,
        "samples_per_s": 1000.0,
        "step_time_ms_p50": 64.0,
        "step_time_ms_p90": 70.0,
        "step_time_ms_p99": 75.0,
        "step_time_ms_iqr": 2.0,
        "data_wait_frac": 0.1,
        "measured_steps": 3,
        "warmup_steps": 1,
        "measured_samples": 192,
        "measured_s": 0.19,
        "time_to_first_batch_s": 0.01,
        "peak_mem_mb": 100.0,
        "peak_rss_mb": 100.0,
        "cuda_max_allocated_mb": None,
        "cuda_max_reserved_mb": None,
        "final_loss": 1.5,
        "val_accuracy": 0.4,
        "lr": 0.1,
        "images_skipped": 0,
        "torch_threads": 2,
        "pin_memory": False,
        "non_blocking": False,
        "prefetch_factor": None,
        "persistent_workers": False,
        "deterministic": True,
        "env_fingerprint": FINGERPRINT,
        "started_at": "2026-01-01T00:00:00Z",
        "wall_s": 1.0,
    }
    result.update(overrides)
    return result


def write_run(folder, steps: int = 4, **overrides):
    """Write a result JSON and its steps CSV under ``folder``; returns the JSON path."""
    result = make_result(**overrides)
    name = f"bs{result['batch_size']}_nw{result['num_workers']}_seed{result['seed']}"
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
    results.write_csv(aggregate.steps_path(path), rows, results.STEP_COLUMNS)
    return path


def write_env(folder, fingerprint: str = FINGERPRINT):
    path = folder / "env" / "environment.json"
    results.write_json(path, {"fingerprint": fingerprint, "torch": "2.14.1", "device_name": "cpu"})
    return path


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
    checked = aggregate.check_environment(
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
    checked = aggregate.check_environment(
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
        (aggregate.steps_path(p), json.loads(p.read_text())) for p in paths
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
    argv += ["--summary", str(summary_csv), "--curves", str(curves_csv)]

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
    assert aggregate.steps_path("r/bs64_nw2_seed0.json").name == "bs64_nw2_seed0.steps.csv"
    with pytest.raises(ValueError):
        aggregate.steps_path("r/bs64.csv")


def test_written_tables_feed_recommend_and_plots(tmp_path):
    """The CSVs round-trip: the next stages read them as written (bools, empty cells, OOM)."""
    import matplotlib.pyplot as plt

    from batchscope import plots, recommend

    runs = tmp_path / "runs"
    paths = [write_run(runs, batch_size=b, samples_per_s=10.0 * b) for b in (16, 32)]
    paths.append(write_run(runs, batch_size=64, status="oom", samples_per_s=None, steps=0))
    out = tmp_path / "out"
    argv = ["--results", *map(str, paths), "--env", str(write_env(tmp_path))]
    argv += ["--summary", str(out / "s.csv"), "--curves", str(out / "c.csv")]
    assert aggregate.main(argv) == 0

    summary, curves = pd.read_csv(out / "s.csv"), pd.read_csv(out / "c.csv")
    (rec,) = recommend.recommend(summary)
    assert rec["best"]["batch_size"] == 32 and rec["oom_batch_sizes"] == [64]
    assert rec["env_mismatch_runs"] == 0
    figures = plots.all_figures(summary, curves)
    assert "OOM" in [t.get_text() for t in figures["throughput.png"].findobj(plt.Text)]
    plt.close("all")
