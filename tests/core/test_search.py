"""The largest-batch search: against fake runners with known limits, and once for real."""

import json
import math
import random

import pytest

from batchscope.core import search
from batchscope.core import spec as spec_module
from batchscope.core.search import TrialResult
from tests.factories import sweep_config

INTERCEPT, SLOPE = 600.0, 2.5  # MB, MB per sample: what a fake device's peak memory is


def budget(limit):
    """The issue's bound on the number of trials."""
    return math.ceil(math.log2(limit)) + 4


def within(found, limit, tolerance=0.05):
    return found is not None and (1 - tolerance) * limit - 1e-9 <= found <= limit


class Wall:
    """A CPU-like fake: fits up to ``limit``; a failure reads the memory held when it failed.

    Peak memory is ``INTERCEPT + SLOPE * b``; the allocator's wall sits half a sample above the
    limit, and a failing trial reports a reading just under it (as the resident set of a
    process whose allocation was refused does).
    """

    def __init__(self, limit, *, readings=True):
        self.limit = limit
        self.readings = readings
        self.calls = []
        self.wall = INTERCEPT + SLOPE * (limit + 0.5)

    def __call__(self, b):
        self.calls.append(b)
        if b <= self.limit:
            return TrialResult(True, INTERCEPT + SLOPE * b if self.readings else None, "ok")
        return TrialResult(False, self.wall - SLOPE / 4 if self.readings else None, "oom")


class Gpu:
    """A GPU-like fake with a known capacity: the margin, not the allocator, sets the limit."""

    def __init__(self, limit, margin=0.1):
        self.capacity = (INTERCEPT + SLOPE * (limit + 0.3)) / (1 - margin)
        self.calls = []

    def __call__(self, b):
        self.calls.append(b)
        peak = INTERCEPT + SLOPE * b
        if peak <= self.capacity:
            return TrialResult(True, peak, "ok")
        return TrialResult(False, None, "oom")


LIMITS = [1, 2, 3, 5, 16, 19, 20, 37, 64, 100, 127, 1000, 1023, 1024, 1025, 4097, 50000, 65535]


@pytest.mark.parametrize("limit", LIMITS)
def test_memory_readings_find_the_limit_within_the_trial_budget(limit):
    fake = Wall(limit)
    found = search.search(fake, cap=1 << 20)
    assert within(found.limit, limit)
    assert len(found.trials) <= budget(limit) if limit > 1 else len(found.trials) == 2
    assert [t.batch_size for t in found.trials] == fake.calls
    assert found.converged and not found.capped
    assert found.first_failure == min(t.batch_size for t in found.trials if not t.fits)
    assert found.grid[-1] == found.limit
    assert any(t.batch_size == found.limit and t.fits for t in found.trials)  # tried, not guessed


def test_every_limit_up_to_2100_keeps_the_budget():
    for limit in range(2, 2101):
        found = search.search(Wall(limit), cap=1 << 20)
        assert within(found.limit, limit), limit
        assert len(found.trials) <= budget(limit), limit


def test_trial_counts_for_some_limits():
    # doubling costs floor(log2 T) + 2 (the failure included); closing in one or two more
    counts = {t: len(search.search(Wall(t), cap=1 << 20).trials) for t in (37, 100, 1000, 1024)}
    assert counts == {37: 9, 100: 10, 1000: 12, 1024: 13}


def test_small_limits_are_found_exactly():
    # up to 18, 5% of the limit is less than one sample: the boundary must be exact
    for limit in range(1, 19):
        found = search.search(Wall(limit))
        assert found.limit == limit
        assert found.first_failure == limit + 1


@pytest.mark.parametrize("limit", [1, 37, 1000, 4097])
def test_capacity_and_margin(limit):
    fake = Gpu(limit, margin=0.1)
    found = search.search(fake, cap=1 << 20, capacity_mb=fake.capacity, margin=0.1)
    assert within(found.limit, limit)
    assert len(found.trials) <= max(budget(limit), 2)
    usable = 0.9 * fake.capacity
    assert found.usable_mb == pytest.approx(usable)
    for t in found.trials:
        # every trial below the capacity ran; only those under the margin fit
        if t.ran:
            assert t.fits == (t.peak_mem_mb <= usable)
            assert t.status == ("ok" if t.fits else "over_margin")
    assert "peak at most 90%" in found.summary


