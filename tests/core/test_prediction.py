"""Goodput prediction's math (batchscope.core.prediction)."""

import numpy as np
import pytest

from batchscope.core import prediction as p
from batchscope.core import prediction_checks as checks
from tests.factories import make_spec


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
    assert row.seconds_interval is None  # and one run per batch size: no spread either
    assert "no steps interval" in got.notes[0]
    assert "no interval on the time per update" in got.notes[1]


def test_time_per_update_comes_from_the_pooled_throughput_model():
    """Three runs per batch size; batch 32's runs agree exactly, the others spread by ~10%. The
    time per update uses one variance pooled over the batch sizes (Student t on its df), so
    batch 32 gets an interval as wide as its neighbours', not a zero-width one from its own
    runs; samples_per_s is the geometric mean of the runs."""
    from scipy import stats

    speeds = {8: [400.0, 440.0, 360.0], 32: [800.0, 800.0, 800.0], 64: [1500.0, 1650.0, 1350.0]}
    got = p.predict({8: [1000.0], 64: [200.0]}, speeds, resamples=20000)
    logs = {b: np.log(v) for b, v in speeds.items()}
    sse = sum(((y - y.mean()) ** 2).sum() for y in logs.values())
    df = sum(len(y) - 1 for y in logs.values())
    half = stats.t.ppf(0.975, df) * np.sqrt(sse / df / 3)
    for b, y in logs.items():
        row = got.at(b)
        assert row.samples_per_s == pytest.approx(np.exp(y.mean()))
        assert row.update_s == pytest.approx(b / np.exp(y.mean()))
        # the t interval of the mean log throughput, mapped to seconds per update
        low, high = b / np.exp(y.mean() + half), b / np.exp(y.mean() - half)
        assert row.update_s_interval == pytest.approx((low, high), rel=0.03)
        # one seed per calibration size: the steps are fixed, the seconds carry the throughput's
        # interval alone
        assert row.seconds_interval == pytest.approx(
            tuple(row.steps * t for t in row.update_s_interval), rel=1e-9
        )
    assert got.update_df == df


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
        carried = checks.pollux_steps(batch, 70.0, 16, line.steps(16))
        assert carried == pytest.approx(line.steps(batch))


def test_cross_check_says_when_the_noise_scale_disagrees():
    cal = {16: [1100.0, 1000.0, 1050.0], 256: [130.0, 120.0, 125.0]}
    got = p.predict(cal, {16: [1.0], 256: [1.0]})
    far = checks.NoiseEstimate(
        value=got.line.b_noise * 50, interval=(got.line.b_noise * 40, got.line.b_noise * 60), n=9
    )
    assert "disagree" in checks.cross_check(got, "two_point", far)
    near = checks.NoiseEstimate(value=got.line.b_noise, interval=got.b_noise_interval, n=9)
    assert "consistent" in checks.cross_check(got, "two_point", near)
    assert "no noise scale" in checks.cross_check(got, "corner", None)


def test_late_noise_pins_a_corner_through_its_one_size():
    grid = [16, 32, 64, 128, 256]
    # the third quartile of the log range: near or above the corner, where B_simple is measured
    # best; on three sizes the middle one (64 and 256 tie at 128, towards the middle)
    assert p.calibration_sizes(grid, "late_noise") == (128,)
    assert p.calibration_sizes([16, 64, 256], "late_noise") == (64,)
    speeds = {b: [1.0] for b in grid}
    # below the critical batch: the calibration size scales perfectly, E = 140 * 64 samples
    got = p.predict({64: [140.0]}, speeds, noise=([1.0, 1.0], [128.0, 128.0]), shape="corner")
    assert got.line.b_noise == pytest.approx(128.0)
    assert got.line.s_min == pytest.approx(140.0 * 64 / 128)
    assert got.at(16).steps == pytest.approx(140.0 * 4)
    assert got.at(256).steps == got.at(128).steps == pytest.approx(70.0)
    # above it: the calibration size's steps are S_min, and smaller sizes scale from B_noise
    got = p.predict({64: [50.0]}, speeds, noise=([1.0], [32.0]), shape="corner")
    assert got.line.s_min == pytest.approx(50.0)
    assert got.at(256).steps == pytest.approx(50.0)
    assert got.at(16).steps == pytest.approx(50.0 * 32 / 16)
    assert "near the target" in checks.cross_check(got, "late_noise", None)
    assert "early in training" in checks.cross_check(got, "noise_scale", None)


def test_only_noise_scale_needs_its_short_runs_to_measure_noise():
    assert p.short_runs_measure_noise("noise_scale")
    for strategy in ("corner", "two_point", "late_noise"):
        assert not p.short_runs_measure_noise(strategy)


