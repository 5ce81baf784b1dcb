"""The convergence report's fits: the knee of the steps-to-target curve, the regimes, and
B_simple over training.

The knee
--------
McCandlish et al.'s trade-off S = S_min + E_min/B = S_min (1 + B_noise/B) is fitted here by least
squares in log steps, min over (S_min, B_noise) of Σ (log S_i − log S_min − log(1 + B_noise/B_i))²:
the distance seen on the log-log plot. For a fixed B_noise the best log S_min is the mean of
log S_i − log(1 + B_noise/B_i), so the fit is a one-dimensional search over B_noise (a geometric
grid, refined by golden-section search). A best B_noise at the grid's top means the steps still
fall as 1/B at the largest batch (the knee lies beyond it); at its bottom, larger batches never
helped. Only batch sizes whose seeds all reached the target enter the fit (``fit_table``): the
mean over the seeds that reached it is biased low where some did not. The curve has two
parameters, so it passes exactly through any two points whatever their steps: a fit needs at
least three batch sizes (``MIN_FIT_SIZES``) to say anything about the curve's shape. Its
interval is a percentile bootstrap over seeds (each batch size's seeds resampled with
replacement); with three seeds it shows the seed-to-seed noise roughly, and understates it.

Regimes, by the fitted curve's log-log slope −B_noise/(B + B_noise): perfect scaling while
B ≤ B_noise/4 (doubling B still nearly halves the steps), no benefit from B ≥ 4·B_noise, diminishing
returns between (``REGIME_FACTOR``). ``local_slopes`` gives the measured slope between
neighbouring batch sizes, with no model.

B_simple over training (``noise_history``): measurements are binned by samples seen and pooled
over seeds: B_simple of a bin is Σ tr(Σ)/Σ |G|² of its measurements (the ratio of means,
McCandlish et al. appendix A.1), its interval a bootstrap over the measurements.

Plain NumPy and pandas: no plotting, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from batchscope.report.documents import sizes_text

CONFIDENCE = 0.95

#: Regime thresholds on the fitted curve's log-log slope −B_noise/(B + B_noise): perfect scaling
#: while B ≤ B_noise/4 (slope ≤ −0.8), no benefit from B ≥ 4·B_noise (slope ≥ −0.2).
REGIME_FACTOR = 4.0
REGIMES = ("perfect scaling", "diminishing returns", "no benefit")

#: A batch size within this factor of a reference (B_simple, the knee) is "around" it.
AROUND_FACTOR = 2.0

#: Batch sizes a knee fit needs: two determine S_min and B_noise exactly (no test of the shape).
MIN_FIT_SIZES = 3

#: The knee search: B_noise from the smallest batch / GRID_SPAN to the largest × GRID_SPAN.
GRID_SPAN = 1000.0
GRID_POINTS = 481
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0

#: Bins of samples seen for B_simple over training.
NOISE_BINS = 8

#: Columns of ``noise_history``.
NOISE_HISTORY_COLUMNS = ["samples_seen", "b_simple", "low", "high", "n"]


def relation(batch_size: float, reference: float | None, factor: float = AROUND_FACTOR) -> str:
    """``below``, ``around`` (within ``factor`` either way) or ``above`` ``reference``."""
    if reference is None or not math.isfinite(reference) or reference <= 0:
        raise ValueError(f"relation needs a positive reference, got {reference!r}")
    if batch_size * factor < reference:
        return "below"
    if batch_size > reference * factor:
        return "above"
    return "around"


def regime(batch_size: float, b_noise: float) -> str:
    """The regime of ``batch_size`` on the curve S = S_min (1 + B_noise/B) (see the module)."""
    if batch_size * REGIME_FACTOR <= b_noise:
        return REGIMES[0]
    if batch_size >= REGIME_FACTOR * b_noise:
        return REGIMES[2]
    return REGIMES[1]


# --------------------------------------------------------------------------------------------
# The knee: S = S_min (1 + B_noise/B), least squares in log steps
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knee:
    """The fitted curve and its knee.

    ``b_noise`` is the knee (None when ``edge`` says the best fit lies at the search's edge:
    ``above``, steps still ∝ 1/B at the largest batch; ``below``, larger batches never helped),
    ``s_min`` the fewest steps (B → ∞), ``interval`` the bootstrap 95% interval of ``b_noise``
    (an end may be 0 or inf when resamples hit the edges; None without resamples),
    ``rms_log_residual`` the fit's error in natural-log steps, ``points`` the (B, mean steps)
    it was fitted to.
    """

    b_noise: float | None
    s_min: float
    edge: str | None
    interval: tuple[float, float] | None
    rms_log_residual: float
    points: tuple[tuple[float, float], ...]

    def steps(self, batch_size: np.ndarray | float) -> np.ndarray | float:
        """The fitted steps at ``batch_size`` (1/B scaling when the knee is above the range)."""
        b = np.asarray(batch_size, dtype=float)
        if self.edge == "above":
            return self.s_min * self._b_top / b
        if self.edge == "below":
            return self.s_min + 0.0 * b
        return self.s_min * (1.0 + self.b_noise / b)

    @property
    def _b_top(self) -> float:
        return max(b for b, _ in self.points)


def _grid(batch: np.ndarray) -> np.ndarray:
    return np.geomspace(batch.min() / GRID_SPAN, batch.max() * GRID_SPAN, GRID_POINTS)


def _ssr(log_steps: np.ndarray, batch: np.ndarray, b_noise: np.ndarray) -> np.ndarray:
    """Sum of squared log residuals at each B_noise (last axis of ``log_steps`` = batch sizes).

    ``log_steps`` has shape (..., K), ``b_noise`` (G,); the result (..., G)."""
    shape = np.log1p(b_noise[:, None] / batch[None, :])  # (G, K)
    resid = log_steps[..., None, :] - shape  # (..., G, K)
    resid = resid - resid.mean(axis=-1, keepdims=True)  # the best log S_min for each B_noise
    return (resid**2).sum(axis=-1)


def fit_knee(batch_sizes: Sequence[float], steps: Sequence[float], *, bootstrap=None) -> Knee:
    """Fit S = S_min (1 + B_noise/B) to (batch size, steps) points (see the module docstring).

    ``bootstrap``, if given, is a sequence of resampled step arrays (each aligned with
    ``batch_sizes``) whose fits give ``interval``.
    """
    batch = np.asarray(batch_sizes, dtype=float)
    log_steps = np.log(np.asarray(steps, dtype=float))
    if len(np.unique(batch)) < MIN_FIT_SIZES:
        raise ValueError(
            f"the knee fit needs points at {MIN_FIT_SIZES} or more batch sizes: the curve's two "
            "parameters pass exactly through any two"
        )
    if not (np.all(batch > 0) and np.all(np.isfinite(log_steps))):
        raise ValueError("batch sizes and steps must be positive and finite")
    grid = _grid(batch)
    best = int(np.argmin(_ssr(log_steps, batch, grid)))
    edge = "below" if best == 0 else "above" if best == len(grid) - 1 else None
    b_noise, s_min, resid = _fit_curve(log_steps, batch, grid, best, edge)
    interval = None
    if bootstrap is not None and len(bootstrap):
        interval = _bootstrap_interval(np.asarray(bootstrap, dtype=float), batch, grid)
    order = np.argsort(batch)
    return Knee(
        b_noise=b_noise,
        s_min=s_min,
        edge=edge,
        interval=interval,
        rms_log_residual=float(np.sqrt(np.mean(resid**2))),
        points=tuple(zip(batch[order].tolist(), np.exp(log_steps[order]).tolist(), strict=True)),
    )


def _fit_curve(
    log_steps: np.ndarray, batch: np.ndarray, grid: np.ndarray, best: int, edge: str | None
) -> tuple[float | None, float, np.ndarray]:
    """(B_noise, S_min, log residuals) of the curve whose best grid point is ``best``: refined
    between its neighbours inside the grid, the 1/B line or a constant at its edges."""
    if edge is None:  # golden-section refinement between the best point's neighbours
        b_noise = _refine(log_steps, batch, math.log(grid[best - 1]), math.log(grid[best + 1]))
        shape = np.log1p(b_noise / batch)
        s_min = math.exp(float((log_steps - shape).mean()))
        return b_noise, s_min, log_steps - math.log(s_min) - shape
    if edge == "above":  # S = c/B: the knee is beyond the largest batch
        b_top = batch.max()
        log_c = float((log_steps + np.log(batch / b_top)).mean())
        # S_min: steps at the largest batch, on the 1/B line
        return None, math.exp(log_c), log_steps - log_c + np.log(batch / b_top)
    s_min = math.exp(float(log_steps.mean()))  # S = S_min: no batch size helped
    return None, s_min, log_steps - math.log(s_min)


def _bootstrap_interval(
    bootstrap: np.ndarray, batch: np.ndarray, grid: np.ndarray
) -> tuple[float, float]:
    """Percentile interval of the grid's best B_noise over resampled steps (0 or inf where a
    resample's best lies at the grid's bottom or top)."""
    picks = np.argmin(_ssr(np.log(bootstrap), batch, grid), axis=-1)
    values = np.where(picks == 0, 0.0, np.where(picks == len(grid) - 1, np.inf, grid[picks]))
    tail = (1 - CONFIDENCE) / 2
    return (
        float(np.quantile(values, tail, method="lower")),
        float(np.quantile(values, 1 - tail, method="higher")),
    )


def _refine(log_steps: np.ndarray, batch: np.ndarray, lo: float, hi: float) -> float:
    """Golden-section search for the best B_noise on [e^lo, e^hi] (in log B_noise)."""
    ratio = (math.sqrt(5) - 1) / 2

    def cost(log_b: float) -> float:
        return float(_ssr(log_steps, batch, np.array([math.exp(log_b)]))[0])

    a, b = lo, hi
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = cost(c), cost(d)
    for _ in range(60):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = cost(d)
    return math.exp((a + b) / 2)


def _bootstrap_means(values: Sequence[np.ndarray], resamples: int, seed: int) -> np.ndarray:
    """(resamples, K) means of each batch size's values resampled with replacement."""
    rng = np.random.default_rng(seed)
    columns = [v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1) for v in values]
    return np.column_stack(columns)


