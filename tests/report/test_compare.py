import math

import pandas as pd
import pytest

from batchscope.report import compare
from batchscope.report.compare import environment_diff, metric_diff
from tests.factories import summary_row


def _summary(changes=None):
    changes = changes or {}
    rows = []
    for bs in (32, 64):
        row = {
            "dataset": "fashion_mnist", "batch_size": bs, "samples_per_s": 1000.0,
            "step_time_ms_p50": 50.0, "step_time_ms_iqr": 5.0, "peak_mem_mb": 900.0,
            "final_loss": 0.5, "val_accuracy": 0.80, "val_samples": 10000, "torch_threads": 2,
        }  # fmt: skip
        row.update(changes.get(bs, {}))
        rows.append(summary_row(**row))
    return pd.DataFrame(rows)


def test_identical_folders_have_no_differences():
    assert metric_diff(_summary(), _summary()).empty


def test_throughput_change_is_judged_against_the_standard_error_of_its_windows():
    # windows 995/1000/1005: se = 5/√3 ≈ 2.9 samples/s per run, so ±8 is within twice the
    # combined error (8.2) and +100 is far beyond it, however wide the per-step spread (a
    # step-time IQR of 40% of the median, which read as "one standard error" would hide both)
    def tight(rate):
        return {"samples_per_s": rate, "step_time_ms_iqr": 20.0,
                "samples_per_s_windows": f"{rate - 5};{rate};{rate + 5}"}  # fmt: skip

    base = _summary({32: tight(1000.0)})
    out = metric_diff(base, _summary({32: tight(1008.0)}))
    assert list(out["beyond_noise"]) == [False]
    assert out.iloc[0]["diff_se"] == pytest.approx(math.sqrt(2) * 5 / math.sqrt(3))
    assert list(metric_diff(base, _summary({32: tight(1100.0)}))["beyond_noise"]) == [True]
    # one window: no spread, no standard error
    one = _summary({32: {"samples_per_s_windows": "1000.0"}})
    assert metric_diff(one, _summary({32: {"samples_per_s": 1500.0}}))["beyond_noise"].isna().all()


def test_median_step_time_error_shrinks_with_the_steps_measured():
    # se of a median ≈ 1.2533 · (IQR/1.349)/√n: IQR 5 ms over 10 steps -> 1.47 ms per run,
    # over 1000 steps -> 0.147 ms; a 3 ms move is noise at 10 steps and beyond it at 1000
    few = metric_diff(_summary(), _summary({32: {"step_time_ms_p50": 53.0}}))
    many = _summary({32: {"measured_steps": 1000}, 64: {"measured_steps": 1000}})
    more = metric_diff(many, _summary({32: {"step_time_ms_p50": 53.0, "measured_steps": 1000}}))
    assert list(few["beyond_noise"]) == [False]
    assert list(more["beyond_noise"]) == [True]


def test_printed_numbers_keep_the_digits_the_noise_supports():
    assert compare.round_to_noise(13.350144313434654, 0.12) == "13.35"
    assert compare.round_to_noise(1234.5678, 37.0) == "1235"
    assert compare.round_to_noise(123456.7, 370.0) == "123460"
    assert compare.round_to_noise(917.123456, None) == "917.1"
    out = metric_diff(
        _summary({32: {"samples_per_s": 1000.0}}),
        _summary({32: {"samples_per_s": 1013.350144313434654, "final_loss": 0.512345678}}),
    )
    table = compare.metric_table(out).set_index("metric")
    # windows 990/1000/1030 around each: se ≈ 12 per run, 17 for the difference
    assert table.loc["samples_per_s", "a"] == "1000"
    assert table.loc["samples_per_s", "b"] == "1013"
    assert table.loc["samples_per_s", "change_pct"] == "1.3"
    assert table.loc["samples_per_s", "diff_se"] == "17"
    assert table.loc["final_loss", "b"] == "0.5123"


def test_accuracy_change_is_judged_against_the_binomial_error():
    # se = sqrt(.8 * .2 / 10000) = 0.004 per run -> threshold 2 * 0.0057 = 0.011
    out = metric_diff(
        _summary(), _summary({64: {"val_accuracy": 0.77}, 32: {"val_accuracy": 0.805}})
    )
    beyond = dict(zip(out["batch_size"], out["beyond_noise"], strict=True))
    assert beyond == {32: False, 64: True}


def test_setting_changes_are_named_next_to_the_metric_and_missing_points_listed():
    b = _summary({32: {"samples_per_s": 1900.0, "torch_threads": 1}})
    out = metric_diff(_summary(), b.iloc[:1])
    assert "torch_threads: 2 -> 1" in out.set_index("metric").loc["samples_per_s", "note"]
    assert (out["note"] == "only in a").sum() == 1


def test_memory_and_loss_have_no_noise_model():
    out = metric_diff(_summary(), _summary({32: {"peak_mem_mb": 950.0, "final_loss": 0.6}}))
    assert set(out["metric"]) == {"peak_mem_mb", "final_loss"}
    assert out["beyond_noise"].isna().all()


def test_environment_diff_lists_package_and_blas_changes_only():
    env = {
        "fingerprint": "aaa", "hostname": "x", "blas": {"numpy": {"blas": "openblas"}},
        "pip_freeze": ["numpy==2.4.6", "torch==2.14.1"],
    }  # fmt: skip
    other = {
        "fingerprint": "bbb", "hostname": "y", "blas": {"numpy": {"blas": "mkl"}},
        "pip_freeze": ["numpy==2.4.6", "torch==2.13.0"],
    }  # fmt: skip
    keys = {row["key"]: (row["a"], row["b"]) for row in environment_diff(env, other)}
    assert keys == {
        "fingerprint": ("aaa", "bbb"),
        "blas.numpy.blas": ("openblas", "mkl"),
        "pip.torch": ("2.14.1", "2.13.0"),
    }
