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


def test_calibration_is_the_smallest_and_largest():
    assert p.calibration_sizes([64, 16, 256, 32]) == (16, 256)
    assert p.calibration_sizes([32, 32]) == (32,)


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
    assert any("schedule" in f for f in flags) and any("BatchNorm" in f for f in flags)
    assert p.flags(64, (16, 256), schedule=None, batchnorm=False, drift=None) == []


def test_drift_flag_only_when_intervals_are_apart():
    early = p.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [10.0, 11.0, 9.0, 10.0])
    late = p.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [100.0, 110.0, 90.0, 100.0])
    assert p.drift_flag(early, late).startswith("noise scale drifts")
    assert p.drift_flag(early, early) is None
