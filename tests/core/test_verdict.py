"""batchscope.core.verdict: multiple comparisons with the best, against
independent references and on fake runs whose truth is known; picking and the document."""

from __future__ import annotations

import math

import jsonschema
import numpy as np
import pytest
from scipy import stats as sps

from batchscope.core import recommendation
from batchscope.core import verdict as v

LEVEL = 0.05
MARGIN = 0.05


def drawn(center, cv, n, rng):
    """n runs' throughputs around ``center`` with run-to-run noise of about ``cv``."""
    return list(center * np.exp(rng.normal(0.0, cv, n)))


def exact(center, sd_log, n):
    """n throughputs whose logs have mean log(center) and sample sd exactly ``sd_log``."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(center * np.exp(sd_log * z))


# ------------------------------------------------------------------ references for scipy's t


def test_scipy_t_quantile_against_closed_forms():
    """The t quantiles the verdict takes from scipy, against forms derived by hand: df 1 is
    Cauchy's tan(pi (p - 1/2)); df 2 is (2p - 1) / sqrt(2 p (1 - p))."""
    for p in (0.6, 0.8, 0.95, 0.975, 0.999):
        assert sps.t.ppf(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)
        assert sps.t.ppf(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)


def monte_carlo_max_t(corr, df, level, draws=400_000, seed=5):
    """The 1 - level quantile of max_j T_j, T = Z / sqrt(chi2_df / df), Z ~ N(0, corr): numpy
    draws, independent of scipy's multivariate t integration."""
    rng = np.random.default_rng(seed)
    z = rng.multivariate_normal(np.zeros(len(corr)), corr, size=draws)
    s = np.sqrt(rng.chisquare(df, size=draws) / df)
    return float(np.quantile((z / s[:, None]).max(axis=1), 1 - level))


@pytest.mark.parametrize(
    "corr, df, level",
    [
        (np.full((3, 3), 0.5) + 0.5 * np.eye(3), 10, 0.05),  # balanced Dunnett, 3 comparisons
        (np.full((7, 7), 0.5) + 0.5 * np.eye(7), 16, 0.05),  # the default sweep's group of 8
        (np.array([[1.0, 0.3, 0.2], [0.3, 1.0, 0.6], [0.2, 0.6, 1.0]]), 7.5, 0.01),
    ],
)
def test_dunnett_critical_value_against_monte_carlo(corr, df, level):
    assert v.dunnett_critical(corr, df, level) == pytest.approx(
        monte_carlo_max_t(corr, df, level), abs=0.03
    )


def test_dunnett_of_one_comparison_is_the_t_quantile():
    assert v.dunnett_critical(np.ones((1, 1)), 6, 0.05) == pytest.approx(sps.t.ppf(0.95, 6))


# ------------------------------------------------------------------ selection of the best


def test_clearly_separated():
    rng = np.random.default_rng(1)
    points = {"fast": drawn(2000, 0.05, 3, rng), "slow": drawn(1000, 0.05, 3, rng)}
    result = v.decide(points, LEVEL, MARGIN)
    assert result.verdict == "separated" and result.tie_set == ("fast",)
    # Hsu's constrained intervals: the best's ratio to the others is at least 1, the other's
    # at most 1
    assert result.ratio_low["fast"] == 1.0 < result.ratio_high["fast"]
    assert result.ratio_high["slow"] == 1.0 > result.ratio_low["slow"]


def test_close_points_with_a_tight_spread_are_equivalent():
    points = {"a": exact(1000, 0.004, 4), "b": exact(995, 0.004, 4), "c": exact(600, 0.004, 4)}
    result = v.decide(points, LEVEL, MARGIN)
    assert result.verdict == "equivalent"
    assert set(result.tie_set) == {"a", "b"} and set(result.within_margin) == {"a", "b"}
    assert result.ratio_low["b"] > 1 / (1 + MARGIN)