def test_flags():
    flags = checks.flags(2048, (16, 256), schedule="cosine decay", batchnorm=True, drift=None)
    assert flags[0].startswith("extrapolated x8")
    one = checks.flags(16, (64,), schedule=None, batchnorm=False, drift=None)
    assert one == ["extrapolated x4 beyond the calibration size 64"]
    assert any("schedule" in f for f in flags) and any("BatchNorm" in f for f in flags)
    assert checks.flags(64, (16, 256), schedule=None, batchnorm=False, drift=None) == []


def test_drift_flag_only_when_intervals_are_apart():
    early = checks.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [10.0, 11.0, 9.0, 10.0])
    late = checks.pooled_noise_scale([1.0, 1.1, 0.9, 1.0], [100.0, 110.0, 90.0, 100.0])
    assert checks.drift_flag(early, late).startswith("noise scale drifts")
    assert checks.drift_flag(early, early) is None


def test_time_tie_set_keeps_what_the_pooled_test_cannot_tell_from_the_fastest():
    rng = np.random.default_rng(3)
    # batch 64 and 128 within 2% of each other, batch 16 twice as slow, runs spread by ~5%
    truth = {16: 20.0, 64: 10.0, 128: 10.2}
    seconds = {b: list(t * rng.lognormal(0.0, 0.05, size=3)) for b, t in truth.items()}
    tie = checks.time_tie_set(seconds)
    assert set(tie) == {64, 128} and 16 not in tie
    # fastest estimate first
    means = {b: np.exp(np.mean(np.log(v))) for b, v in seconds.items()}
    assert tie[0] == min((64, 128), key=means.get)
    # one run per batch size: no spread to test with, so nothing is excluded
    assert set(checks.time_tie_set({b: v[:1] for b, v in seconds.items()})) == {16, 64, 128}


def test_corner_calibrates_on_the_log_quartiles_and_recovers_a_corner():
    grid = [16, 32, 64, 128, 256]
    assert p.calibration_sizes(grid, "corner") == (32, 128)
    # on three sizes the quartiles fall on the middle one: the ends instead
    assert p.calibration_sizes([16, 64, 256], "corner") == (16, 256)
    assert p.calibration_sizes([8, 16], "corner") == (8, 16)
    truth = p.Line(s_min=80.0, b_noise=120.0, shape="corner")
    cal = {b: [float(truth.steps(b))] * 3 for b in (32, 128)}
    got = p.predict(cal, {b: [1000.0, 1010.0] for b in grid}, shape="corner")
    assert (got.line.s_min, got.line.b_noise) == pytest.approx((80.0, 120.0))
    # perfect scaling below the corner (samples constant), flat above it
    assert got.at(16).steps == pytest.approx(80.0 * 120 / 16)
    assert got.at(256).steps == pytest.approx(80.0)
    # the hyperbola through the same two points misses the flat end by half
    hyperbola = p.predict(cal, {b: [1000.0, 1010.0] for b in grid})
    assert hyperbola.at(256).steps < 0.6 * got.at(256).steps


def test_corner_without_a_corner_in_range_extrapolates_perfect_scaling():
    # both calibration sizes scale perfectly (same samples): the corner is at the larger one
    line = p.fit_corner([32, 128], [400.0, 100.0])
    assert line.steps(32) == pytest.approx(400.0) and line.steps(256) == pytest.approx(100.0)
    with pytest.raises(p.PredictionError, match="more steps"):
        p.fit_corner([32, 128], [100.0, 120.0])


@pytest.mark.parametrize("strategy", ["corner", "late_noise", "noise_scale"])
def test_a_short_run_measures_the_throughput_only_unless_its_noise_scale_is_used(strategy):
    train = {
        "target_accuracy": 0.8, "eval_every_samples": 64, "stop_at_target": True, "predict": True,
        "predict_steps": 40, "predict_calibration": strategy, "noise_scale_every_steps": 3,
    }  # fmt: skip
    full = make_spec(modes=["train"], train=train, measure={"diagnostic_steps": 4})
    short = make_spec(modes=["train"], train=train, measure={"diagnostic_steps": 4}, short=True)
    assert not full.throughput_run and full.train.validate and full.max_steps is None
    assert short.max_steps == 40
    if strategy == "noise_scale":  # its updates measure the noise scale that pins B_noise
        assert short.train.noise_scale_every_steps == 3 and not short.throughput_run
        assert short.train.eval_every_samples is None and not short.train.stop_at_target
    else:  # ends once its windows are full: no target, validation, noise scale or diagnostics
        assert short.throughput_run and not short.train.validate
        assert short.train.noise_scale_every_steps is None
        assert short.measure.diagnostic_steps == 0 and full.measure.diagnostic_steps == 4