def test_the_margin_rejects_a_run_that_went_over():
    # a device that never fails: only the margin bounds the batch
    def roomy(b):
        return TrialResult(True, 100.0 + 10.0 * b, "ok")

    found = search.search(roomy, capacity_mb=1000.0, margin=0.1)  # 100 + 10 b <= 900
    assert within(found.limit, 80)
    over = [t for t in found.trials if t.status == "over_margin"]
    assert over and all(t.ran and not t.fits and t.peak_mem_mb > 900 for t in over)
    assert found.first_failure == min(t.batch_size for t in over)
    without = search.search(roomy, capacity_mb=1000.0, margin=0.0)  # 100 + 10 b <= 1000
    assert within(without.limit, 90) and without.limit > 80


def test_without_memory_readings_it_bisects():
    counts = {}
    for limit in (5, 37, 64, 100, 1000, 4097):
        found = search.search(Wall(limit, readings=False), cap=1 << 20)
        assert within(found.limit, limit)
        assert {t.phase for t in found.trials} <= {"double", "bisect"}
        counts[limit] = len(found.trials)
        assert counts[limit] <= budget(limit) + 2  # bisection's price: up to two trials more
    assert counts == {5: 6, 37: 11, 64: 12, 100: 12, 1000: 15, 4097: 18}


def test_readings_that_do_not_rise_fall_back_to_bisection():
    def falling(b):  # nonsense readings: memory shrinking as the batch grows
        return TrialResult(b <= 300, 5000.0 - b, "ok" if b <= 300 else "oom")

    found = search.search(falling)
    assert within(found.limit, 300)
    assert found.model is None
    assert {t.phase for t in found.trials} <= {"double", "bisect"}


@pytest.mark.parametrize("seed", range(5))
def test_noisy_readings_still_give_a_size_that_fitted(seed):
    rng = random.Random(seed)
    limit = 700

    def noisy(b):  # readings off by up to 3%; the outcome itself is right
        reading = (INTERCEPT + SLOPE * b) * (1 + rng.uniform(-0.03, 0.03))
        return TrialResult(b <= limit, reading, "ok" if b <= limit else "oom")

    found = search.search(noisy, cap=1 << 20)
    assert within(found.limit, limit)
    assert len(found.trials) <= budget(limit) + 4


def test_non_monotonic_device_never_reports_above_a_failure():
    # fits up to 100, except that 90 fails (a noisy allocator); 95 would fit again
    calls = []

    def flaky(b):
        calls.append(b)
        fits = b <= 100 and b != 90
        return TrialResult(fits, INTERCEPT + SLOPE * b if fits else None, "ok" if fits else "oom")

    found = search.search(flaky)
    failures = [t.batch_size for t in found.trials if not t.fits]
    assert found.limit is not None and found.limit < min(failures)
    assert any(t.batch_size == found.limit and t.fits for t in found.trials)
    # nothing was tried above the smallest failure seen at the time, nor twice
    assert len(calls) == len(set(calls))
    smallest = math.inf
    for b in calls:
        assert b < smallest or b == 128  # 128: doubling's first failure
        if b in failures:
            smallest = min(smallest, b)


def test_batch_one_does_not_fit():
    found = search.search(lambda b: TrialResult(False, None, "oom"))
    assert found.limit is None
    assert found.grid == ()
    assert [t.batch_size for t in found.trials] == [1]
    assert found.summary.startswith("no batch size fits: batch 1 failed (oom)")


class TooSmallBelow(Wall):
    """A model that cannot run below ``smallest`` (BatchNorm on a 1x1 map refuses batch 1),
    for a reason other than memory, and fits up to ``limit``."""

    def __init__(self, smallest, limit):
        super().__init__(limit)
        self.smallest = smallest

    def __call__(self, b):
        if b < self.smallest:
            self.calls.append(b)
            return TrialResult(False, None, "cannot_run", cannot_run=True, reason="ValueError: x")
        return super().__call__(b)


def test_a_size_that_cannot_run_below_every_fit_is_a_floor_not_a_limit():
    fake = TooSmallBelow(2, 100)
    found = search.search(fake)
    assert within(found.limit, 100)  # the search went on above batch 1
    assert found.too_small == 1 and found.first_failure > found.limit
    assert found.grid[0] == 2 and 1 not in found.grid  # the sweep never runs batch 1
    assert found.trials[0].status == "cannot_run" and found.trials[0].reason == "ValueError: x"
    assert "batch 1 failed (cannot_run: ValueError: x), so the grid starts above it" in (
        found.summary
    )
    assert found.to_dict()["too_small"] == 1
    # a floor above 1 too: doubling goes on past every size that cannot run
    found = search.search(TooSmallBelow(5, 100))
    assert found.too_small == 4 and found.grid[0] == 8 and within(found.limit, 100)