def test_no_difference_found_is_not_equivalence():
    """Two points with the same median but a spread too large to show them within 5%."""
    points = {"a": exact(1000, 0.15, 3), "b": exact(1000, 0.15, 3)}
    result = v.decide(points, LEVEL, MARGIN)
    assert result.verdict == "undetermined" and set(result.tie_set) == {"a", "b"}
    assert result.within_margin == ()
    assert result.detectable_diff_frac > MARGIN
    settle = result.runs_to_settle[result.tie_set[1]]
    assert settle is not None and settle > 3


def test_one_run_per_point_is_undetermined_without_a_spread():
    result = v.decide({"a": [1000.0], "b": [990.0], "c": [400.0]}, LEVEL, MARGIN)
    assert result.verdict == "undetermined" and result.tie_set == ("a", "b", "c")
    assert result.detectable_diff_frac is None and result.ratio_low["a"] is None


def test_one_point_is_separated():
    result = v.decide({"a": [1000.0, 1010.0]}, LEVEL, MARGIN)
    assert result.verdict == "separated" and result.ratio["a"] is None


def test_a_point_whose_own_runs_agree_is_not_eliminated_for_it():
    """Issue 23's race: a point whose two runs agreed to 0.6% was eliminated while a slower
    one stayed. With the spread pooled, the point's own agreement buys it nothing either way:
    the order of the estimates decides, the faster point is never out while the slower is in."""
    points = {
        "b64_w1": [2811 * 0.997, 2811 * 1.003],
        "b64_w0": [2727 * 0.9, 2727 * 1.1],
        "b256_w1": [3000 * 0.93, 3000 * 1.07],
        "b4_w1": [1100 * 0.95, 1100 * 1.05],
    }
    result = v.decide(points, LEVEL, MARGIN)
    assert "b64_w1" in result.tie_set and "b4_w1" not in result.tie_set
    if "b64_w0" in result.tie_set:
        assert "b64_w1" in result.tie_set


def test_twice_as_slow_with_a_wide_spread_of_its_own_is_not_tied():
    """Issue 23's reruns tied training at batch 4 (988 and 926 samples/s, its runs 17% apart)
    with batch 256 and 64 at about 1950; the pooled spread tells a 2x difference apart."""
    rng = np.random.default_rng(23)
    points = {
        "b4_w0": [988.0, 880.0, 1040.0],
        "b256_w1": drawn(1954, 0.04, 3, rng),
        "b64_w1": drawn(1923, 0.04, 3, rng),
        "b64_w0": drawn(1700, 0.04, 3, rng),
        "b4_w1": drawn(950, 0.04, 3, rng),
        "b256_w0": drawn(1800, 0.04, 3, rng),
    }
    result = v.decide(points, LEVEL, MARGIN)
    assert "b4_w0" not in result.tie_set and "b4_w1" not in result.tie_set


def test_the_best_is_in_the_tie_set_at_least_at_the_stated_rate():
    """The least favourable configuration (the best 5% ahead, the rest equal): the true best is
    left out of the tie set in at most about ``level`` of the sweeps."""
    rng = np.random.default_rng(2024)
    missed = 0
    trials = 300
    for _ in range(trials):
        points = {"best": drawn(1050, 0.05, 3, rng)}
        points.update({f"p{i}": drawn(1000, 0.05, 3, rng) for i in range(4)})
        missed += "best" not in v.decide(points, LEVEL, MARGIN).tie_set
    assert missed / trials <= LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / trials)


