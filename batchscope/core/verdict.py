"""Which grid point is fastest, decided on the evidence of every run of its group (scipy.stats).

Every grid point is measured in several *runs*, each its own process (rounds, and seeds); a
point's evidence is the list of its runs' throughputs (samples/s). Windows inside one process
share that process's luck, so they are never runs here.

**The model** (:mod:`batchscope.core.pooled`): per group, log throughput with one run-to-run
variance shared by the points (a noisy point keeps its own), the rounds as blocks where that helps.

**Selection of the best.** Hsu's multiple comparisons with the best, MCB (J. C. Hsu, "Constrained
simultaneous confidence intervals for multiple comparisons with the best", Annals of Statistics
12 (1984) 1136-1144; *Multiple Comparisons*, 1996, ch. 4, unequal sample sizes): with ``m_i`` the
estimates, ``se_ij`` the standard error of ``m_i - m_j`` and ``d_ij`` the critical value of
the comparison of i with j in the family that has ``i`` as the control (the one-sided Dunnett
value: the 1 - level quantile of the largest of the correlated t statistics of i against the
others, from ``scipy.stats.multivariate_t`` with their exact correlations), the intervals for
``mu_i - max_{j != i} mu_j`` (i's log ratio to the best of the others) are

    upper_i = max(0, min_{j != i} (m_i - m_j + d_ij se_ij))
    G = {i : upper_i > 0}                                         (the tie set)
    lower_i = 0 if G == {i} else min(0, min_{j in G, j != i} (m_i - m_j - d_ji se_ij))

and hold together with probability at least 1 - level: the true best is in G, every point
outside it is slower than some point, and every lower bound holds. The comparisons of a family
that rest on the pooled variance share one Dunnett value at the pool's degrees of freedom; a
comparison with a ``noisy`` point (its own variance, a handful of degrees of freedom), and every
comparison of a noisy control, takes ``level / (k - 1)`` alone at its Welch degrees of freedom,
and the pooled ones share the rest. By the union bound the family still holds with 1 - level,
and one noisy point no longer lends its few degrees of freedom to every comparison of the group.

**States** (:data:`VERDICTS`), with the margin ``delta = log(1 + margin)``:

- ``separated``: G is one point, faster than every other;
- ``equivalent``: G has several points and every one has ``lower_i > -delta``: each is shown
  within the margin of the best (a TOST-style claim on an interval of the ratio). "No difference
  found" is never this;
- ``undetermined``: neither; the evidence ran out first (also with no run-to-run spread to test
  with: one run per point). The answer gives the smallest difference the evidence could detect
  and the runs that would settle it;
- ``disturbed``: runs measured beside other work left too few (see :func:`disturbed_verdict`).

**The race** (:func:`look`, :class:`Design`). After each round from the
first look on, the same procedure runs at a share of the level; the points outside G stop being
measured and a group that is separated or equivalent stops. The looks together spend at most
:data:`LOOK_SHARE` of the level (in proportion to the rounds they cover), and the final analysis
gets what they left: by the union bound over the analyses, the true best is lost, or a claim is
wrong, with probability at most ``level`` whatever the race did. An eliminated point is outside
G at a stricter level than the final one, so on the data of its look the final analysis would
exclude it too. It keeps its runs; the final analysis includes them.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from batchscope.core.pooled import Fit, fit, point_stats

#: What ``Verdict.test`` and the recommendation's ``test`` say was done.
TEST_NAME = "mcb_pooled_log"
VERDICTS = ("separated", "equivalent", "undetermined", "disturbed")
#: Power the detectable difference and the runs to settle are computed for.
POWER = 0.8
#: The share of the level that the race's looks may spend, all of them together.
LOOK_SHARE = 0.5
#: Beyond this many runs per point a difference counts as unsettleable (None).
MAX_RUNS = 10_000
#: The quasi-Monte Carlo seed of the multivariate t integrals: the same data, the same answer.
_QMC_SEED = 20231


# ---------------------------------------------------------------- comparisons with the best


def dunnett_critical(corr: np.ndarray, df: float, level: float) -> float:
    """The one-sided Dunnett critical value: d with P(max_j T_j <= d) = 1 - level for t
    statistics T_j with correlation matrix ``corr`` and ``df`` degrees of freedom."""
    corr = np.asarray(corr, dtype=float)
    key = tuple(np.round(corr, 4).ravel())
    return _dunnett(key, corr.shape[0], round(float(df), 3), float(level))


@lru_cache(maxsize=8192)
def _dunnett(key: tuple, m: int, df: float, level: float) -> float:
    from scipy import optimize, stats

    if m == 1:
        return float(stats.t.ppf(1.0 - level, df))
    corr = np.array(key).reshape(m, m)
    dist = stats.multivariate_t(loc=np.zeros(m), shape=corr, df=df, allow_singular=True)

    def excess(d: float) -> float:
        return float(dist.cdf(np.full(m, d), random_state=_QMC_SEED)) - (1.0 - level)

    low = float(stats.t.ppf(1.0 - level, df))  # one comparison's
    high = float(stats.t.ppf(1.0 - level / m, df))  # Bonferroni's
    if excess(low) >= 0:
        return low
    if excess(high) <= 0:
        return high
    return float(optimize.brentq(excess, low, high, xtol=1e-5))


@dataclass(frozen=True)
class Comparison:
    """MCB on a fit at one level: indices into ``fit.keys``; log-ratio bounds per point."""

    fit: Fit
    level: float
    order: tuple[int, ...]  # by estimate, highest first
    tie: tuple[int, ...]  # G, in that order
    lower: np.ndarray
    upper: np.ndarray
    critical: np.ndarray  # d_ij: row i, the family with i as the control

    @property
    def top(self) -> int:
        """The best estimate among the points that can be the best (G's first)."""
        return self.tie[0] if self.tie else self.order[0]

    def within(self, margin: float) -> set[int]:
        """Members of G shown within ``margin`` (a fraction) of the best."""
        delta = math.log1p(margin)
        return {i for i in self.tie if self.lower[i] > -delta}


def compare(f: Fit, level: float, out: Collection[int] = ()) -> Comparison | None:
    """Hsu's MCB at ``level`` (see the module docstring); None when the fit has no variance
    to test with (one run per point) and more than one point. ``out``: points the race already
    eliminated (indices): their runs stay in the fit (the pooled variance, the comparisons'
    bounds), but they are not in G, each having been shown slower than the best at a look
    whose level the race spent (unless that would leave G empty: then they are)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"need 0 < level < 1, got {level}")
    k = len(f.keys)
    order = tuple(sorted(range(k), key=lambda i: (-f.estimate[i], i)))
    if k == 1:
        zero = np.zeros(1)
        return Comparison(f, level, order, order, zero, np.full(1, np.inf), np.zeros((1, 1)))
    if min(f.var_df) < 1:
        return None
    m = f.estimate
    se = np.array([[f.se(i, j) if i != j else 0.0 for j in range(k)] for i in range(k)])
    d = np.array([_criticals_of(f, i, se, level) for i in range(k)])
    upper = np.array(
        [max(0.0, min(m[i] - m[j] + d[i, j] * se[i, j] for j in range(k) if j != i))
         for i in range(k)]
    )  # fmt: skip
    tie = tuple(i for i in order if upper[i] > 0)
    tie = tuple(i for i in tie if i not in out) or tie
    lower = np.zeros(k)
    for i in range(k):
        others = [j for j in tie if j != i]  # empty only when G is i alone: lower bound 0
        if others:
            lower[i] = min(0.0, min(m[i] - m[j] - d[j, i] * se[i, j] for j in others))
    return Comparison(f, level, order, tie, lower, upper, d)


def _criticals_of(f: Fit, i: int, se: np.ndarray, level: float) -> np.ndarray:
    """Row i of d: the critical values of i's comparisons with the others (d[i, i] = 0).

    The comparisons on the pooled variance share one Dunnett value, with the exact
    correlations of their differences, at the pool's degrees of freedom and their share of
    ``level``; a comparison with a noisy point takes ``level / (k - 1)`` at its Welch degrees
    of freedom (the union bound: the family's level is the sum). A noisy i has its own
    variance in every comparison: each takes ``level / (k - 1)``."""
    from scipy import stats

    k = len(f.keys)
    out = np.zeros(k)
    others = [j for j in range(k) if j != i]
    noisy = {j for j in range(k) if f.keys[j] in f.noisy}
    pooled = [] if i in noisy else [j for j in others if j not in noisy]
    if pooled:
        share = level * len(pooled) / len(others)
        out[pooled] = _dunnett_of(f, i, pooled, se, f.pair_df(i, pooled[0]), share)
    for j in others:
        if j not in pooled:
            out[j] = float(stats.t.ppf(1.0 - level / len(others), f.pair_df(i, j)))
    return out


def _dunnett_of(
    f: Fit, i: int, others: Sequence[int], se: np.ndarray, df: float, level: float
) -> float:
    """The Dunnett critical value of i against ``others``, with the exact correlations of the
    differences."""
    c = f.cov
    corr = np.empty((len(others), len(others)))
    for a, j in enumerate(others):
        for b, h in enumerate(others):
            cross = c[i, i] - c[i, h] - c[j, i] + c[j, h]
            corr[a, b] = cross / (se[i, j] * se[i, h])
    np.fill_diagonal(corr, 1.0)
    return dunnett_critical(np.clip(corr, -1.0, 1.0), df, level)


# ---------------------------------------------------------------- the race's levels


@dataclass(frozen=True)
class Design:
    """How a sweep spends its level over the race (``sweep`` and ``measure.rounds`` settings).

    ``first_look``: the round after which the race first looks (every point is measured in
    rounds 1 .. first_look); ``max_rounds``: the most rounds any point is measured in. With
    ``strategy`` full there are no looks: every point runs ``first_look`` rounds.
    """

    level: float
    margin: float
    strategy: str
    first_look: int
    max_rounds: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Design:
        """From a config with the schema's defaults filled in."""
        sweep = config["sweep"]
        return cls(
            level=float(sweep["level"]),
            margin=float(sweep["margin_frac"]),
            strategy=sweep["strategy"],
            first_look=int(config["measure"]["rounds"]),
            max_rounds=int(sweep["max_rounds"]),
        )

    @property
    def last_round(self) -> int:
        """The most rounds a point can be measured in."""
        return self.first_look if self.strategy == "full" else max(self.first_look, self.max_rounds)

    def looks_after(self, round_: int) -> bool:
        """Whether the race looks after this round."""
        return self.strategy == "race" and self.first_look <= round_ < self.last_round

    def look_level(self, round_: int) -> float:
        """The level the look after ``round_`` spends: LOOK_SHARE of ``level`` over the looks
        after rounds first_look .. last_round - 1, in proportion to the rounds each covers."""
        if not self.looks_after(round_):
            raise ValueError(f"no look after round {round_}")
        before = 0 if round_ == self.first_look else round_ - 1
        return LOOK_SHARE * self.level * (round_ - before) / (self.last_round - 1)

    def final_level(self, last_round: int) -> float:
        """The level of the final analysis of a group whose last round was ``last_round``: what
        the looks after rounds first_look .. last_round - 1 left."""
        spent = sum(
            self.look_level(r) for r in range(self.first_look, last_round) if self.looks_after(r)
        )
        return self.level - spent


# ---------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class Verdict:
    """What :func:`decide` found. Keys are the caller's point keys.

    ``tie_set`` starts with the best estimate (``leader``), then the rest by estimate, highest
    first. ``ratio``/``ratio_low``/``ratio_high``: each point's throughput over the best of the
    other points, the estimate and its simultaneous interval (MCB); None without a test.
    ``within_margin``: the tie-set members shown within the margin of the best.
    ``runs_to_settle``: per tie-set member but the leader, the runs per point that would settle
    it (exclude it, or show it within the margin) with POWER; None when out of reach.
    """

    leader: Hashable
    tie_set: tuple[Hashable, ...]
    verdict: str
    test: str
    level: float
    level_final: float
    margin: float
    n_rounds: int
    stats: dict[Hashable, dict[str, Any]]
    estimate: dict[Hashable, float]
    ratio: dict[Hashable, float | None]
    ratio_low: dict[Hashable, float | None]
    ratio_high: dict[Hashable, float | None]
    within_margin: tuple[Hashable, ...]
    detectable_diff_frac: float | None
    runs_to_settle: dict[Hashable, int | None]
    model: dict[str, Any] = field(default_factory=dict)


def decide(
    points: Mapping[Hashable, Iterable[float]],
    level: float,
    margin: float,
    *,
    blocks: Mapping[Hashable, Sequence[Hashable]] | None = None,
    level_final: float | None = None,
    eliminated: Collection[Hashable] = (),
) -> Verdict:
    """The verdict on the group's points. ``points`` maps a key to its runs' throughputs (one
    number per process, never within-process windows); ``blocks`` to their rounds.
    ``level`` is the family's level; ``level_final`` what the race left for this analysis
    (:meth:`Design.final_level`; ``level`` when not given). ``eliminated``: the points the
    race's looks eliminated, compared but never in the tie set (:func:`compare`)."""
    if margin < 0:
        raise ValueError(f"need margin >= 0, got {margin}")
    level_final = level if level_final is None else level_final
    f = fit(points, blocks)
    gone = set(eliminated)
    c = compare(f, level_final, {i for i, key in enumerate(f.keys) if key in gone})
    k = len(f.keys)
    stats_ = {key: point_stats(points[key]) for key in f.keys}
    estimate = {key: math.exp(f.estimate[i]) for i, key in enumerate(f.keys)}
    none = {key: None for key in f.keys}
    common = dict(
        test=TEST_NAME,
        level=level,
        level_final=level_final,
        margin=margin,
        n_rounds=int(f.n.min()),
        stats=stats_,
        estimate=estimate,
        model=_model_record(f),
    )
    if c is None:  # one run per point: no spread to test with
        order = tuple(sorted(range(k), key=lambda i: (-f.estimate[i], i)))
        keys = tuple(f.keys[i] for i in order)
        return Verdict(
            leader=keys[0],
            tie_set=keys,
            verdict="undetermined",
            ratio=dict(none),
            ratio_low=dict(none),
            ratio_high=dict(none),
            within_margin=(),
            detectable_diff_frac=None,
            runs_to_settle={key: None for key in keys[1:]},
            **common,
        )
    tie = tuple(f.keys[i] for i in c.tie)
    within = c.within(margin)
    bounds = k > 1  # one point: nothing to be the best of
    if len(c.tie) == 1:
        state = "separated"
    elif len(within) == len(c.tie):
        state = "equivalent"
    else:
        state = "undetermined"
    return Verdict(
        leader=f.keys[c.top],
        tie_set=tie,
        verdict=state,
        ratio={key: _ratio(c, i) for i, key in enumerate(f.keys)},
        ratio_low={key: math.exp(c.lower[i]) if bounds else None for i, key in enumerate(f.keys)},
        ratio_high={key: math.exp(c.upper[i]) if bounds else None for i, key in enumerate(f.keys)},
        within_margin=tuple(f.keys[i] for i in c.tie if i in within),
        detectable_diff_frac=_detectable(c),
        runs_to_settle={f.keys[i]: _runs_to_settle(c, i, margin) for i in c.tie[1:]},
        **common,
    )


def _ratio(c: Comparison, i: int) -> float | None:
    others = [c.fit.estimate[j] for j in range(len(c.fit.keys)) if j != i]
    return math.exp(c.fit.estimate[i] - max(others)) if others else None


def _model_record(f: Fit) -> dict[str, Any]:
    return {
        "sd_log": f.sd_log,
        "df": int(f.df),
        "blocked_on_rounds": f.blocked,
        "blocking_p": f.blocking_p,
        "levene_p": f.levene_p,
        "noisy": list(f.noisy),
    }


def _detectable(c: Comparison) -> float | None:
    """The smallest ratio - 1 between the best and a tie-set member (or, when separated, the
    runner-up) that this evidence detects with POWER: exp((d + t_POWER) se) - 1, the largest
    over those points."""
    from scipy import stats

    f = c.fit
    if len(f.keys) < 2:
        return None
    others = list(c.tie[1:]) or [c.order[1]]
    top = c.top
    worst = max(
        (c.critical[top, j] + float(stats.t.ppf(POWER, f.pair_df(top, j)))) * f.se(top, j)
        for j in others
    )
    return math.expm1(worst)


def _runs_to_settle(c: Comparison, i: int, margin: float) -> int | None:
    """Runs per point (the leader's and i's, equal) with which the observed difference would
    be settled with POWER: excluded (d se <= diff) or shown within the margin
    (diff + d se < delta), se = sd sqrt(2 / n), sd the pair's run-to-run spread."""
    from scipy import stats

    f, top = c.fit, c.top
    diff = f.estimate[top] - f.estimate[i]
    target = max(diff, math.log1p(margin) - diff)
    if target <= 0:
        return None
    sd = f.se(top, i) / math.sqrt(1.0 / f.n[top] + 1.0 / f.n[i])
    factor = c.critical[top, i] + float(stats.t.ppf(POWER, f.pair_df(top, i)))
    n = math.ceil(2.0 * (factor * sd / target) ** 2)
    if n > MAX_RUNS:
        return None
    return max(n, int(min(f.n[top], f.n[i])) + 1)


# ---------------------------------------------------------------- the race


@dataclass(frozen=True)
class Look:
    """A look's decision for one group: the points that leave the race, and whether the group
    is settled (separated or equivalent at the look's level) and measures no more."""

    eliminated: frozenset
    settled: bool
    state: str


def look(
    points: Mapping[Hashable, Iterable[float]],
    level: float,
    margin: float,
    *,
    blocks: Mapping[Hashable, Sequence[Hashable]] | None = None,
    eliminated: Collection[Hashable] = (),
) -> Look:
    """The race's look after a round, at ``level`` (:meth:`Design.look_level`): MCB on every run so
    far of the group's points (``eliminated`` by earlier looks among them, never back in the
    tie set); the points outside the tie set are eliminated."""
    v = decide(points, level, margin, blocks=blocks, eliminated=eliminated)
    out = frozenset(key for key in v.stats if key not in v.tie_set)
    return Look(out, v.verdict in ("separated", "equivalent"), v.verdict)


# ---------------------------------------------------------------- runs measured beside other work


def under_foreign_load(foreign_cpu_frac: Any, limit: float) -> bool:
    """Was a run measured while other processes took more than ``limit`` of the machine's CPU
    (its ``foreign_cpu_frac``)? Unknown (None, NaN: off Linux, or an older result) is not."""
    try:
        value = float(foreign_cpu_frac)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and value > limit


def short_of_clean_runs(
    clean: Mapping[Hashable, Sequence[float]], loaded: Mapping[Hashable, int]
) -> list[Hashable]:
    """Points that lost runs to foreign load and kept fewer than 2 undisturbed ones: with them a
    comparison would rest on measurements slowed by someone else's work, or on none.
    ``clean`` maps each point to its undisturbed throughputs, ``loaded`` to its loaded runs."""
    return [key for key, n in loaded.items() if n and len(clean.get(key, ())) < 2]


def disturbed_verdict(
    points: Mapping[Hashable, Iterable[float]], level: float, margin: float
) -> Verdict:
    """The verdict that names no winner: every point in the tie set, by median, no test.
    Its stats are over all the runs given (loaded ones included: they are what was seen)."""
    stats_ = {key: point_stats(v) for key, v in points.items()}
    if not stats_:
        raise ValueError("need at least one point")
    order = tuple(sorted(stats_, key=lambda k: (-stats_[k]["median"], -stats_[k]["mean_log"])))
    none = {key: None for key in order}
    return Verdict(
        leader=order[0],
        tie_set=order,
        verdict="disturbed",
        test=TEST_NAME,
        level=level,
        level_final=level,
        margin=margin,
        n_rounds=min(s["n_rounds"] for s in stats_.values()),
        stats=stats_,
        estimate={key: math.exp(s["mean_log"]) for key, s in stats_.items()},
        ratio=dict(none),
        ratio_low=dict(none),
        ratio_high=dict(none),
        within_margin=(),
        detectable_diff_frac=None,
        runs_to_settle={key: None for key in order[1:]},
    )
