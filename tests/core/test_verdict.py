"""batchscope.core.verdict: the maths against references, the verdict on fake per-round results."""

from __future__ import annotations

import math

import jsonschema
import numpy as np
import pytest

from batchscope.core import recommendation, stats
from batchscope.core import verdict as v

LEVEL = 0.05


def drawn(center, cv, n, rng):
    """n per-round throughputs around ``center`` with run-to-run noise of about ``cv``."""
    return list(center * np.exp(rng.normal(0.0, cv, n)))


def exact(center, sd_log, n):
    """n throughputs whose logs have mean log(center) and sample sd exactly ``sd_log``."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return list(center * np.exp(sd_log * z))


# ------------------------------------------------------------------ reference maths


def t_density(x, df):
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))


def two_sided_p_by_integration(t, df, intervals=20_000):
    """1 - 2 * integral_0^t of the t density, by composite Simpson's rule."""
    x = np.linspace(0.0, t, intervals + 1)
    w = np.ones_like(x)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return 1.0 - 2.0 * float(np.sum(w * t_density(x, df)) * (t / intervals) / 3.0)


@pytest.mark.parametrize("x", [0.0, 0.1, 0.37, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("a", [0.5, 1.0, 2.5, 7.0])
def test_betainc_closed_forms(a, x):
    assert stats.betainc(1.0, 1.0, x) == pytest.approx(x, abs=1e-14)
    assert stats.betainc(a, 1.0, x) == pytest.approx(x**a, abs=1e-14)
    assert stats.betainc(1.0, a, x) == pytest.approx(1.0 - (1.0 - x) ** a, abs=1e-14)
    assert stats.betainc(a, 3.2, x) == pytest.approx(
        1.0 - stats.betainc(3.2, a, 1.0 - x), abs=1e-14
    )
    assert stats.betainc(a, a, 0.5) == pytest.approx(0.5, abs=1e-14)


@pytest.mark.parametrize(
    "t, df", [(2.0, 10), (1.0, 3.5), (2.5, 7.3), (0.5, 1.5), (3.0, 2), (1.2, 30.7), (0.3, 4.1)]
)
def test_t_p_value_matches_numeric_integration(t, df):
    assert 2.0 * stats.t_sf(t, df) == pytest.approx(two_sided_p_by_integration(t, df), abs=1e-9)
    assert stats.t_sf(-t, df) == pytest.approx(1.0 - stats.t_sf(t, df), abs=1e-15)


def reference_t_critical(df: int, confidence: float = 0.95) -> float:
    """Reference, independent of stats.t_quantile: the two-sided Student t critical value t
    such that P(|T_df| ≤ t) = ``confidence``.

    Uses the closed form of P(|T| ≤ t) for whole degrees of freedom (Abramowitz & Stegun
    26.7.3/26.7.4, with θ = atan(t/√df)) and bisection on θ.
    """
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"need df >= 1 and 0 < confidence < 1, got df={df}, {confidence}")
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if reference_t_central_probability(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan(0.5 * (lo + hi))


def reference_t_central_probability(theta: float, df: int) -> float:
    """A(t|df) = P(|T| ≤ t) at t = √df · tan θ (A&S 26.7.3 odd df, 26.7.4 even df)."""
    s, c = math.sin(theta), math.cos(theta)
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(2, df, 2):  # (1·3···(j−1))/(2·4···j) cos^j θ
            term *= (j - 1) / j * c * c
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    term, total = c, c
    for j in range(3, df - 1, 2):  # (2·4···(j−1))/(1·3···j) cos^j θ
        term *= (j - 1) / j * c * c
        total += term
    return 2.0 / math.pi * (theta + s * total)


def test_t_p_value_reference_values():
    # Two-sided p of t = 2 with 10 df (tables: 0.0734); t = 1 with 3.5 df.
    assert 2.0 * stats.t_sf(2.0, 10) == pytest.approx(0.07338803477074, abs=1e-12)
    assert 2.0 * stats.t_sf(1.0, 3.5) == pytest.approx(0.38133725356345, abs=1e-12)
    for t in (0.1, 1.0, 3.0, 40.0):
        assert 2.0 * stats.t_sf(t, 1) == pytest.approx(
            1.0 - 2.0 / math.pi * math.atan(t), rel=1e-12
        )
        assert 2.0 * stats.t_sf(t, 2) == pytest.approx(1.0 - t / math.sqrt(2.0 + t * t), rel=1e-12)
        for df in range(1, 25):  # Abramowitz & Stegun 26.7.3/4, coded independently in stats.py
            central = reference_t_central_probability(math.atan(t / math.sqrt(df)), df)
            assert 2.0 * stats.t_sf(t, df) == pytest.approx(1.0 - central, rel=1e-10, abs=1e-15)


def test_t_quantile_reference_values():
    assert stats.t_quantile(0.975, 10) == pytest.approx(2.228138852, abs=1e-8)
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.70620474, abs=1e-7)
    assert stats.t_quantile(0.95, 5) == pytest.approx(2.015048373, abs=1e-8)
    assert stats.t_quantile(0.8, 4) == pytest.approx(0.940964577, abs=1e-8)
    assert stats.t_quantile(0.025, 10) == pytest.approx(-2.228138852, abs=1e-8)
    for df in range(1, 31):
        assert stats.t_quantile(0.975, df) == pytest.approx(reference_t_critical(df), rel=1e-10)
    for p, df in [(0.6, 2.7), (0.99, 3.3), (0.99875, 4.0), (0.8, 17.9), (0.9999999, 1.5)]:
        assert stats.t_sf(stats.t_quantile(p, df), df) == pytest.approx(1.0 - p, rel=1e-9)


def test_t_near_zero_keeps_its_precision():
    """Near t = 0 the tail is 1/2 - density(0) * t; 1 - x must not round the t^2 away."""
    for df in (1.0, 2.5, 3.0, 40.0):
        slope = float(t_density(0.0, df))
        assert 0.5 - stats.t_sf(1e-9, df) == pytest.approx(slope * 1e-9, rel=1e-6)
        assert stats.t_quantile(0.5 + 1e-7, df) == pytest.approx(1e-7 / slope, rel=1e-6)


def test_welch_statistic_and_degrees_of_freedom():
    a, b = [1010.0, 990.0, 1030.0, 970.0], [930.0, 990.0, 950.0]
    la, lb = np.log(a), np.log(b)
    va, vb = la.var(ddof=1) / 4, lb.var(ddof=1) / 3
    result = v.welch_log_test(a, b)
    assert result.t == pytest.approx((la.mean() - lb.mean()) / math.sqrt(va + vb))
    assert result.df == pytest.approx((va + vb) ** 2 / (va**2 / 3 + vb**2 / 2))
    assert result.p_value == pytest.approx(stats.t_sf(result.t, result.df))
    # Equal n and equal spread: Welch's df is the pooled test's 2(n - 1).
    equal = v.welch_log_test(exact(1000, 0.05, 5), exact(900, 0.05, 5))
    assert equal.df == pytest.approx(8.0)
    with pytest.raises(ValueError):
        v.welch_log_test([1000.0], [900.0, 910.0])


def test_holm_textbook_example():
    adjusted = v.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4*0.005, 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02})