def test_one_noisy_point_does_not_lend_its_few_degrees_of_freedom_to_the_others():
    """A point whose two runs are 3x apart is flagged noisy and compared on its own variance
    (1 degree of freedom). The other points' comparisons rest on the pool (18 degrees of
    freedom): a 25% gap between two tight points is told apart, as it is without the noisy
    point. Taking the smallest degrees of freedom of every comparison for every critical
    value (a t with 1 degree of freedom) tied the whole group."""
    tight = {"best": exact(1000, 0.03, 4), "slower": exact(800, 0.03, 4)}
    tight.update({f"p{i}": exact(700, 0.03, 4) for i in range(4)})
    without = v.decide(tight, LEVEL, MARGIN)
    with_noisy = v.decide({**tight, "noisy": [300.0, 900.0]}, LEVEL, MARGIN)
    assert with_noisy.model["noisy"] == ["noisy"]
    assert "slower" not in without.tie_set
    assert "slower" not in with_noisy.tie_set
    assert "noisy" in with_noisy.tie_set  # its own two runs cannot place it


def test_the_best_is_in_the_tie_set_at_the_stated_rate_beside_a_noisy_point():
    """The same least favourable configuration with a sixth point far noisier than the rest
    (flagged, compared on its own variance): the union bound keeps the rate."""
    rng = np.random.default_rng(2025)
    missed = 0
    trials = 300
    for _ in range(trials):
        points = {"best": drawn(1050, 0.05, 3, rng), "noisy": drawn(1000, 0.6, 3, rng)}
        points.update({f"p{i}": drawn(1000, 0.05, 3, rng) for i in range(4)})
        missed += "best" not in v.decide(points, LEVEL, MARGIN).tie_set
    assert missed / trials <= LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / trials)


def test_an_excluded_point_is_never_faster_than_a_member_with_as_many_runs():
    """Coherence: a point outside the tie set has a lower estimate than every member whose
    comparisons are at least as precise (as many runs), here on race-like unbalanced runs."""
    rng = np.random.default_rng(77)
    for _ in range(25):
        centers = rng.uniform(500, 1000, 5)
        points = {i: drawn(c, 0.1, int(rng.choice([2, 3, 5])), rng) for i, c in enumerate(centers)}
        result = v.decide(points, LEVEL, MARGIN)
        for out in set(points) - set(result.tie_set):
            for member in result.tie_set:
                if len(points[member]) >= len(points[out]):
                    assert result.estimate[member] > result.estimate[out]


def test_detectable_difference_shrinks_with_more_runs():
    found = [
        v.decide({k: exact(c, 0.1, n) for k, c in (("a", 1000), ("b", 990), ("c", 980))},
                 LEVEL, MARGIN).detectable_diff_frac
        for n in (3, 6, 12)
    ]  # fmt: skip
    assert found[0] > found[1] > found[2] > 0


def test_runs_to_settle_do_settle():
    """Measured with the runs it asks for (and the same spread), an undetermined pair is
    separated or shown within the margin."""
    points = {"a": exact(1000, 0.08, 3), "b": exact(930, 0.08, 3)}
    result = v.decide(points, LEVEL, MARGIN)
    assert result.verdict == "undetermined"
    n = result.runs_to_settle["b"]
    again = v.decide({"a": exact(1000, 0.08, n), "b": exact(930, 0.08, n)}, LEVEL, MARGIN)
    assert again.verdict in ("separated", "equivalent")


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        v.decide({}, LEVEL, MARGIN)
    with pytest.raises(ValueError):
        v.decide({"A": [1.0, 2.0], "B": [1.0, 3.0]}, 1.5, MARGIN)
    with pytest.raises(ValueError):
        v.decide({"A": [1.0, 2.0]}, LEVEL, -0.1)
    with pytest.raises(ValueError):
        v.decide({"A": [1.0, -2.0]}, LEVEL, MARGIN)


# ------------------------------------------------------------------ the race's levels


def test_the_looks_and_the_final_analysis_spend_the_level_once():
    design = v.Design(LEVEL, MARGIN, "race", first_look=2, max_rounds=8)
    looks = [design.look_level(r) for r in range(2, 8)]
    assert sum(looks) == pytest.approx(v.LOOK_SHARE * LEVEL)
    assert sum(looks) + design.final_level(8) == pytest.approx(LEVEL)
    # a group that stopped after round 4 spent the looks after rounds 2 and 3
    assert design.final_level(4) == pytest.approx(LEVEL - looks[0] - looks[1])
    assert design.final_level(2) == LEVEL  # no look before its last round
    assert not design.looks_after(1) and not design.looks_after(8)
    with pytest.raises(ValueError):
        design.look_level(8)
    full = v.Design(LEVEL, MARGIN, "full", first_look=3, max_rounds=8)
    assert full.last_round == 3 and not full.looks_after(2) and full.final_level(3) == LEVEL


