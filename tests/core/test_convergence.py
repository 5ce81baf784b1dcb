import math

import numpy as np
import pytest

from batchscope.core import convergence as cv
from batchscope.core import schedules
from batchscope.core.stats import log_mean_ci, mean_ci

# ---------------------------------------------------------------- learning-rate scaling


@pytest.mark.parametrize(
    ("rule", "expected"),
    [("none", 0.1), ("linear", 0.8), ("sqrt", 0.1 * math.sqrt(8))],
)
def test_scaled_lr_rules(rule, expected):
    assert schedules.scaled_lr(0.1, 32, 256, rule) == pytest.approx(expected, rel=1e-12)


def test_scaled_lr_is_the_base_lr_at_the_base_batch_and_shrinks_below_it():
    for rule in schedules.LR_RULES:
        assert schedules.scaled_lr(0.1, 64, 64, rule) == pytest.approx(0.1)
    assert schedules.scaled_lr(0.1, 64, 16, "linear") == pytest.approx(0.025)
    assert schedules.scaled_lr(0.1, 64, 16, "sqrt") == pytest.approx(0.05)


def test_scaled_lr_rejects_unknown_rule_and_bad_values():
    with pytest.raises(ValueError, match="unknown lr scaling rule 'cubic'"):
        schedules.scaled_lr(0.1, 32, 64, "cubic")
    with pytest.raises(ValueError, match="base_batch_size=0"):
        schedules.scaled_lr(0.1, 0, 64, "linear")


def test_epochs_to_steps():
    assert schedules.epochs_to_steps(5, 100) == 500
    assert schedules.epochs_to_steps(0.1, 10) == 1  # 0.1 * 10 is 1.0000000000000002 in floats
    assert schedules.epochs_to_steps(0.01, 10) == 1  # a warm-up asked for is never lost
    assert schedules.epochs_to_steps(0, 10) == 0
    with pytest.raises(ValueError, match="steps_per_epoch >= 1"):
        schedules.epochs_to_steps(1, 0)


def test_warmup_starts_at_start_lr_and_reaches_peak_linearly():
    kw = {"peak_lr": 0.8, "warmup_steps": 4, "total_steps": 20, "start_lr": 0.1}
    values = [schedules.lr_at(s, **kw) for s in range(6)]
    assert values == pytest.approx([0.1, 0.275, 0.45, 0.625, 0.8, 0.8])


def test_warmup_default_start_is_a_tenth_of_peak():
    assert schedules.lr_at(0, peak_lr=0.5, warmup_steps=10, total_steps=20) == pytest.approx(0.05)
    # no warm-up: the first update already uses the peak
    assert schedules.lr_at(0, peak_lr=0.5, warmup_steps=0, total_steps=20) == 0.5


def test_cosine_decays_from_peak_to_zero_at_total_steps():
    kw = {"peak_lr": 1.0, "warmup_steps": 10, "total_steps": 110, "decay": "cosine"}
    assert schedules.lr_at(10, **kw) == pytest.approx(1.0)
    assert schedules.lr_at(60, **kw) == pytest.approx(0.5)  # half way through the decay
    assert schedules.lr_at(109, **kw) > 0
    assert schedules.lr_at(110, **kw) == 0.0
    assert schedules.lr_at(500, **kw) == 0.0
    decaying = [schedules.lr_at(s, **kw) for s in range(10, 111)]
    assert all(a >= b for a, b in zip(decaying, decaying[1:], strict=False))


def test_constant_keeps_peak_after_warmup():
    kw = {"peak_lr": 0.3, "warmup_steps": 5, "total_steps": 50}
    assert {schedules.lr_at(s, **kw) for s in range(5, 80)} == {0.3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"decay": "step"}, "unknown lr decay 'step'"),
        ({"warmup_steps": 30}, "warmup_steps <= total_steps"),
        ({"start_lr": 2.0}, r"start_lr 2.0 must lie in \[0, peak_lr=1.0\]"),
    ],
)
def test_lr_at_rejects_bad_settings(kwargs, message):
    settings = {"peak_lr": 1.0, "warmup_steps": 5, "total_steps": 20, **kwargs}
    with pytest.raises(ValueError, match=message):
        schedules.lr_at(0, **settings)


# ---------------------------------------------------------------- gradient accumulation


def test_accumulation_steps_divides_exactly():
    assert schedules.accumulation_steps(256, 32) == 8
    assert schedules.accumulation_steps(32, 32) == 1
    with pytest.raises(ValueError) as err:
        schedules.accumulation_steps(100, 32)
    message = str(err.value)
    assert "\n" not in message
    assert "100" in message and "32" in message
    with pytest.raises(ValueError, match="micro-batch size 0"):
        schedules.accumulation_steps(64, 0)


