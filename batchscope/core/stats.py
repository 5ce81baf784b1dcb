"""Small statistics that need neither torch nor scipy (the reporting side imports them).

``mean_ci`` is the one confidence interval of a mean over seeds that every floor uses: the
summary's points table, the figures' error bars, the convergence report and
``batchscope.core.convergence.summarize_seeds``. NumPy only, no pandas: the benchmark
environment has no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np


def mean_ci(values: Iterable[Any], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite numbers among ``values``, the interval two-sided
    Student t at ``confidence``: mean ± t_critical(n − 1) · s/√n with s the sample standard
    deviation (ddof 1).

    Anything that is not a finite number (None, NaN, ±inf, text that does not parse) is left
    out. The interval is NaN with fewer than two values, everything NaN with none.
    """
    data = _finite(values)
    n = len(data)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if n < 2:
        return mean, math.nan, math.nan
    half = t_critical(n - 1, confidence) * float(data.std(ddof=1)) / math.sqrt(n)
    return mean, mean - half, mean + half


def _finite(values: Iterable[Any]) -> np.ndarray:
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


def t_critical(df: int, confidence: float = 0.95) -> float:
    """Two-sided Student t critical value t such that P(|T_df| ≤ t) = ``confidence``.

    Uses the closed form of P(|T| ≤ t) for whole degrees of freedom (Abramowitz & Stegun
    26.7.3/26.7.4, with θ = atan(t/√df)) and bisection on θ.
    """
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"need df >= 1 and 0 < confidence < 1, got df={df}, {confidence}")
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_central_probability(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan(0.5 * (lo + hi))


def _t_central_probability(theta: float, df: int) -> float:
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