def test_a_look_eliminates_what_the_final_analysis_would_also_exclude():
    rng = np.random.default_rng(9)
    points = {
        "a": drawn(2000, 0.1, 3, rng),
        "b": drawn(1900, 0.1, 3, rng),
        "c": drawn(700, 0.1, 3, rng),
    }
    design = v.Design(LEVEL, MARGIN, "race", first_look=2, max_rounds=8)
    found = v.look(points, design.look_level(3), MARGIN)
    assert found.eliminated == {"c"} and not found.settled
    assert "c" not in v.decide(points, LEVEL, MARGIN, level_final=design.final_level(3)).tie_set
    separated = v.look({"a": exact(2000, 0.01, 3), "c": exact(700, 0.01, 3)}, 0.001, MARGIN)
    assert separated.settled and separated.state == "separated"


def test_an_eliminated_point_stays_in_the_model_but_never_returns_to_the_tie_set():
    # c, eliminated after round 3 on its 3 runs, is 12% slower than a: with so few runs its
    # interval reaches the best, so the plain MCB at the final level would take it back
    points = {"a": exact(2000, 0.1, 8), "b": exact(1500, 0.1, 8), "c": exact(1760, 0.1, 3)}
    plain = v.decide(points, LEVEL, MARGIN, level_final=0.039)
    assert "c" in plain.tie_set
    raced = v.decide(points, LEVEL, MARGIN, level_final=0.039, eliminated=["c"])
    assert raced.tie_set == ("a",) and raced.verdict == "separated" and raced.leader == "a"
    assert raced.model == plain.model  # its runs still pool into the spread
    # with a close second point d, c's 3 runs no longer set the detectable difference
    close = {**points, "d": exact(1950, 0.1, 8)}
    plain_close = v.decide(close, LEVEL, MARGIN, level_final=0.039)
    raced_close = v.decide(close, LEVEL, MARGIN, level_final=0.039, eliminated=["c"])
    assert set(plain_close.tie_set) == {"a", "c", "d"} and raced_close.tie_set == ("a", "d")
    assert raced_close.detectable_diff_frac < plain_close.detectable_diff_frac
    # a look does the same: a group kept open only by a point an earlier look eliminated stops
    assert v.look(points, 0.0036, MARGIN, eliminated=["c"]).settled
    assert not v.look(points, 0.0036, MARGIN).settled
    # were every candidate eliminated, the tie set would not be empty: the plain one stands
    everyone = v.decide(points, LEVEL, MARGIN, level_final=0.039, eliminated=["a", "b", "c"])
    assert everyone.tie_set == plain.tie_set


# ------------------------------------------------------------------ picking and the document

ROWS = {
    "a": {"batch_size": 256, "num_workers": 4, "peak_mem_mb": 3000.0},
    "b": {"batch_size": 128, "num_workers": 4, "peak_mem_mb": 1800.0},
    "c": {"batch_size": 128, "num_workers": 2, "peak_mem_mb": 1800.0},
    "d": {"batch_size": 64, "num_workers": 0, "peak_mem_mb": None},
}


