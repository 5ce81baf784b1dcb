"""batchscope.report.summary.result_files and aggregate against the result format: the names the
reporting floor takes from core.results, and the tables read back with the declared dtypes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from batchscope.core import paths, results
from batchscope.report.summary import aggregate, result_files
from tests.factories import FINGERPRINT, NOISE_SCALE_KEYS, TARGET_KEYS, fake_result


def test_core_results_names_agree_with_the_schema():
    run = results.load_schema()["$defs"]["run"]
    assert list(results.FIELDS) == list(run["properties"])
    assert {n for n, f in results.FIELDS.items() if f.required} == set(run["required"])
    assert set(results.GRID_KEYS) <= set(run["required"])
    assert run["properties"]["schema_version"]["const"] == results.SCHEMA_VERSION
    assert tuple(run["properties"]["status"]["enum"]) == results.STATUSES
    # what the reader insists on is always written
    assert set(result_files.REQUIRED_KEYS) <= set(run["required"])
    # the optional keys come in the two groups the schema ties together
    assert set(results.FIELDS) - set(run["required"]) == {*TARGET_KEYS, *NOISE_SCALE_KEYS}
    for group in (TARGET_KEYS, NOISE_SCALE_KEYS):
        for key in group:
            closure = {key, *run["dependentRequired"].get(key, [])}
            for other in list(closure):
                closure |= set(run["dependentRequired"].get(other, []))
            assert closure == set(group), key


def _write(folder: Path, result: dict) -> Path:
    """A result and a two-step steps CSV where the workflow puts them."""
    stem = paths.run_stem(result).removeprefix("results/")
    path = folder / f"{stem}.json"
    results.write_json(path, result)
    rows = [{"step": i, "phase": "measured", "samples_seen": 64 * i, "elapsed_s": 0.1 * i,
             "step_time_ms": 64.0, "data_wait_ms": 6.4, "loss": 1.5} for i in (1, 2)]  # fmt: skip
    results.write_csv(result_files.steps_path(path), rows, results.STEP_COLUMNS)
    return path


def test_the_tables_read_back_with_the_declared_dtypes(tmp_path):
    written = [
        _write(
            tmp_path,
            fake_result(batch_size=b, num_workers=w, seed=s, target=True, noise_scale=True),
        )
        for b in (32, 64)
        for w in (0, 2)
        for s in (0, 1)
    ]
    written.append(_write(tmp_path, fake_result("infer", status="oom", batch_size=512)))
    ceiling = _write(tmp_path / "ceiling", fake_result(batch_size=32, samples_per_s=2000.0))
    env = tmp_path / "environment.json"
    results.write_json(env, {"fingerprint": FINGERPRINT})
    missing = tmp_path / "train" / "small_cnn" / "bs128_acc1_nw0_seed0.json"
    out = {name: tmp_path / f"{name}.csv" for name in ("summary", "by_point", "curves")}
    argv = ["--results", *map(str, [*written, missing]), "--allow-missing", "--env", str(env)]
    argv += [
        "--foreign-cpu-limit",
        "1",
        "--summary",
        str(out["summary"]),
        "--by-point",
        str(out["by_point"]),
    ]
    argv += ["--curves", str(out["curves"]), "--ceilings", str(ceiling)]
    assert aggregate.main(argv) == 0

    summary = pd.read_csv(out["summary"], dtype=results.column_dtypes())
    assert set(summary.columns) == set(results.column_dtypes())  # every column declared
    assert summary["steps_to_target"].dtype == "Int64" and summary["noisy"].dtype == "boolean"
    assert summary["env_matches_capture"].dtype == "boolean"
    assert summary["frac_of_ceiling"].notna().sum() == 4  # batch 32, train
    curves = pd.read_csv(out["curves"], dtype=results.curve_dtypes())
    assert list(curves.columns) == list(results.curve_dtypes())