# ---------------------------------------------------------------- steps to target


def _curve(accuracies, every=10, batch=32, seconds_per_step=0.5):
    """Per-step rows; val_accuracy only every ``every`` steps, as an evaluating runner logs."""
    rows = []
    for step in range(1, every * len(accuracies) + 1):
        evaluated = step % every == 0
        rows.append(
            {
                "step": step,
                "samples_seen": step * batch,
                "elapsed_s": step * seconds_per_step,
                "loss": 1.0 / step,
                "val_accuracy": accuracies[step // every - 1] if evaluated else None,
                "val_loss": 1.0 - accuracies[step // every - 1] if evaluated else float("nan"),
            }
        )
    return rows


def test_steps_to_target_first_evaluation_that_meets_accuracy():
    result = cv.steps_to_target(_curve([0.5, 0.7, 0.8, 0.79, 0.9]), target_accuracy=0.8)
    assert result.reached
    assert (result.steps, result.samples, result.seconds) == (30, 960, 15.0)
    assert result.metric == "val_accuracy"
    assert result.best == 0.8
    assert (result.budget_steps, result.budget_samples, result.budget_seconds) == (50, 1600, 25.0)


def test_steps_to_target_loss_is_met_from_below_and_skips_nan_rows():
    result = cv.steps_to_target(_curve([0.5, 0.7, 0.8]), target_loss=0.35)
    assert result.reached and result.steps == 20 and result.metric == "val_loss"
    train = cv.steps_to_target(_curve([0.5]), target_loss=0.25, metric="loss")
    assert train.steps == 4


def test_steps_to_target_not_reached():
    result = cv.steps_to_target(_curve([0.5, 0.6]), target_accuracy=0.9)
    assert not result.reached
    assert result.steps is result.samples is result.seconds is None
    assert result.best == 0.6
    assert result.budget_steps == 20
    assert result.value("steps") is None and result.budget("seconds") == 10.0


def test_steps_to_target_needs_exactly_one_target():
    with pytest.raises(ValueError, match="exactly one"):
        cv.steps_to_target(_curve([0.5]))
    with pytest.raises(ValueError, match="exactly one"):
        cv.steps_to_target(_curve([0.5]), target_accuracy=0.5, target_loss=0.5)


def test_mean_ci_half_width_uses_the_tabled_t():
    """The interval over seeds: half-width t_{0.975, n-1} s / sqrt(n), t from printed tables."""
    table = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 30: 2.042}
    for df, t in table.items():
        values = [float(i % 3) for i in range(df + 1)]
        mean, low, high = mean_ci(values)
        half = t * float(np.std(values, ddof=1)) / math.sqrt(df + 1)
        assert (high - low) / 2 == pytest.approx(half, rel=2e-4)
        assert mean == pytest.approx(float(np.mean(values)))


def test_log_mean_ci_is_the_t_interval_of_the_logs_and_stays_above_zero():
    """Seconds to a target of 5, 20 and 50 s: on the seconds the interval reaches below zero; on
    their logarithms it is the geometric mean times/divided by one factor, t from printed tables."""
    values = [5.0, 20.0, 50.0]
    assert mean_ci(values)[1] < 0
    logs = np.log(values)
    half = 4.303 * float(np.std(logs, ddof=1)) / math.sqrt(3)
    centre, low, high = log_mean_ci([*values, 0.0, -1.0, np.nan])  # non-positive: left out
    assert centre == pytest.approx(math.exp(logs.mean()))
    factor = math.exp(half)
    assert (low, high) == pytest.approx((centre / factor, centre * factor), rel=1e-3)
    assert low > 0 and low < centre < high
    assert math.isnan(log_mean_ci([3.0])[1]) and log_mean_ci([3.0])[0] == pytest.approx(3.0)


def _reached(steps):
    return cv.steps_to_target(_curve([0.1] * (steps // 10 - 1) + [0.9]), target_accuracy=0.9)


def test_seed_summary_mean_and_student_t_interval():
    results = [_reached(s) for s in (100, 120, 140)]
    summary = cv.summarize_seeds(results)
    assert summary.n_seeds == summary.n_reached == 3 and summary.n_not_reached == 0
    assert summary.mean == pytest.approx(120.0)
    half = 4.303 * 20.0 / math.sqrt(3)  # t(0.975, 2) · s / √n
    assert summary.ci95 == pytest.approx((120 - half, 120 + half), abs=0.01)
    assert summary.mean_lower_bound == pytest.approx(120.0)
    seconds = cv.summarize_seeds(results, "seconds")
    assert seconds.mean == pytest.approx(60.0)


def test_seed_summary_one_seed_has_no_interval():
    summary = cv.summarize_seeds([_reached(50)])
    assert summary.mean == 50 and summary.ci95 is None


def test_seed_summary_counts_not_reached_seeds():
    missed = cv.steps_to_target(_curve([0.1] * 30), target_accuracy=0.9)  # ran 300 steps
    summary = cv.summarize_seeds([_reached(100), _reached(140), missed])
    assert (summary.n_seeds, summary.n_reached, summary.n_not_reached) == (3, 2, 1)
    assert summary.mean == pytest.approx(120.0)  # over the seeds that reached it
    assert summary.values == (100.0, 140.0)
    # the missed seed enters at its budget: a lower bound on the true mean
    assert summary.mean_lower_bound == pytest.approx((100 + 140 + 300) / 3)
    none = cv.summarize_seeds([missed])
    assert none.mean is None and none.ci95 is None and none.n_not_reached == 1


# ---------------------------------------------------------------- gradient noise scale


def test_noise_estimates_invert_the_expected_norms():
    g2, trace, b_small, b_big = 5.0, 160.0, 8, 64
    small, big = g2 + trace / b_small, g2 + trace / b_big  # E|G_B|² = |G|² + tr Σ / B
    assert cv.noise_estimates(small, big, b_small, b_big) == pytest.approx((g2, trace))
    with pytest.raises(ValueError, match="batch_small < batch_big"):
        cv.noise_estimates(small, big, 64, 64)


def test_noise_scale_recovers_known_ratio_from_synthetic_gradients():
    rng = np.random.default_rng(0)
    dim, b_small, b_big = 20, 8, 64
    mean_grad = np.full(dim, 0.5)  # |G|² = 5
    variances = np.linspace(2.0, 14.0, dim)  # Σ diagonal, tr Σ = 160
    true_b = variances.sum() / (mean_grad @ mean_grad)  # 32
    estimator = cv.GradientNoiseScale(b_small, b_big, ema_decay=0.995)
    for _ in range(1500):
        per_example = mean_grad + rng.standard_normal((b_big, dim)) * np.sqrt(variances)
        big = per_example.mean(axis=0)
        small = per_example[:b_small].mean(axis=0)  # the data-parallel trick: a slice of big
        estimator.update(small @ small, big @ big)
    assert estimator.b_simple == pytest.approx(true_b, rel=0.10)
    assert estimator.grad_sq_norm == pytest.approx(5.0, rel=0.15)
    assert estimator.trace_cov == pytest.approx(160.0, rel=0.15)
    low, high = estimator.interval()
    assert low < estimator.b_simple < high
    assert low < true_b < high
    fields = estimator.summary()
    assert fields["noise_scale_measurements"] == 1500
    assert fields["noise_scale_b_simple"] == estimator.b_simple


def test_noise_scale_is_the_ratio_of_emas_not_the_ema_of_ratios():
    estimator = cv.GradientNoiseScale(1, 2, ema_decay=0.5)
    # (|G|², tr Σ) per update: (1, 10) then (3, 2); pick norms that give exactly those
    for g2, trace in [(1.0, 10.0), (3.0, 2.0)]:
        estimator.update(g2 + trace, g2 + trace / 2)
    ema_g2, ema_trace = 0.5 * (0.5 * 1.0) + 0.5 * 3.0, 0.5 * (0.5 * 10.0) + 0.5 * 2.0
    assert estimator.b_simple == pytest.approx(ema_trace / ema_g2)  # 3.5 / 1.75 = 2
    ema_of_ratios = 0.5 * (0.5 * 10.0) + 0.5 * (2.0 / 3.0)
    assert estimator.b_simple != pytest.approx(ema_of_ratios)
    # bias-corrected averages: weights 1/3 and 2/3 after two updates at β = 0.5
    assert estimator.grad_sq_norm == pytest.approx(1.0 / 3 + 2.0)


def test_noise_scale_before_and_with_negative_signal():
    estimator = cv.GradientNoiseScale(4, 16)
    assert estimator.b_simple is None and estimator.interval() is None
    assert estimator.summary()["noise_scale_b_simple"] is None
    estimator.update(5.0, 0.5)  # |G|² = (16·0.5 − 4·5)/12 = −1: noise swamps the signal
    estimator.update(5.0, 0.5)
    assert estimator.grad_sq_norm == pytest.approx(-1.0) and estimator.b_simple is None
    assert estimator.interval() == (math.inf, math.inf)