def fit_table(table: pd.DataFrame) -> tuple[Knee | None, str]:
    """The knee of a model's per-batch-size table (``convergence_tables.batch_table``), fitted to
    the batch sizes whose seeds all reached the target, and a sentence on what it was fitted to
    (or why it was not: fewer than MIN_FIT_SIZES such batch sizes gives None)."""
    points = table[table["all_reached"] & table["steps_mean"].notna()]
    partly = ~table["all_reached"] & (table["n_reached"] > 0)
    skipped = table.loc[partly, "effective_batch_size"].tolist()
    if len(points) < MIN_FIT_SIZES:
        return None, (
            "Too few batch sizes reached the target in every seed to fit the knee "
            f"({len(points)}; at least {MIN_FIT_SIZES} needed: the curve's two parameters pass "
            "exactly through any two points, so two would show nothing about its shape)."
        )
    values = [np.asarray(v, dtype=float) for v in points["steps_values"]]
    # with one seed per batch size there is nothing to resample: no interval
    boot = None
    if any(len(v) > 1 for v in values):
        boot = _bootstrap_means(values, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
    sizes = points["effective_batch_size"].tolist()
    knee = fit_knee(sizes, points["steps_mean"].tolist(), bootstrap=boot)
    note = f"Fitted to {len(points)} batch sizes whose seeds all reached the target"
    if skipped:
        note += f"; left out (not every seed reached it): {sizes_text(skipped)}"
    return knee, note + "."


def regime_of(batch: float, knee: Knee) -> str:
    """The regime of ``batch`` on the fitted curve (the only one when the knee lies at an edge)."""
    if knee.edge == "above":
        return REGIMES[0]
    if knee.edge == "below":
        return REGIMES[2]
    return regime(batch, knee.b_noise)


def local_slopes(table: pd.DataFrame) -> list[float]:
    """Measured log-log slope of mean steps from each batch size to the next larger one (model
    free: −1 is perfect scaling, 0 no benefit)."""
    slopes = []
    rows = list(table.itertuples(index=False))
    for here, there in zip(rows, [*rows[1:], None], strict=True):
        if there is None or not (here.steps_mean > 0 and there.steps_mean > 0):
            slopes.append(math.nan)
            continue
        growth = there.effective_batch_size / here.effective_batch_size
        slopes.append(math.log(there.steps_mean / here.steps_mean) / math.log(growth))
    return slopes


# --------------------------------------------------------------------------------------------
# B_simple over training
# --------------------------------------------------------------------------------------------


def noise_history(rows: pd.DataFrame, bins: int = NOISE_BINS) -> pd.DataFrame:
    """B_simple over training for one batch size's runs: measurements binned by samples seen.

    Each measurement (squared norms of the mean gradient over B_small and B_big samples) gives
    unbiased |G|² = (B_big|G_big|² − B_small|G_small|²)/(B_big − B_small) and
    tr Σ = (|G_small|² − |G_big|²)/(1/B_small − 1/B_big) (McCandlish et al., A.1); a bin's
    B_simple is Σ tr Σ / Σ |G|² over its measurements (all seeds), its 95% interval a percentile
    bootstrap over them. Columns: ``samples_seen`` (the bin's middle), ``b_simple``, ``low``,
    ``high``, ``n``.
    """
    measured = _noise_measurements(rows)
    if measured is None:
        return pd.DataFrame(columns=NOISE_HISTORY_COLUMNS)
    g2, trace, seen = measured
    edges = np.linspace(0.0, seen.max(), bins + 1)
    which = np.clip(np.searchsorted(edges, seen, side="left") - 1, 0, bins - 1)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = []
    for k in range(bins):
        pick = which == k
        n = int(pick.sum())
        if n == 0:
            continue
        value, low, high = _binned_ratio(g2[pick], trace[pick], rng)
        middle = (edges[k] + edges[k + 1]) / 2
        out.append({"samples_seen": middle, "b_simple": value, "low": low, "high": high, "n": n})
    return pd.DataFrame(out)


def _noise_measurements(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Per measurement of ``rows``: unbiased |G|², tr Σ, and the samples seen when it was taken;
    None when the rows hold no usable measurement."""
    need = ["noise_sq_small", "noise_sq_big", "noise_scale_batch_small", "noise_scale_batch_big"]
    if any(c not in rows for c in need):
        return None
    data = rows.copy()
    for column in need:
        data[column] = pd.to_numeric(data[column], errors="coerce")
    data = data.dropna(subset=need)
    data = data[data["noise_scale_batch_big"] > data["noise_scale_batch_small"]]
    if data.empty:
        return None
    small, big = data["noise_scale_batch_small"], data["noise_scale_batch_big"]
    sq_small, sq_big = data["noise_sq_small"], data["noise_sq_big"]
    g2 = ((big * sq_big - small * sq_small) / (big - small)).to_numpy(float)
    trace = ((sq_small - sq_big) / (1.0 / small - 1.0 / big)).to_numpy(float)
    return g2, trace, data["samples_seen"].to_numpy(float)


def _binned_ratio(
    g: np.ndarray, t: np.ndarray, rng: np.random.Generator
) -> tuple[float, float, float]:
    """B_simple of one bin, Σ tr Σ / Σ |G|² (inf when Σ |G|² ≤ 0), and its bootstrap 95%
    interval over the bin's measurements (NaN with fewer than two)."""
    n = len(g)
    value = t.sum() / g.sum() if g.sum() > 0 else math.inf
    low = high = math.nan
    if n >= 2:
        idx = rng.integers(0, n, size=(500, n))
        gs, ts = g[idx].sum(axis=1), t[idx].sum(axis=1)
        ratios = np.where(gs > 0, ts / np.where(gs > 0, gs, 1.0), np.inf)
        low = float(np.quantile(ratios, 0.025, method="lower"))
        high = float(np.quantile(ratios, 0.975, method="higher"))
    return value, low, high