def test_pick_least_memory_then_fewest_workers_then_highest_median():
    rows = {k: {**r, "median_samples_per_s": 1000.0} for k, r in ROWS.items()}
    choice, reason = recommendation.pick(("a", "b", "d"), rows)
    assert choice == "b" and "peak memory" in reason and reason.endswith(".")
    choice, reason = recommendation.pick(("a", "b", "c", "d"), rows)  # b, c tie on memory
    assert choice == "c" and "workers" in reason
    rows["c"]["num_workers"] = 4
    rows["c"]["median_samples_per_s"] = 1010.0
    choice, reason = recommendation.pick(("a", "b", "c"), rows)
    assert choice == "c" and "median" in reason
    assert recommendation.pick(("d",), rows)[0] == "d"
    assert "only point" in recommendation.pick(("d",), rows)[1]
    choice, _ = recommendation.pick(("b", "c"), rows, rule=("-batch_size",))  # tie-set order
    assert choice == "b"


CASES = {
    # a (largest memory) is clearly fastest
    "separated": {"a": exact(2000, 0.01, 4), "b": exact(1000, 0.01, 4)},
    # a, b, c within 1% with a tight spread: equivalent, b/c have less memory than a
    "equivalent": {k: exact(c, 0.004, 4) for k, c in (("a", 1000), ("b", 998), ("c", 996))},
    # a and b could both be best, not shown within 5%: the best estimate, a
    "undetermined": {"a": exact(1000, 0.1, 3), "b": exact(950, 0.1, 3), "d": exact(300, 0.1, 3)},
}


def test_the_pick_follows_the_state():
    rows = {k: {**r, "median_samples_per_s": 1.0} for k, r in ROWS.items()}
    picks = {}
    for state, points in CASES.items():
        result = v.decide(points, LEVEL, MARGIN)
        assert result.verdict == state
        picks[state] = recommendation.choose(result, {k: rows[k] for k in points})[0]
    assert picks == {"separated": "a", "equivalent": "c", "undetermined": "a"}
    # undetermined, but the best estimate and another point shown within the margin: the rule
    # picks among those two only (c is not shown within it)
    within = v.decide(
        {"a": exact(1000, 0.004, 6), "b": exact(999, 0.004, 6), "c": exact(960, 0.03, 6)},
        LEVEL,
        MARGIN,
    )
    if within.verdict == "undetermined" and set(within.within_margin) == {"a", "b"}:
        assert recommendation.choose(within, rows)[0] == "b"


def _answers():
    answers = {}
    for state, points in CASES.items():
        result = v.decide(points, LEVEL, MARGIN)
        spent = {k: {"rounds": len(p), "runs_per_round": 1, "device_s": 4.0 * len(p)}
                 for k, p in points.items()}  # fmt: skip
        answers[state] = recommendation.to_answer(
            result, ROWS, mode="train", model="small_cnn", accumulation_steps=1, spent=spent
        )
    return answers


def test_answers_validate_against_the_schema():
    schema = recommendation.load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    answers = _answers()
    for answer in answers.values():
        jsonschema.validate(answer, schema["$defs"]["answer"] | {"$defs": schema["$defs"]})
    document = recommendation.to_document(list(answers.values()), LEVEL)
    jsonschema.validate(document, schema)
    undetermined = answers["undetermined"]
    assert undetermined["reason"].startswith("Undetermined:")
    assert undetermined["to_settle"]["rounds"] > 3 and undetermined["to_settle"]["device_s"] > 0
    assert answers["separated"]["to_settle"] == {"rounds": None, "device_s": None}
    assert answers["separated"]["device_s"] == pytest.approx(32.0)
    assert [m["within_margin"] for m in answers["equivalent"]["tie_set"]] == [True] * 3


@pytest.mark.parametrize(
    "damage",
    [
        lambda a: a.update(verdict="tie"),
        lambda a: a.pop("reason"),
        lambda a: a["pick"].update(extra=1),
        lambda a: a["tie_set"][0].update(n_rounds=0),
        lambda a: a.update(tie_set=[]),
        lambda a: a["to_settle"].pop("rounds"),
    ],
)
def test_schema_refuses_a_damaged_answer(damage):
    schema = recommendation.load_schema()
    answer = _answers()["undetermined"]
    damage(answer)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(recommendation.to_document([answer], LEVEL), schema)
