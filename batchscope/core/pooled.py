"""The pooled model of a group's runs: one run-to-run variance for all its points (scipy.stats).

Every grid point is measured in several *runs*, each its own process (rounds, and seeds); a
point's evidence is the list of its runs' throughputs (samples/s). Windows inside one process
share that process's luck, so they are never runs here. :mod:`batchscope.core.verdict` compares
the points on this model.

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
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Family level of the homogeneity check (Bonferroni over the points).
HOMOGENEITY_LEVEL = 0.01
#: The rounds are kept as blocks when their F test has p below this (Bancroft 1944).
BLOCKING_LEVEL = 0.25
#: A point with no run-to-run spread at all (identical runs): its variance, to stay finite.
TINY_VAR = 1e-18

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
        return math.sqrt(max(c[i, i] + c[j, j] - 2.0 * c[i, j], TINY_VAR))

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
        var = max(sse / df, TINY_VAR)
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
        cov[i, i] = max(float(logs[i].var(ddof=1)), TINY_VAR) / n[i]
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
