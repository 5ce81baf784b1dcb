"""batchscope.core.pooled: the group's model of log throughput, one variance for its points,
a noisy point's own, rounds as blocks when they drift."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchscope.core import pooled
from batchscope.core import verdict as v

LEVEL = 0.05
MARGIN = 0.05


def drawn(center, cv, n, rng):
    """n runs' throughputs around ``center`` with run-to-run noise of about ``cv``."""
    return list(center * np.exp(rng.normal(0.0, cv, n)))


def test_pooled_variance_is_the_within_points_mean_square():
    points = {"a": [100.0, 110.0, 95.0], "b": [200.0, 190.0], "c": [50.0, 52.0, 49.0, 51.0]}
    f = pooled.fit(points)
    logs = [np.log(points[k]) for k in "abc"]
    ss = sum(((y - y.mean()) ** 2).sum() for y in logs)
    assert f.df == 9 - 3
    assert f.sd_log == pytest.approx(math.sqrt(ss / 6))
    assert f.se(0, 1) == pytest.approx(f.sd_log * math.sqrt(1 / 3 + 1 / 2))
    assert not f.noisy and not f.blocked


def test_a_point_far_noisier_than_the_rest_keeps_its_own_variance():
    rng = np.random.default_rng(3)
    points = {k: drawn(1000, 0.02, 4, rng) for k in "abcde"}
    points["loud"] = [500.0, 1500.0, 900.0, 2000.0]
    f = pooled.fit(points)
    assert f.noisy == ("loud",)
    loud = f.keys.index("loud")
    quiet = [np.log(points[k]) for k in "abcde"]
    pool = sum(((y - y.mean()) ** 2).sum() for y in quiet) / (5 * 3)
    assert f.sd_log == pytest.approx(math.sqrt(pool))  # the pool leaves it out
    own = np.log(points["loud"]).var(ddof=1) / 4
    assert f.cov[loud, loud] == pytest.approx(own)
    assert 3 <= f.pair_df(loud, 0) < f.df  # Welch-Satterthwaite, between its 3 and the pool's
    # with its own variance it cannot be told apart from the others, nor drag them into a tie
    answer = v.decide(points, LEVEL, MARGIN)
    assert "loud" in answer.tie_set


def test_rounds_become_blocks_when_they_drift():
    """A machine that drifts by round: the round effects absorb the drift, the pooled spread
    shrinks and the points are told apart; without drift the blocks are left out."""
    drift = {1: 1.0, 2: 0.8, 3: 1.15, 4: 0.9}
    rng = np.random.default_rng(8)
    points, blocks = {}, {}
    for key, center in (("a", 1000.0), ("b", 960.0), ("c", 700.0)):
        points[key] = [center * drift[r] * math.exp(rng.normal(0, 0.01)) for r in drift]
        blocks[key] = list(drift)
    f = pooled.fit(points, blocks)
    assert f.blocked and f.blocking_p < pooled.BLOCKING_LEVEL
    assert f.sd_log < pooled.fit(points).sd_log / 3
    assert v.decide(points, LEVEL, MARGIN, blocks=blocks).verdict == "separated"
    assert v.decide(points, LEVEL, MARGIN).verdict == "undetermined"  # the drift as noise
    steady = {"a": [1000.0, 1020.0, 980.0, 1010.0], "b": [707.0, 686.0, 714.0, 693.0]}
    assert not pooled.fit(steady, {k: [1, 2, 3, 4] for k in steady}).blocked
