import pandas as pd

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


def test_throughput_change_is_judged_against_the_step_time_spread():
    # spread: IQR/median = 10% -> sigma ~7.4% per run -> 2 * combined ~21%
    small = metric_diff(_summary(), _summary({32: {"samples_per_s": 1100.0}}))
    large = metric_diff(_summary(), _summary({32: {"samples_per_s": 1500.0}}))
    assert list(small["beyond_noise"]) == [False]
    assert list(large["beyond_noise"]) == [True]
    assert large.iloc[0]["change_pct"] == 50.0


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
