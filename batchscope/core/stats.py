"""Small statistics that need neither torch nor scipy (the reporting side imports them).

``mean_ci`` is the one confidence interval of a mean over seeds that every floor uses: the
summary's points table, the figures' error bars, the convergence report and
``batchscope.core.convergence.summarize_seeds``. NumPy only, no pandas: the benchmark
environment has no pandas.

The Student t distribution for any (also fractional) degrees of freedom, without scipy:
``t_sf`` (its tail, from the regularized incomplete beta function ``betainc``, a modified-Lentz
continued fraction) and ``t_quantile`` (Newton steps on ``t_sf``): the one t of every interval
here and of the verdict across rounds (``batchscope.core.verdict``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import numpy as np


def mean_ci(values: Iterable[Any], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the finite numbers among ``values``, the interval two-sided
    Student t at ``confidence``: mean ± t(n − 1) · s/√n, with t the two-sided quantile
    (:func:`t_quantile`) and s the sample standard deviation (ddof 1).

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
    half = t_quantile(0.5 + confidence / 2, n - 1) * float(data.std(ddof=1)) / math.sqrt(n)
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


# ---------------------------------------------------------------- Student t without scipy

_TINY = 1e-300
_EPS = 1e-15


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), evaluated with the modified Lentz method.

    1 / (1 + d1 / (1 + d2 / (1 + ...))) with d_{2j+1} = -(a+j)(a+b+j) x / ((a+2j)(a+2j+1))
    and d_{2j} = j (b-j) x / ((a+2j-1)(a+2j)); converges fast for x < (a+1)/(a+b+2).
    """
    f, c, d = _TINY, _TINY, 0.0
    for i in range(1, 20_000):
        if i == 1:
            numerator = 1.0
        else:
            j, odd = divmod(i - 1, 2)
            if odd:  # d_{2j+1}
                numerator = -(a + j) * (a + b + j) * x / ((a + 2 * j) * (a + 2 * j + 1))
            else:  # d_{2j}
                numerator = j * (b - j) * x / ((a + 2 * j - 1) * (a + 2 * j))
        d = 1.0 + numerator * d
        d = 1.0 / (d if abs(d) > _TINY else _TINY)
        c = 1.0 + numerator / c
        c = c if abs(c) > _TINY else _TINY
        f *= c * d
        if abs(c * d - 1.0) < _EPS:
            return f
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) = B(x; a, b) / B(a, b), for a, b > 0."""
    return _betainc(a, b, x, 1.0 - x)


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b) given y = 1 - x as well, so a caller can pass a y that x would round away."""
    if a <= 0 or b <= 0:
        raise ValueError(f"need a, b > 0, got a={a}, b={b}")
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
    log_front += b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, y) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` > 0 degrees of freedom (df need not be whole).

    Uses P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2).
    """
    if df <= 0 or math.isnan(t):
        raise ValueError(f"need df > 0 and a number t, got df={df}, t={t}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(0.5 * df, 0.5, df / (df + t * t), t * t / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _t_density(t: float, df: float) -> float:
    log_c = math.lgamma(0.5 * (df + 1)) - math.lgamma(0.5 * df) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - 0.5 * (df + 1) * math.log1p(t * t / df))


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p (df need not be whole): Newton steps on :func:`t_sf`, kept
    inside a bracket that halves whenever a step would leave it."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"need 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 1.0 - p
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > tail:
        lo, hi = hi, 2.0 * hi
    t = 0.5 * (lo + hi)
    for _ in range(200):
        excess = t_sf(t, df) - tail  # > 0: t is too small
        if excess == 0.0:
            return t
        lo, hi = (t, hi) if excess > 0 else (lo, t)
        new = t + excess / _t_density(t, df)
        if not lo < new < hi:
            new = 0.5 * (lo + hi)
        if abs(new - t) <= 1e-14 * new:
            return new
        t = new
    return t
