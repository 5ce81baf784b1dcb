"""Which grid point wins, decided across independent rounds (numpy and the standard library only).

Every grid point is measured in several *rounds*, each a fresh process; a point's evidence is
its list of per-round throughputs (samples/s). Windows inside one process share that process's
luck (allocator state, clocks, CPU placement), so they are never treated as rounds here: a
point with one round has one number, however many windows that round averaged.

Statistics, all on the log of throughput (run-to-run noise is multiplicative, and a difference
of logs is a ratio):

* :func:`point_stats`: median over rounds; a 95% Student-t interval of the mean of log
  throughput, back-transformed (under a log-normal model exp(mean of logs) is the population
  median, so this interval brackets the median; a distribution-free order-statistic interval
  for the median needs at least 6 rounds to reach 95%, more than a sweep can usually afford);
  run-to-run CV = std(ddof=1) / mean of the per-round values.
* :func:`welch_log_test`: Welch's t on log throughput, one-sided "is the leader faster?", with
  Welch-Satterthwaite degrees of freedom and the Student t tail from the regularized
  incomplete beta function (``batchscope.core.stats.t_sf``).
* :func:`decide`: the leader is the point with the highest median. Because the leader is
  chosen from the same data, the one-sided p of "leader faster than X" is doubled (a
  directional two-sided test); without that, two identical points would be called
  "separated" about twice as often as with it. The m = k - 1 doubled p-values are adjusted with
  Holm-Bonferroni; the tie set is the leader and every point whose adjusted p exceeds level.
* :func:`detectable_diff`: with s the pooled sd of log throughput (about the run-to-run CV),
  n rounds per point, df = 2(n - 1), the smallest relative difference found with the given
  power at Holm's strictest step is ``exp((t_{1-level/(2m),df} + t_{power,df}) * s *
  sqrt(2/n)) - 1``. :func:`rounds_needed` solves the same formula for n.

The verdict is "separated" when the tie set is the leader alone, "tie" when it holds more, and
"too_noisy" when some point has fewer than 2 rounds: no spread across rounds can be measured,
so no test is run and every point is in the tie set. (A large CV with 2 or more rounds is not
"too_noisy": the test is still valid and returns a tie; ``detectable_diff_frac`` says how
coarse it was.)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from batchscope.core.stats import t_quantile, t_sf

#: What ``Verdict.test`` and the recommendation's ``test`` say was done.
TEST_NAME = "welch_log_t_directional_holm"
VERDICTS = ("separated", "tie", "too_noisy", "disturbed")
#: Power the detectable difference and the rounds to separate are computed for.
POWER = 0.8
#: Beyond this many rounds a difference counts as indistinguishable (rounds_needed -> None).
MAX_ROUNDS = 10_000


# ---------------------------------------------------------------- one point, two points


def _rounds(values: Iterable[float]) -> np.ndarray:
    x = np.asarray(list(values), dtype=float)
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        raise ValueError(f"need one or more positive finite throughputs, got {values!r}")
    return x


def point_stats(values: Iterable[float]) -> dict[str, Any]:
    """Median, 95% interval, run-to-run CV and round count of one point's per-round throughputs.

    ``ci_low``/``ci_high``: exp(mean(log x) -/+ t_{0.975, n-1} sd(log x) / sqrt(n)), the t
    interval of the mean of log throughput, back-transformed (see the module docstring for why
    not an order-statistic interval). ``cv``: std(x, ddof=1) / mean(x). With one round the
    interval, ``cv`` and ``sd_log`` are None. ``mean_log``/``sd_log`` feed the tests.
    """
    x = _rounds(values)
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
        half = t_quantile(0.975, n - 1) * sd_log / math.sqrt(n)
        out["sd_log"] = sd_log
        out["ci_low"] = math.exp(out["mean_log"] - half)
        out["ci_high"] = math.exp(out["mean_log"] + half)
        out["cv"] = float(x.std(ddof=1) / x.mean())
    return out


@dataclass(frozen=True)
class WelchResult:
    """Welch's t on log throughput; ``p_value`` is one-sided, H1: the leader is faster."""

    t: float
    df: float
    p_value: float
    diff_log: float  # mean(log leader) - mean(log other)


