"""Do the reruns differ more than each rerun's own model says? (part (a) of the stability
benchmark)

Each rerun's verdict rests on its pooled model (``batchscope.core.pooled.fit``: one run-to-run
variance per group, rounds as blocks where that helps), which assumes that a point's runs in
one sweep are independent draws around the point's throughput *in that sweep*. If the machine
moved a point between sweeps (a state that lasts a sweep and slows one batch size more than
another), the reruns' estimates differ by more than their covariances allow, and a tie set that
holds the best with 95% in one sweep can miss another sweep's pick.

The check, per group, on the points every rerun measured: each rerun's estimates as contrasts
against one point (which removes a rerun's overall speed, as the verdict's ratios do), ``d_s``
with covariance ``C_s`` from that rerun's fit; under "the same ratios in every rerun",
``Q = sum_s (d_s - d)' C_s^-1 (d_s - d)``, with ``d`` the precision-weighted mean, is
chi-square with (reruns - 1) x (points - 1) degrees of freedom (Cochran's test of homogeneity,
multivariate; the fits' variances taken as known, which their 60-100 degrees of freedom here
allow). ``Q / df`` is the overdispersion: about 1 when the reruns agree as the model says,
k when the differences between reruns are about k times the variance each rerun claims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from batchscope.core import pooled

#: Per point, its undisturbed ok runs as (round, samples_per_s).
RoundRuns = Mapping[Any, Sequence[tuple[int, float]]]


def fits_of(reruns: Sequence[RoundRuns]) -> dict[tuple, list[pooled.Fit | None]]:
    """Per group, each rerun's pooled fit of its points (None where the rerun has none)."""
    groups = sorted({key.group for runs in reruns for key in runs}, key=str)
    out: dict[tuple, list[pooled.Fit | None]] = {}
    for group in groups:
        out[group] = []
        for runs in reruns:
            points = {k: v for k, v in runs.items() if k.group == group and v}
            if len(points) < 2:
                out[group].append(None)
                continue
            out[group].append(
                pooled.fit(
                    {k: [rate for _, rate in v] for k, v in points.items()},
                    blocks={k: [r for r, _ in v] for k, v in points.items()},
                )
            )
    return out


def homogeneity(fits: Sequence[pooled.Fit | None], leave_out: Any = None) -> dict[str, Any] | None:
    """Cochran's Q of the reruns' contrasts (module docstring), or None when fewer than two
    reruns share two points with a variance each. ``leave_out``: a point whose contrasts are
    left out (each fit stays as it is)."""
    from scipy import stats

    usable = [f for f in fits if f is not None and f.df > 0]
    if len(usable) < 2:
        return None
    common = [k for k in usable[0].keys if all(k in f.keys for f in usable) and k != leave_out]
    if len(common) < 2:
        return None
    contrasts, precisions = [], []
    for f in usable:
        idx = [f.keys.index(k) for k in common]
        est, cov = f.estimate[idx], f.cov[np.ix_(idx, idx)]
        d = est[1:] - est[0]
        c = cov[1:, 1:] - cov[1:, :1] - cov[:1, 1:] + cov[0, 0]
        contrasts.append(d)
        precisions.append(np.linalg.inv(c))
    pairs = list(zip(precisions, contrasts, strict=True))
    mean = np.linalg.solve(sum(precisions), sum(p @ d for p, d in pairs))
    q = float(sum((d - mean) @ p @ (d - mean) for p, d in pairs))
    df = (len(usable) - 1) * (len(common) - 1)
    return {
        "q": q,
        "df": df,
        "p": float(stats.chi2.sf(q, df)),
        "overdispersion": q / df,
        "points": len(common),
        "reruns": len(usable),
    }


def carrier(fits: Sequence[pooled.Fit | None]) -> dict[str, Any] | None:
    """The point whose leaving out lowers the overdispersion most, and the figure without it
    (:func:`homogeneity` with ``leave_out``): whether the reruns' disagreement is spread over
    the group or sits in one point. None with fewer than three common points."""
    whole = homogeneity(fits)
    if whole is None:
        return None
    found = {}
    for key in {k for f in fits if f is not None for k in f.keys}:
        without = homogeneity(fits, leave_out=key)
        if without is not None and without["points"] < whole["points"]:
            found[key] = without
    if not found:
        return None
    key = min(found, key=lambda k: (found[k]["overdispersion"], str(k)))
    return {"point": key, **found[key]}