# ------------------------------------------------------------------ one point


def test_point_stats():
    values = [1000.0, 950.0, 1080.0, 1010.0]
    s = v.point_stats(values)
    logs = np.log(values)
    half = reference_t_critical(3) * logs.std(ddof=1) / 2.0
    assert s["n_rounds"] == 4
    assert s["median"] == pytest.approx(1005.0)
    assert s["cv"] == pytest.approx(np.std(values, ddof=1) / np.mean(values))
    assert s["ci_low"] == pytest.approx(math.exp(logs.mean() - half))
    assert s["ci_high"] == pytest.approx(math.exp(logs.mean() + half))
    one = v.point_stats([1234.0])
    assert (one["median"], one["ci_low"], one["ci_high"], one["cv"]) == (1234.0, None, None, None)
    for bad in ([], [1000.0, 0.0], [1000.0, float("nan")], [-5.0, 1.0]):
        with pytest.raises(ValueError):
            v.point_stats(bad)


# ------------------------------------------------------------------ the verdict


def test_clearly_separated():
    rng = np.random.default_rng(1)
    points = {("A",): drawn(1000, 0.02, 5, rng), ("B",): drawn(800, 0.02, 5, rng)}
    result = v.decide(points, LEVEL)
    assert result.leader == ("A",)
    assert result.tie_set == (("A",),)
    assert result.verdict == "separated"
    assert result.n_rounds == 5
    assert result.p_values[("B",)] <= LEVEL
    assert result.rounds_to_separate == {}
    assert 0 < result.detectable_diff_frac < 0.2


def test_three_percent_apart_with_ten_percent_cv_is_a_tie():
    for points in (
        {"A": exact(1000, 0.10, 3), "B": exact(970, 0.10, 3)},
        *(
            {"A": drawn(1000, 0.10, 3, rng), "B": drawn(970, 0.10, 3, rng)}
            for rng in (np.random.default_rng(seed) for seed in range(3))
        ),
    ):
        result = v.decide(points, LEVEL)
        assert set(result.tie_set) == {"A", "B"}
        assert result.verdict == "tie"
        assert result.detectable_diff_frac > 0.03
        loser = result.tie_set[1]
        assert result.rounds_to_separate[loser] is None or result.rounds_to_separate[loser] > 3