def welch_log_test(leader: Iterable[float], other: Iterable[float]) -> WelchResult:
    """Welch's one-sided t-test of "leader is faster than other" on per-round log throughput.

    t = (mean(log a) - mean(log b)) / se, se^2 = s_a^2/n_a + s_b^2/n_b, and the
    Welch-Satterthwaite df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1)).
    Needs 2+ rounds each. If both spreads are exactly zero, p is 0 when the leader is ahead
    and 1 otherwise.
    """
    a, b = np.log(_rounds(leader)), np.log(_rounds(other))
    if a.size < 2 or b.size < 2:
        raise ValueError("Welch's test needs at least 2 rounds per point")
    diff = float(a.mean() - b.mean())
    va, vb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se2 = va + vb
    if se2 == 0.0:
        return WelchResult(math.copysign(math.inf, diff), math.inf, 0.0 if diff > 0 else 1.0, diff)
    df = se2 * se2 / (va * va / (a.size - 1) + vb * vb / (b.size - 1))
    t = diff / math.sqrt(se2)
    return WelchResult(t, df, t_sf(t, df), diff)


def holm(p_values: Mapping[Hashable, float]) -> dict[Hashable, float]:
    """Holm-Bonferroni adjusted p-values: max over j <= i of min(1, (m - j + 1) p_(j))."""
    m = len(p_values)
    adjusted, running = {}, 0.0
    for rank, key in enumerate(sorted(p_values, key=p_values.__getitem__)):
        running = max(running, min(1.0, (m - rank) * p_values[key]))
        adjusted[key] = running
    return {key: adjusted[key] for key in p_values}


# ---------------------------------------------------------------- power


def detectable_diff(sd_log: float, n: int, m: int, level: float, power: float = POWER) -> float:
    """Smallest relative difference n rounds per point detect with ``power`` among m comparisons.

    exp((t_{1-level/(2m), 2(n-1)} + t_{power, 2(n-1)}) * sd_log * sqrt(2/n)) - 1: the doubled
    one-sided test at Holm's strictest step, df of Welch's test for equal n and spread.
    """
    if n < 2 or m < 1:
        raise ValueError(f"need n >= 2 rounds and m >= 1 comparisons, got n={n}, m={m}")
    df = 2 * (n - 1)
    t_sum = t_quantile(1.0 - level / (2 * m), df) + t_quantile(power, df)
    return math.expm1(t_sum * sd_log * math.sqrt(2.0 / n))


def rounds_needed(
    diff_frac: float, sd_log: float, m: int, level: float, power: float = POWER
) -> int | None:
    """Fewest rounds per point whose :func:`detectable_diff` is at most ``diff_frac``.

    None when ``diff_frac`` <= 0 (nothing to separate) or more than MAX_ROUNDS would be needed.
    """
    if diff_frac <= 0 or detectable_diff(sd_log, MAX_ROUNDS, m, level, power) > diff_frac:
        return None
    lo, hi = 1, 2  # detectable(lo) > diff_frac (or lo too small), detectable(hi) <= diff_frac
    while detectable_diff(sd_log, hi, m, level, power) > diff_frac:
        lo, hi = hi, min(2 * hi, MAX_ROUNDS)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if detectable_diff(sd_log, mid, m, level, power) <= diff_frac:
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------- the verdict


@dataclass(frozen=True)
class Verdict:
    """What :func:`decide` found. Keys are the caller's point keys; tie_set starts with the
    leader, then the rest by median, highest first. ``p_values`` are Holm-adjusted (None for
    the leader, and for all when too_noisy); ``raw_p_values`` the doubled one-sided p before
    adjustment. ``rounds_to_separate`` covers the tie set except the leader."""

    leader: Hashable
    tie_set: tuple[Hashable, ...]
    verdict: str
    test: str
    level: float
    n_rounds: int
    p_values: dict[Hashable, float | None]
    raw_p_values: dict[Hashable, float | None]
    stats: dict[Hashable, dict[str, Any]]
    detectable_diff_frac: float | None
    rounds_to_separate: dict[Hashable, int | None]


def _ranked(points: Mapping[Hashable, Iterable[float]]):
    """Per-round values and stats per point, and all keys by median (highest first)."""
    if not points:
        raise ValueError("need at least one point")
    values = {key: _rounds(v) for key, v in points.items()}
    stats = {key: point_stats(v) for key, v in values.items()}
    order = sorted(stats, key=lambda k: (-stats[k]["median"], -stats[k]["mean_log"]))
    return values, stats, order


