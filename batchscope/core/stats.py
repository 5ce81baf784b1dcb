"""Small statistics that need no torch (the reporting side imports them).

``mean_ci`` is the one confidence interval of a mean over seeds that every floor uses: the
summary's points table, the figures' error bars, the convergence report and
``batchscope.core.convergence.summarize_seeds``. NumPy, and ``scipy.stats`` for the Student t
quantile, imported when an interval is computed (the benchmark process, which imports this
module, never computes one). No pandas: the benchmark environment has no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def mean_ci(values: Iterable[Any], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite numbers among ``values``, the interval two-sided
    Student t at ``confidence``: mean ± t(n − 1) · s/√n, with t the two-sided quantile
    (``scipy.stats.t``) and s the sample standard deviation (ddof 1).

    Anything that is not a finite number (None, NaN, ±inf, text that does not parse) is left
    out. The interval is NaN with fewer than two values, everything NaN with none.
    """
    data = finite(values)
    n = len(data)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if n < 2:
        return mean, math.nan, math.nan
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * float(data.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def log_mean_ci(values: Iterable[Any], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(geometric mean, low, high)`` of the positive finite numbers among ``values``: the
    Student-t interval of :func:`mean_ci` taken on their logarithms and mapped back, so that an
    interval of a duration never reaches below zero and is as wide in ratio on either side.
    Zero, negative and non-finite values are left out."""
    logs = [math.log(v) for v in finite(values) if v > 0]
    mean, low, high = mean_ci(logs, confidence)
    return tuple(math.exp(x) if math.isfinite(x) else math.nan for x in (mean, low, high))


def finite(values: Iterable[Any]) -> np.ndarray:
    """The values that are finite numbers, as floats, in order."""
    numbers = []
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            numbers.append(number)
    return np.asarray(numbers, dtype=float)