def test_leader_is_the_highest_median_and_tie_set_is_ordered():
    points = {"slow": exact(500, 0.01, 4), "mid": exact(990, 0.05, 4), "fast": exact(1000, 0.05, 4)}
    result = v.decide(points, LEVEL)
    assert result.leader == "fast"
    assert result.tie_set == ("fast", "mid")
    assert result.p_values["fast"] is None


def _shift_for_raw_p(target, base, sd_log, n):
    """The slowdown at which the doubled Welch p of base vs base/shift equals ``target``."""
    lo, hi = 1.0, 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        p = 2.0 * v.welch_log_test(exact(base, sd_log, n), exact(base / mid, sd_log, n)).p_value
        lo, hi = (mid, hi) if p > target else (lo, mid)
    return 0.5 * (lo + hi)


def test_holm_keeps_points_an_uncorrected_test_would_drop():
    shift = _shift_for_raw_p(0.03, 1000, 0.05, 4)  # raw p 0.03: < level, > level/3
    points = {"leader": exact(1000, 0.05, 4)}
    points.update({f"other{i}": exact(1000 / shift, 0.05, 4) for i in range(3)})
    result = v.decide(points, LEVEL)
    for key in ("other0", "other1", "other2"):
        assert result.raw_p_values[key] == pytest.approx(0.03, rel=1e-6)
        assert result.p_values[key] > LEVEL
    assert set(result.tie_set) == set(points)
    assert result.verdict == "tie"


def test_holm_step_down_separates_what_bonferroni_would_keep():
    shift = _shift_for_raw_p(0.035, 1000, 0.05, 4)  # raw p in (level/2, level)
    points = {"leader": exact(1000, 0.05, 4), "far": exact(500, 0.05, 4)}
    points["near"] = exact(1000 / shift, 0.05, 4)
    result = v.decide(points, LEVEL)
    assert 2 * result.raw_p_values["near"] > LEVEL  # Bonferroni would keep it
    assert result.p_values["near"] == pytest.approx(result.raw_p_values["near"])
    assert result.tie_set == ("leader",)
    assert result.verdict == "separated"


def test_windows_are_not_rounds():
    """One round each, however many tight windows: no across-round evidence, never separated."""
    rng = np.random.default_rng(7)
    windows = {"A": drawn(1000, 0.001, 50, rng), "B": drawn(800, 0.001, 50, rng)}
    per_round = {key: [float(np.median(w))] for key, w in windows.items()}
    result = v.decide(per_round, LEVEL)
    assert result.verdict == "too_noisy"
    assert set(result.tie_set) == {"A", "B"}
    assert result.n_rounds == 1
    assert result.p_values == {"A": None, "B": None}
    assert result.detectable_diff_frac is None
    assert v.eliminated(per_round, LEVEL) == set()
    # The same holds when only one point is short of rounds.
    mixed = {"A": drawn(1000, 0.01, 5, rng), "B": per_round["B"]}
    assert v.decide(mixed, LEVEL).verdict == "too_noisy"


def test_elimination_never_drops_the_best_or_a_tied_point():
    rng = np.random.default_rng(2024)
    seen_eliminated = seen_ties = 0
    for _ in range(400):
        k, n = int(rng.integers(2, 7)), int(rng.integers(2, 7))
        centers = 1000 * (1 - rng.uniform(0, 0.15, k))
        cvs = rng.uniform(0.005, 0.12, k)
        points = {i: drawn(centers[i], cvs[i], n, rng) for i in range(k)}
        result = v.decide(points, LEVEL)
        for looks in (1, 3):
            out = v.eliminated(points, LEVEL, looks=looks)
            assert result.leader not in out
            assert not out & set(result.tie_set)
        assert v.eliminated(points, LEVEL) == set(points) - set(result.tie_set)
        seen_eliminated += bool(v.eliminated(points, LEVEL))
        seen_ties += len(result.tie_set) > 1
    assert seen_eliminated > 50 and seen_ties > 50  # the property was exercised both ways


def test_identical_points_are_rarely_separated():
    """Across rounds the false "separated" rate stays near level (a one-sided test at level on
    a data-chosen leader would give about twice that), and a designated best point is kept."""
    rng = np.random.default_rng(99)
    draws = 2000
    separated = sum(
        v.decide({"A": drawn(1000, 0.05, 3, rng), "B": drawn(1000, 0.05, 3, rng)}, LEVEL).verdict
        == "separated"
        for _ in range(draws)
    )
    dropped_best = sum(
        0 not in v.decide({i: drawn(1000, 0.05, 4, rng) for i in range(4)}, LEVEL).tie_set
        for _ in range(draws)
    )
    bound = LEVEL + 3 * math.sqrt(LEVEL * (1 - LEVEL) / draws)
    assert separated / draws <= bound
    assert dropped_best / draws <= bound


