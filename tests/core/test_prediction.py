"""Goodput prediction's math (batchscope.core.prediction)."""

import numpy as np
import pytest

from batchscope.core import prediction as p


def synthetic_steps(s_min, b_noise, batch, seeds, rng, spread=0.05):
    """Seeds' steps to the target at ``batch``, drawn around S_min (1 + B_noise/B)."""
    truth = s_min * (1 + b_noise / batch)
    return truth * rng.lognormal(0.0, spread, size=seeds)


def test_recovers_s_min_and_b_noise_within_their_intervals():
    rng = np.random.default_rng(7)
    s_min, b_noise = 200.0, 90.0
    cal = {
        16: synthetic_steps(s_min, b_noise, 16, 5, rng),
        512: synthetic_steps(s_min, b_noise, 512, 5, rng),
    }
    speeds = {b: [1000.0 * b / (b + 30)] * 3 for b in (16, 32, 64, 128, 256, 512)}
    got = p.predict(cal, speeds)
    low, high = got.b_noise_interval
    assert low <= b_noise <= high
    low, high = got.s_min_interval
    assert low <= s_min <= high
    # the point estimates are close, and the intervals are not vacuous
    assert got.line.b_noise == pytest.approx(b_noise, rel=0.3)
    assert got.b_noise_interval[1] < 10 * b_noise
    # every batch size's true steps lie in its interval
    for row in got.batches:
        lo, hi = row.steps_interval
        assert lo <= s_min * (1 + b_noise / row.batch) <= hi


def test_seconds_count_effective_batch_samples_per_update():
    line = p.fit_line([8, 64], [1000.0, 1000.0 * (1 + 24 / 64) / (1 + 24 / 8)])
    got = p.predict({8: [1000.0], 64: [line.steps(64)]}, {8: [400.0], 32: [800.0], 64: [1600.0]})
    row = got.at(32)
    # steps x samples per update / samples per second
    assert row.seconds == pytest.approx(line.steps(32) * 32 / 800.0)
    assert row.steps_interval is None  # one seed: nothing to resample
    assert "no intervals" in got.notes[0]


def test_no_curve_when_the_larger_batch_needs_more_steps():
    with pytest.raises(p.PredictionError, match="more steps"):
        p.fit_line([16, 256], [500.0, 600.0])


def test_no_curve_when_steps_fall_faster_than_one_over_b():
    with pytest.raises(p.PredictionError, match="S_min"):
        p.fit_line([16, 256], [1600.0, 50.0])


def test_calibration_sizes_per_strategy():
    assert p.calibration_sizes([64, 16, 256, 32], "two_point") == (16, 256)
    assert p.calibration_sizes([32, 32], "two_point") == (32,)
    # noise_scale: one size, the geometric middle sqrt(16·256) = 64, not the arithmetic one
    assert p.calibration_sizes([16, 32, 64, 128, 256], "noise_scale") == (64,)
    assert p.calibration_sizes([4, 8, 32], "noise_scale") == (8,)  # sqrt(128) = 11.3
    # a tie in log distance goes to the larger size, the one with fewer updates
    assert p.calibration_sizes([8, 16, 32, 64], "noise_scale") == (32,)
    with pytest.raises(ValueError, match="unknown calibration"):
        p.calibration_sizes([16, 32], "three_point")


def synthetic_noise(b_noise, n, rng, spread=0.1):
    """n unbiased (|G|², tr Σ) measurements around |G|² = 1, tr Σ = B_noise."""
    g2 = 1.0 + rng.normal(0.0, spread, size=n)
    trace = b_noise * (1.0 + rng.normal(0.0, spread, size=n))
    return g2, trace


def test_noise_scale_calibration_recovers_s_min_and_b_noise_from_one_size():
    rng = np.random.default_rng(11)
    s_min, b_noise = 200.0, 90.0
    cal = {64: synthetic_steps(s_min, b_noise, 64, 5, rng)}
    speeds = {b: [1000.0 * b / (b + 30)] * 3 for b in (16, 32, 64, 128, 256)}
    got = p.predict(cal, speeds, noise=synthetic_noise(b_noise, 60, rng))
    assert got.calibration == (64,)
    low, high = got.b_noise_interval
    assert low <= b_noise <= high and high < 2 * b_noise
    low, high = got.s_min_interval
    assert low <= s_min <= high
    assert got.line.s_min == pytest.approx(s_min, rel=0.15)
    for row in got.batches:  # the ends are 4x from the calibration size, and still inside
        lo, hi = row.steps_interval
        assert lo <= s_min * (1 + b_noise / row.batch) <= hi


def test_noise_scale_calibration_pins_the_curve_through_its_point():
    got = p.predict({50: [300.0]}, {25: [1.0], 50: [1.0]}, noise=([1.0, 1.0], [50.0, 50.0]))
    assert got.line.b_noise == pytest.approx(50.0)
    assert got.line.s_min == pytest.approx(150.0)  # 300 / (1 + 50/50)
    assert got.at(25).steps == pytest.approx(150.0 * 3)


def test_one_calibration_size_without_a_noise_scale_is_one_line_not_a_guess():
    with pytest.raises(p.PredictionError, match="noise scale"):
        p.predict({64: [100.0, 110.0]}, {64: [1.0]})
    with pytest.raises(p.PredictionError, match="noise swamps"):
        p.predict({64: [100.0, 110.0]}, {64: [1.0]}, noise=([-1.0, 0.5], [3.0, 4.0]))


def test_pollux_form_is_the_same_curve_through_the_base_point():
    line = p.Line(s_min=150.0, b_noise=70.0)
    for batch in (8, 40, 300):
        assert p.pollux_steps(batch, 70.0, 16, line.steps(16)) == pytest.approx(line.steps(batch))


def test_cross_check_says_when_the_noise_scale_disagrees():
    cal = {16: [1100.0, 1000.0, 1050.0], 256: [130.0, 120.0, 125.0]}
    got = p.predict(cal, {16: [1.0], 256: [1.0]})
    far = p.NoiseEstimate(
        value=got.line.b_noise * 50, interval=(got.line.b_noise * 40, got.line.b_noise * 60), n=9
    )
    assert "disagree" in p.cross_check(got, far)
    near = p.NoiseEstimate(value=got.line.b_noise, interval=got.b_noise_interval, n=9)
    assert "consistent" in p.cross_check(got, near)


def test_flags():
    flags = p.flags(2048, (16, 256), schedule="cosine decay", batchnorm=True, drift=None)
    assert flags[0].startswith("extrapolated x8")
    one = p.flags(16, (64,), schedule=None, batchnorm=False, drift=None)
    assert one == ["extrapolated x4 beyond the calibration size 64"]
    assert any("schedule" in f for f in flags) and any("BatchNorm" in f for f in flags)
    assert p.flags(64, (16, 256), schedule=None, batchnorm=False, drift=None) == []


def test_drift_flag_only_when_intervals_are_apart():
    early = p.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [10.0, 11.0, 9.0, 10.0])
    late = p.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [100.0, 110.0, 90.0, 100.0])
    assert p.drift_flag(early, late).startswith("noise scale drifts")
    assert p.drift_flag(early, early) is None