def _compare(points: Mapping[Hashable, Iterable[float]], level: float):
    """Stats per point, the leader, all keys by median (highest first), raw and Holm p."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"need 0 < level < 1, got {level}")
    values, stats, order = _ranked(points)
    leader = order[0]
    raw: dict[Hashable, float | None] = {key: None for key in order}
    adjusted = dict(raw)
    if min(s["n_rounds"] for s in stats.values()) >= 2 and len(order) > 1:
        doubled = {
            key: min(1.0, 2.0 * welch_log_test(values[leader], values[key]).p_value)
            for key in order[1:]
        }
        raw.update(doubled)
        adjusted.update(holm(doubled))
    return stats, order, raw, adjusted


def _pooled_sd_log(stats: Iterable[Mapping[str, Any]]) -> float:
    dfs = [(s["n_rounds"] - 1, s["sd_log"]) for s in stats]
    return math.sqrt(sum(df * sd * sd for df, sd in dfs) / sum(df for df, _ in dfs))


def decide(points: Mapping[Hashable, Iterable[float]], level: float) -> Verdict:
    """The leader, the points not significantly slower than it (Holm over the comparisons
    with the leader at ``level``) and the verdict. ``points`` maps a key to per-round
    throughputs (one number per fresh process, never within-process windows)."""
    stats, order, raw, adjusted = _compare(points, level)
    leader, m = order[0], len(order) - 1
    n_rounds = min(s["n_rounds"] for s in stats.values())
    common = dict(
        leader=leader,
        test=TEST_NAME,
        level=level,
        n_rounds=n_rounds,
        p_values=adjusted,
        raw_p_values=raw,
        stats=stats,
    )
    if n_rounds < 2:
        return Verdict(
            **common,
            tie_set=tuple(order),
            verdict="too_noisy",
            detectable_diff_frac=None,
            rounds_to_separate={key: None for key in order[1:]},
        )
    tie_set = (leader, *[key for key in order[1:] if adjusted[key] > level])
    detectable = detectable_diff(_pooled_sd_log(stats.values()), n_rounds, m, level) if m else None
    rounds = {}
    for key in tie_set[1:]:
        a, b = stats[leader], stats[key]
        pair_sd = math.sqrt(0.5 * (a["sd_log"] ** 2 + b["sd_log"] ** 2))
        observed = math.expm1(a["mean_log"] - b["mean_log"])
        rounds[key] = rounds_needed(observed, pair_sd, m, level)
    return Verdict(
        **common,
        tie_set=tie_set,
        verdict="separated" if len(tie_set) == 1 else "tie",
        detectable_diff_frac=detectable,
        rounds_to_separate=rounds,
    )


def eliminated(
    points: Mapping[Hashable, Iterable[float]], level: float, *, looks: int = 1
) -> set[Hashable]:
    """Points significantly slower than the leader now: the ones a race may stop measuring.

    The test of :func:`decide` at ``level / looks``: a race that looks after each of up to
    ``looks`` rounds splits ``level`` over them (Bonferroni over looks). A smaller level rejects
    a subset, so nothing eliminated is in the tie set ``decide`` gives on the same data; with
    fewer than 2 rounds for some point nothing is eliminated.
    """
    if looks < 1:
        raise ValueError(f"need looks >= 1, got {looks}")
    _, order, _, adjusted = _compare(points, level / looks)
    return {
        key for key in order[1:] if adjusted[key] is not None and adjusted[key] <= level / looks
    }


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


def disturbed_verdict(points: Mapping[Hashable, Iterable[float]], level: float) -> Verdict:
    """The verdict that names no winner: every point in the tie set, in median order, no test.
    Its stats are over all the runs given (loaded ones included: they are what was seen)."""
    _, stats, order = _ranked(points)
    none = {key: None for key in order}
    return Verdict(
        leader=order[0],
        tie_set=tuple(order),
        verdict="disturbed",
        test=TEST_NAME,
        level=level,
        n_rounds=min(s["n_rounds"] for s in stats.values()),
        p_values=none,
        raw_p_values=dict(none),
        stats=stats,
        detectable_diff_frac=None,
        rounds_to_separate={key: None for key in order[1:]},
    )