def test_detectable_difference_shrinks_with_more_rounds():
    found = [
        v.decide({"A": exact(1000, 0.05, n), "B": exact(950, 0.05, n)}, LEVEL).detectable_diff_frac
        for n in (2, 3, 5, 10, 20, 50)
    ]
    assert all(a > b for a, b in zip(found, found[1:], strict=False))
    more_points = v.detectable_diff(0.05, 5, 6, LEVEL)
    assert more_points > v.detectable_diff(0.05, 5, 1, LEVEL)  # more comparisons, less power
    assert v.detectable_diff(0.0, 5, 1, LEVEL) == 0.0


@pytest.mark.parametrize("diff", [0.005, 0.03, 0.1, 0.5])
@pytest.mark.parametrize("m", [1, 4])
def test_rounds_needed_inverts_detectable_diff(diff, m):
    n = v.rounds_needed(diff, 0.08, m, LEVEL)
    assert n is not None and n >= 2
    assert v.detectable_diff(0.08, n, m, LEVEL) <= diff
    if n > 2:
        assert v.detectable_diff(0.08, n - 1, m, LEVEL) > diff
    assert v.rounds_needed(0.0, 0.08, m, LEVEL) is None
    assert v.rounds_needed(-diff, 0.08, m, LEVEL) is None
    assert v.rounds_needed(1e-9, 0.08, m, LEVEL) is None  # beyond MAX_ROUNDS


def test_rounds_to_separate_gives_about_the_stated_power():
    n = v.rounds_needed(0.05, 0.05, 1, LEVEL)
    rng = np.random.default_rng(5)
    draws = 600
    hits = sum(
        v.decide({"A": drawn(1050, 0.05, n, rng), "B": drawn(1000, 0.05, n, rng)}, LEVEL).verdict
        == "separated"
        for _ in range(draws)
    )
    assert hits / draws >= v.POWER - 3 * math.sqrt(v.POWER * (1 - v.POWER) / draws)


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        v.decide({}, LEVEL)
    with pytest.raises(ValueError):
        v.decide({"A": [1.0, 2.0]}, 1.5)
    with pytest.raises(ValueError):
        v.eliminated({"A": [1.0, 2.0]}, LEVEL, looks=0)


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
    choice, _ = recommendation.pick(
        ("b", "c"), rows, rule=("-batch_size",)
    )  # full tie: tie-set order
    assert choice == "b"


def _answers():
    rng = np.random.default_rng(11)
    cases = {
        "separated": {"a": drawn(1000, 0.02, 5, rng), "b": drawn(700, 0.02, 5, rng)},
        "tie": {k: drawn(1000, 0.08, 3, rng) for k in ("a", "b", "c")},
        "too_noisy": {"a": [1000.0], "b": [990.0], "d": [400.0]},
    }
    answers = {}
    for expected, points in cases.items():
        result = v.decide(points, LEVEL)
        assert result.verdict == expected
        answers[expected] = recommendation.to_answer(
            result, ROWS, mode="train", model="small_cnn", accumulation_steps=1
        )
    return answers


def test_answers_validate_against_the_schema():
    schema = recommendation.load_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    answers = _answers()
    for answer in answers.values():
        jsonschema.validate(answer, schema["$defs"]["answer"] | {"$defs": schema["$defs"]})
        assert answer["pick"] == {
            k: ROWS_BY_GRID[(answer["pick"]["batch_size"], answer["pick"]["num_workers"])][k]
            for k in ("batch_size", "num_workers")
        }
    document = recommendation.to_document(list(answers.values()), LEVEL)
    jsonschema.validate(document, schema)
    assert answers["separated"]["tie_set"][0]["p_value_vs_best"] is None
    assert len(answers["tie"]["rounds_to_separate"]) == len(answers["tie"]["tie_set"]) - 1
    assert answers["too_noisy"]["detectable_diff_frac"] is None


ROWS_BY_GRID = {(r["batch_size"], r["num_workers"]): r for r in ROWS.values()}


@pytest.mark.parametrize(
    "damage",
    [
        lambda a: a.update(verdict="maybe"),
        lambda a: a.pop("reason"),
        lambda a: a["pick"].update(extra=1),
        lambda a: a["tie_set"][0].update(n_rounds=0),
        lambda a: a.update(tie_set=[]),
    ],
)
def test_schema_refuses_a_damaged_answer(damage):
    schema = recommendation.load_schema()
    answer = _answers()["tie"]
    damage(answer)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(recommendation.to_document([answer], LEVEL), schema)