def test_a_size_that_cannot_run_above_a_fit_bounds_the_search():
    def trial(b):
        if b >= 64:
            return TrialResult(False, None, "cannot_run", cannot_run=True, reason="index overflow")
        return TrialResult(True, INTERCEPT + SLOPE * b, "ok")

    found = search.search(trial)
    assert found.too_small is None and within(found.limit, 63) and found.first_failure == 64


def test_halving_stops_at_a_size_that_cannot_run():
    fake = TooSmallBelow(3, 1)  # batch 2 cannot run, none from 3 on fits
    found = search.search(fake, start=16)
    assert fake.calls == [16, 8, 4, 2]  # batch 1 is never tried
    assert found.limit is None and found.too_small == 2
    found = search.search(TooSmallBelow(2, 1))
    assert found.limit is None and found.grid == () and found.too_small == 1
    assert found.summary.startswith("no batch size fits: batch 1 failed (cannot_run: ValueError")
    nothing_runs = search.search(TooSmallBelow(10**6, 10**6), cap=64)
    assert nothing_runs.limit is None and nothing_runs.too_small == 64
    assert [t.batch_size for t in nothing_runs.trials] == [1, 2, 4, 8, 16, 32, 64]


def test_a_start_that_fails_halves_down():
    fake = Wall(37)
    found = search.search(fake, start=256)
    assert fake.calls[:4] == [256, 128, 64, 32]
    assert [t.phase for t in found.trials[:4]] == ["double", "halve", "halve", "halve"]
    assert within(found.limit, 37)


def test_the_cap_stops_the_search():
    fake = Wall(10**9)
    found = search.search(fake, cap=1000)
    assert found.limit == 1000 and found.capped
    assert fake.calls == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    assert "is the cap" in found.summary
    assert found.grid == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
    capped = search.search(Wall(10**9), cap=65536)
    assert capped.limit == 65536 and len(capped.trials) == 17


def test_a_cap_that_fails_is_closed_in_on():
    found = search.search(Wall(700), cap=1000)
    assert not found.capped and within(found.limit, 700)


def test_out_of_trials_keeps_what_it_has():
    found = search.search(Wall(1000), max_trials=5)
    assert found.limit == 16 and len(found.trials) == 5
    assert not found.converged
    assert found.summary.endswith("(stopped: out of trials)")
    closing = search.search(Wall(1000, readings=False), max_trials=13)
    assert closing.limit is not None and closing.first_failure is not None
    assert "out of trials" in closing.summary


def test_grid():
    assert search.grid(1000) == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
    assert search.grid(64) == (1, 2, 4, 8, 16, 32, 64)
    assert search.grid(1) == (1,)
    assert search.grid(100, smallest=16) == (16, 32, 64, 100)
    assert search.grid(None) == ()


def test_result_is_plain_json():
    found = search.search(Wall(100))
    out = json.loads(json.dumps(found.to_dict()))
    assert out["limit"] == found.limit and out["trial_count"] == len(found.trials)
    assert [p["batch_size"] for p in out["curve"]] == sorted(p["batch_size"] for p in out["curve"])
    assert out["memory_model"]["slope_mb"] == pytest.approx(SLOPE)


@pytest.mark.parametrize(
    "kwargs", [{"start": 0}, {"start": 8, "cap": 4}, {"margin": 1.0}, {"tolerance": 0.0}]
)
def test_impossible_settings(kwargs):
    with pytest.raises(search.SearchError):
        search.search(Wall(10), **kwargs)


# --- maxbatch: the command each trial runs ---------------------------------------------------


def test_the_search_spec_caps_the_search_where_the_sweep_could_still_measure():
    config = sweep_config(
        dataset={"name": "synthetic", "num_samples": 600}, batch_sizes="auto", num_workers=[0, 2]
    )
    search_spec = spec_module.build_search(config, mode="train", model="small_cnn")
    # 600 samples, 2 warm-up steps: a batch of 200 still leaves one step to measure
    assert search_spec.cap == 200
    assert search_spec.run.kind == "trial" and search_spec.run.num_workers == 2
    again = spec_module.SearchSpec.from_dict(json.loads(search_spec.to_json()))
    assert again == search_spec


# --- for real: every trial a bench process, the CPU allocator under a budget ----------------
