"""Which grid point is fastest, decided on the evidence of every run of its group (scipy.stats).

Every grid point is measured in several *runs*, each a fresh process (rounds, and seeds); a
point's evidence is the list of its runs' throughputs (samples/s). Windows inside one process
share that process's luck, so they are never runs here.

**The model.** Per group (mode × model × sequence length × accumulation × devices), the log
throughput of run j of point i is ``y_ij = mu_i + e_ij`` (``+ b_r``, the effect of the run's
round, when blocking on rounds helps), the ``e_ij`` independent with one variance shared by the
group's points: the run-to-run spread is a property of the machine, not of a batch size, so it
is estimated once from every point's runs (``df`` = runs - points) instead of from each point's
two or three. A difference of logs is a ratio of throughputs.

- *Homogeneity.* A point whose own spread is far above the others' (a one-sided F test of its
  variance against theirs, Bonferroni over the points at :data:`HOMOGENEITY_LEVEL`) is flagged
  ``noisy``: the pool leaves it out and its comparisons use its own variance (Welch-Satterthwaite
  degrees of freedom). Levene's test (median-centred, Brown-Forsythe) over the points is recorded
  beside it.
- *Blocks.* When the runs' rounds are known, the model with a round effect is fitted by least
  squares as well, and kept when the F test of the round effects has p < :data:`BLOCKING_LEVEL`
  (Bancroft's "sometimes pool" rule of a preliminary test at 0.25) and the blocks pay for the
  degrees of freedom they take (Fisher's relative efficiency above 1): the estimates are then the
  least-squares means. A machine that drifts between rounds gains from it; a quiet one does not.

**Selection of the best.** Hsu's multiple comparisons with the best, MCB (J. C. Hsu, "Constrained
simultaneous confidence intervals for multiple comparisons with the best", Annals of Statistics
12 (1984) 1136-1144; *Multiple Comparisons*, 1996, ch. 4, unequal sample sizes): with ``m_i`` the
estimates, ``se_ij`` the standard error of ``m_i - m_j`` and ``d_i`` the one-sided Dunnett
critical value with ``i`` as the control (the 1 - level quantile of the largest of the correlated
t statistics of i against the others, from ``scipy.stats.multivariate_t`` with their exact
correlations), the intervals for ``mu_i - max_{j != i} mu_j`` (i's log ratio to the best of the
others) are

    upper_i = max(0, min_{j != i} (m_i - m_j + d_i se_ij))
    G = {i : upper_i > 0}                                         (the tie set)
    lower_i = 0 if G == {i} else min(0, min_{j in G, j != i} (m_i - m_j - d_j se_ij))

and hold together with probability at least 1 - level: the true best is in G, every point
outside it is slower than some point, and every lower bound holds.

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
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

#: What ``Verdict.test`` and the recommendation's ``test`` say was done.
TEST_NAME = "mcb_pooled_log"
VERDICTS = ("separated", "equivalent", "undetermined", "disturbed")
#: Power the detectable difference and the runs to settle are computed for.
POWER = 0.8
#: Family level of the homogeneity check (Bonferroni over the points).
HOMOGENEITY_LEVEL = 0.01
#: The rounds are kept as blocks when their F test has p below this (Bancroft 1944).
BLOCKING_LEVEL = 0.25
#: The share of the level that the race's looks may spend, all of them together.
LOOK_SHARE = 0.5
#: Beyond this many runs per point a difference counts as unsettleable (None).
MAX_RUNS = 10_000
#: The quasi-Monte Carlo seed of the multivariate t integrals: the same data, the same answer.
_QMC_SEED = 20231
#: A point with no run-to-run spread at all (identical runs): its variance, to stay finite.
_TINY_VAR = 1e-18


# ---------------------------------------------------------------- one point


def _runs(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"need one or more positive finite throughputs, got {values!r}")
    return x


def point_stats(values: Iterable[float]) -> dict[str, Any]:
    """Median, 95% interval, run-to-run CV and run count of one point's throughputs, alone.

    ``ci_low``/``ci_high``: exp(mean(log x) -/+ t_{0.975, n-1} sd(log x) / sqrt(n)), the t
    interval of the mean log throughput, back-transformed (under a log-normal model exp(mean of
    logs) is the median). ``cv``: std(x, ddof=1) / mean(x). With one run the interval, ``cv``
    and ``sd_log`` are None. The comparisons do not use these: they pool the group's spread.
    """
    from scipy import stats

    x = _runs(values)
    n = int(x.size)
    logs = np.log(x)
    out: dict[str, Any] = {
        "n_rounds": n,
        "median": float(np.median(x)),
        "mean_log": float(logs.mean()),
        "sd_log": None,
        "ci_low": None,
        "ci_high": None,
        "cv": None,
    }
    if n >= 2:
        sd_log = float(logs.std(ddof=1))
        half = float(stats.t.ppf(0.975, n - 1)) * sd_log / math.sqrt(n)
        out["sd_log"] = sd_log
        out["ci_low"] = math.exp(out["mean_log"] - half)
        out["ci_high"] = math.exp(out["mean_log"] + half)
        out["cv"] = float(x.std(ddof=1) / x.mean())
    return out


# ---------------------------------------------------------------- the pooled model


@dataclass(frozen=True)
class Fit:
    """The group's model of log throughput. Arrays follow ``keys``.

    ``estimate``: each point's (least-squares) mean log throughput; ``cov``: the covariance of
    the estimates; ``var_df``: degrees of freedom of the variance each point's estimate uses
    (the pool's, or its own when ``noisy``); ``sd_log``: the pooled run-to-run sd of log
    throughput (None without replicates); ``df``: its degrees of freedom (0: nothing to test).
    """

    keys: tuple
    n: np.ndarray
    estimate: np.ndarray
    cov: np.ndarray
    var_df: np.ndarray
    sd_log: float | None
    df: int
    blocked: bool = False
    blocking_p: float | None = None
    levene_p: float | None = None
    noisy: tuple = ()

    def se(self, i: int, j: int) -> float:
        """Standard error of ``estimate[i] - estimate[j]``."""
        c = self.cov
        return math.sqrt(max(c[i, i] + c[j, j] - 2.0 * c[i, j], _TINY_VAR))

    def pair_df(self, i: int, j: int) -> float:
        """Degrees of freedom of that difference: the pool's, or Welch-Satterthwaite's when a
        noisy point's own variance is in it."""
        if self.var_df[i] == self.var_df[j] == self.df:
            return float(self.df)
        a, b = self.cov[i, i], self.cov[j, j]
        if a + b <= 0:
            return float(min(self.var_df[i], self.var_df[j]))
        return float((a + b) ** 2 / (a * a / self.var_df[i] + b * b / self.var_df[j]))


def fit(
    points: Mapping[Hashable, Iterable[float]],
    blocks: Mapping[Hashable, Sequence[Hashable]] | None = None,
) -> Fit:
    """The pooled model of the points' log throughputs (see the module docstring).

    ``points`` maps each key to its runs' throughputs; ``blocks``, optional, to each run's round
    (same order), which lets the model take the rounds as blocks where that helps.
    """
    if not points:
        raise ValueError("need at least one point")
    keys = tuple(points)
    logs = [np.log(_runs(points[k])) for k in keys]
    n = np.array([len(y) for y in logs])
    noisy = _noisy(logs)
    pooled = [i for i in range(len(keys)) if i not in noisy]
    df = int(sum(n[i] - 1 for i in pooled))
    estimate = np.array([float(y.mean()) for y in logs])
    cov = np.zeros((len(keys), len(keys)))
    var_df = np.full(len(keys), df, dtype=float)
    sd_log = None
    blocked, blocking_p = False, None
    if df > 0:
        sse = float(sum(((logs[i] - logs[i].mean()) ** 2).sum() for i in pooled))
        var = max(sse / df, _TINY_VAR)
        for i in pooled:
            cov[i, i] = var / n[i]
        if blocks is not None:
            found = _blocked(keys, logs, blocks, pooled, sse, df)
            if found is not None:
                blocking_p, block_fit = found
                if blocking_p < BLOCKING_LEVEL and _efficiency(var, df, *block_fit[:2]) > 1:
                    blocked = True
                    var, df, means, block_cov = block_fit
                    var_df[pooled] = df
                    estimate[pooled] = means
                    cov[np.ix_(pooled, pooled)] = block_cov
        sd_log = math.sqrt(var)
    for i in noisy:
        cov[i, i] = max(float(logs[i].var(ddof=1)), _TINY_VAR) / n[i]
        var_df[i] = n[i] - 1
    return Fit(
        keys=keys,
        n=n,
        estimate=estimate,
        cov=cov,
        var_df=var_df,
        sd_log=sd_log,
        df=df,
        blocked=blocked,
        blocking_p=blocking_p,
        levene_p=_levene(logs),
        noisy=tuple(keys[i] for i in sorted(noisy)),
    )


def _efficiency(var: float, df: int, var_blocked: float, df_blocked: int) -> float:
    """Fisher's relative efficiency of the blocked model, its degrees of freedom counted
    (Cochran & Cox, Experimental Designs, 1957, 4.3): above 1 when the blocks pay for the
    degrees of freedom they take."""
    adjust = ((df_blocked + 1) * (df + 3)) / ((df_blocked + 3) * (df + 1))
    return adjust * var / var_blocked


def _noisy(logs: Sequence[np.ndarray]) -> set[int]:
    """The points whose variance is far above the others' pooled one (one-sided F tests,
    Bonferroni over the points tested at HOMOGENEITY_LEVEL)."""
    from scipy import stats

    tested = [i for i, y in enumerate(logs) if y.size >= 2]
    if len(tested) < 3:  # two points: which of them is the odd one is not defined
        return set()
    ss = {i: float(((logs[i] - logs[i].mean()) ** 2).sum()) for i in tested}
    out = set()
    for i in tested:
        df_rest = sum(logs[j].size - 1 for j in tested if j != i)
        ss_rest = sum(ss[j] for j in tested if j != i)
        if ss_rest <= 0:
            continue
        ratio = (ss[i] / (logs[i].size - 1)) / (ss_rest / df_rest)
        p = float(stats.f.sf(ratio, logs[i].size - 1, df_rest))
        if p < HOMOGENEITY_LEVEL / len(tested):
            out.add(i)
    return out


def _levene(logs: Sequence[np.ndarray]) -> float | None:
    """Levene's (Brown-Forsythe) p over the points with 2+ runs, recorded; None if untestable."""
    from scipy import stats

    usable = [y for y in logs if y.size >= 2]
    if len(usable) < 2 or all(np.ptp(y) == 0 for y in usable):
        return None
    p = float(stats.levene(*usable, center="median").pvalue)
    return p if math.isfinite(p) else None


def _blocked(keys, logs, blocks, pooled, sse, df):
    """(p of the round effects' F test, (variance, df, LS means, their covariance)) of the
    pooled points with rounds as blocks, or None when the design cannot tell rounds apart."""
    from scipy import stats

    rows, labels = [], []
    for i in pooled:
        rounds = list(blocks[keys[i]])
        if len(rounds) != logs[i].size:
            raise ValueError(f"point {keys[i]!r}: {len(rounds)} rounds for {logs[i].size} runs")
        rows += [(pooled.index(i), r) for r in rounds]
        labels += rounds
    levels = sorted(set(labels), key=str)
    if len(levels) < 2:
        return None
    k, r = len(pooled), len(levels)
    x = np.zeros((len(rows), k + r - 1))
    for row, (p, block) in enumerate(rows):
        x[row, p] = 1.0
        b = levels.index(block)
        if b:
            x[row, k + b - 1] = 1.0
    y = np.concatenate([logs[i] for i in pooled])
    rank = np.linalg.matrix_rank(x)
    df_b = len(y) - rank
    if rank < x.shape[1] or df_b < 1:  # rounds not told apart from points, or no df left
        return None
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    sse_b = float(((y - x @ beta) ** 2).sum())
    if sse_b <= 0:
        return None
    f_value = ((sse - sse_b) / (df - df_b)) / (sse_b / df_b)
    p = float(stats.f.sf(f_value, df - df_b, df_b))
    var = sse_b / df_b
    # least-squares means: each point's effect plus the mean of the round effects
    ls = np.zeros((k, x.shape[1]))
    ls[:, :k] = np.eye(k)
    ls[:, k:] = 1.0 / r
    xtx = np.linalg.pinv(x.T @ x)
    return p, (var, df_b, ls @ beta, var * ls @ xtx @ ls.T)


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
    critical: np.ndarray

    @property
    def top(self) -> int:
        return self.order[0]

    def within(self, margin: float) -> set[int]:
        """Members of G shown within ``margin`` (a fraction) of the best."""
        delta = math.log1p(margin)
        return {i for i in self.tie if self.lower[i] > -delta}


def compare(f: Fit, level: float) -> Comparison | None:
    """Hsu's MCB at ``level`` (see the module docstring); None when the fit has no variance
    to test with (one run per point) and more than one point."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"need 0 < level < 1, got {level}")
    k = len(f.keys)
    order = tuple(sorted(range(k), key=lambda i: (-f.estimate[i], i)))
    if k == 1:
        zero = np.zeros(1)
        return Comparison(f, level, order, order, zero, np.full(1, np.inf), zero)
    if min(f.var_df) < 1:
        return None
    m = f.estimate
    se = np.array([[f.se(i, j) if i != j else 0.0 for j in range(k)] for i in range(k)])
    critical = np.array([_critical_of(f, i, se, level) for i in range(k)])
    upper = np.array(
        [max(0.0, min(m[i] - m[j] + critical[i] * se[i, j] for j in range(k) if j != i))
         for i in range(k)]
    )  # fmt: skip
    tie = tuple(i for i in order if upper[i] > 0)
    lower = np.zeros(k)
    for i in range(k):
        others = [j for j in tie if j != i]  # empty only when G is i alone: lower bound 0
        if others:
            lower[i] = min(0.0, min(m[i] - m[j] - critical[j] * se[i, j] for j in others))
    return Comparison(f, level, order, tie, lower, upper, critical)


def _critical_of(f: Fit, i: int, se: np.ndarray, level: float) -> float:
    """d_i: the Dunnett critical value of i against every other point, with the exact
    correlations of the differences and the smallest degrees of freedom among them."""
    others = [j for j in range(len(f.keys)) if j != i]
    c = f.cov
    corr = np.empty((len(others), len(others)))
    for a, j in enumerate(others):
        for b, h in enumerate(others):
            cross = c[i, i] - c[i, h] - c[j, i] + c[j, h]
            corr[a, b] = cross / (se[i, j] * se[i, h])
    np.fill_diagonal(corr, 1.0)
    df = min(f.pair_df(i, j) for j in others)
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
    strategy: str = "race"
    first_look: int = 2
    max_rounds: int = 8

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Design:
        """From a config with the schema's defaults filled in."""
        sweep = config["sweep"]
        return cls(
            level=float(sweep["level"]),
            margin=float(sweep["margin"]),
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
) -> Verdict:
    """The verdict on the group's points. ``points`` maps a key to its runs' throughputs (one
    number per fresh process, never within-process windows); ``blocks`` to their rounds.
    ``level`` is the family's level; ``level_final`` what the race left for this analysis
    (:meth:`Design.final_level`; ``level`` when not given)."""
    if margin < 0:
        raise ValueError(f"need margin >= 0, got {margin}")
    level_final = level if level_final is None else level_final
    f = fit(points, blocks)
    c = compare(f, level_final)
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
        (c.critical[top] + float(stats.t.ppf(POWER, f.pair_df(top, j)))) * f.se(top, j)
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
    factor = c.critical[top] + float(stats.t.ppf(POWER, f.pair_df(top, i)))
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
) -> Look:
    """The race's look after a round, at ``level`` (:meth:`Design.look_level`): MCB on every run so
    far of the group's points; the points outside the tie set are eliminated."""
    v = decide(points, level, margin, blocks=blocks)
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
