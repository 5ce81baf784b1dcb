"""Small statistics that need neither torch nor scipy (the reporting side imports them)."""

from __future__ import annotations

import math


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
