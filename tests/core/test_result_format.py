"""The result format: its JSON Schema, the names and dtypes core.results takes from it, the
documentation that describes it (docs/results.md), and the fake results tests use."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import jsonschema
import pytest

from batchscope.core import paths, results
from tests.factories import FINGERPRINT, NOISE_SCALE_KEYS, TARGET_KEYS, fake_result

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "results.md"


def _section(text: str, heading: str) -> str:
    """The text under the level-2 ``heading`` up to the next level-2 heading."""
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _table_rows(section: str) -> dict[str, str]:
    """name -> type cell of every table row whose first cell is a backticked name."""
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]*?) \|", section, flags=re.MULTILINE)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a key is documented twice"
    return dict(rows)


def _documented_type(field: results.Field) -> str:
    return f"{field.kind} or null" if field.nullable else field.kind


# --- the schema and what core.results takes from it ----------------------------------------


def test_the_schema_is_a_draft_2020_12_schema_of_both_result_forms():
    schema = results.load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    run, too_large = schema["$defs"]["run"], schema["$defs"]["too_large_for_data"]
    assert run["additionalProperties"] is False and too_large["additionalProperties"] is False
    assert set(run["required"]) <= set(run["properties"])
    assert too_large["required"] == ["status", "error"]
    assert too_large["properties"]["status"]["const"] == results.TOO_LARGE_FOR_DATA


def test_dtypes_of_summary_and_curves_columns():
    dtypes = results.column_dtypes()
    assert dtypes["batch_size"] == "int64" and dtypes["steps_run"] == "Int64"
    assert dtypes["samples_per_s"] == "float64" and dtypes["noisy"] == "boolean"
    assert dtypes["samples_per_s_windows"] == "str" and dtypes["pythonhashseed"] == "str"
    assert list(dtypes)[-len(results.SUMMARY_DTYPES) :] == list(results.SUMMARY_DTYPES)
    curves = results.curve_dtypes()
    assert list(curves) == [*results.GRID_KEYS, *results.STEP_COLUMNS]


def test_the_schema_ships_with_the_package():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    assert results.SCHEMA_FILE in package_data["batchscope.core"]
    assert (ROOT / "batchscope" / "core" / results.SCHEMA_FILE).is_file()


# --- validation ------------------------------------------------------------------------------


def test_a_key_the_schema_lacks_is_rejected():
    """What catches a benchmark job that starts writing a key nobody documented."""
    with pytest.raises(results.ResultError, match=r"^result key new_metric: not in the result"):
        results.validate_result(fake_result(new_metric=1.0))


@pytest.mark.parametrize(
    "change, message",
    [
        ({"samples_per_s": "fast"}, "result key samples_per_s: 'fast' is not of type"),
        ({"status": "crashed"}, "result key status: 'crashed' is not one of"),
        ({"samples_per_s_windows": [1.0, None]}, r"result key samples_per_s_windows\[1\]: None"),
        ({"seed": None}, "result key seed: None is not of type 'integer'"),
    ],
)
def test_a_result_that_breaks_the_schema_names_the_key(change, message):
    with pytest.raises(results.ResultError, match=message):
        results.validate_result(fake_result(**change))


def test_the_target_and_noise_scale_keys_come_whole_or_not_at_all():
    for group, flag in ((TARGET_KEYS, "target"), (NOISE_SCALE_KEYS, "noise_scale")):
        result = fake_result(**{flag: True})
        del result[group[-1]]
        with pytest.raises(results.ResultError, match=f"'{group[-1]}' is a dependency of"):
            results.validate_result(result)


def test_a_result_missing_an_always_written_key_is_rejected():
    result = fake_result()
    del result["env_fingerprint"]
    with pytest.raises(results.ResultError, match="^result key env_fingerprint: missing$"):
        results.validate_result(result)


def test_a_trials_too_large_for_data_result_has_exactly_status_and_error():
    results.validate_result({"status": "too_large_for_data", "error": "batch_size 400 gives 1"})
    with pytest.raises(results.ResultError, match="result key error: missing"):
        results.validate_result({"status": "too_large_for_data"})
    with pytest.raises(results.ResultError, match="result key samples_per_s: not in the result"):
        results.validate_result({"status": "too_large_for_data", "error": "x", "samples_per_s": 1})


def test_a_trials_cannot_run_result_has_exactly_status_and_error():
    results.validate_result({"status": results.CANNOT_RUN, "error": "ValueError: Expected more"})
    with pytest.raises(results.ResultError, match="result key error: missing"):
        results.validate_result({"status": "cannot_run"})
    with pytest.raises(results.ResultError, match="result key samples_per_s: not in the result"):
        results.validate_result({"status": "cannot_run", "error": "x", "samples_per_s": 1})
    with pytest.raises(results.ResultError):  # a run's result never says it
        results.validate_result(fake_result(status="cannot_run"))


# --- the fake results tests use ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("status", ["ok", "oom", "diverged"])
@pytest.mark.parametrize("groups", [False, True])
def test_fake_results_follow_the_schema(mode, status, groups):
    result = fake_result(mode, status=status, target=groups, noise_scale=groups)
    results.validate_result(result)
    assert set(TARGET_KEYS) <= set(result) if groups else not set(TARGET_KEYS) & set(result)
    assert result["env_fingerprint"] == FINGERPRINT


def test_fake_results_follow_their_overrides():
    result = fake_result(batch_size=16, accumulation_steps=4, seed=3, steps_to_target=40)
    results.validate_result(result)  # one target key brings its group
    assert result["effective_batch_size"] == 64 and result["pythonhashseed"] == "3"
    assert result["steps_to_target"] == 40 and result["target_metric"] == "val_accuracy"


def test_summary_rows_are_results_or_absent_points(summary_row):
    row = summary_row("infer", batch_size=8)
    assert row["samples_per_s_windows"] == "990.0;1000.0;1030.0"
    assert row["final_loss"] is None and row["batch_size"] == 8
    absent = summary_row(status="failed", batch_size=256, error="boom")
    assert absent == {
        **{key: row[key] for key in results.GRID_KEYS},
        "mode": "train",
        "batch_size": 256,
        "status": "failed",
        "error": "boom",
    }


# --- docs/results.md describes exactly what the schema has ----------------------------------


def test_the_documentation_describes_every_result_key_with_its_type():
    documented = _table_rows(_section(DOC.read_text(), "One run's result"))
    expected = {name: _documented_type(field) for name, field in results.FIELDS.items()}
    assert sorted(set(expected) - set(documented)) == [], "schema keys docs/results.md lacks"
    assert sorted(set(documented) - set(expected)) == [], "documented keys the schema lacks"
    wrong = {k: (documented[k], expected[k]) for k in expected if documented[k] != expected[k]}
    assert wrong == {}, "documented type (doc, schema)"


def test_the_documentation_describes_the_other_forms_and_tables():
    text = DOC.read_text()
    too_large = results.load_schema()["$defs"]["too_large_for_data"]["properties"]
    trial = _table_rows(_section(text, "A largest-batch trial that found the batch too large"))
    assert set(trial) == set(too_large)
    cannot_run = results.load_schema()["$defs"]["cannot_run"]["properties"]
    trial = _table_rows(_section(text, "A largest-batch trial whose batch the model cannot run"))
    assert set(trial) == set(cannot_run)
    steps = _table_rows(_section(text, "The steps CSV"))
    assert list(steps) == list(results.STEP_COLUMNS)
    assert set(_table_rows(_section(text, "summary.csv"))) == set(results.SUMMARY_DTYPES)


@pytest.mark.parametrize("devices", [1, 2, 16])
def test_a_run_path_names_its_devices_and_one_device_keeps_the_old_path(devices):
    grid = {"mode": "train", "model": "m", "batch_size": 8, "accumulation_steps": 1,
            "num_workers": 2, "devices": devices, "seed": 0, "round": 3}  # fmt: skip
    stem = paths.run_stem(grid)
    old = "results/runs/train/m/bs8_acc1_nw2_seed0_round3"
    assert (stem == old) == (devices == 1)
    assert "_dev1_" not in stem
    assert paths.grid_of_path(f"{stem}.json") == grid | {"sequence_length": None}
    assert re.fullmatch(paths.DEVICES_TAG, paths.devices_tag(devices))
    assert paths.devices_of(paths.devices_tag(devices)) == devices
    assert re.fullmatch(paths.DEVICES_TAG, "_dev1") is None  # never a second path for one device
