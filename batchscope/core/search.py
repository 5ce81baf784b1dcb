"""The largest batch size that fits: double until a failure, then close in on the boundary.

Pure logic, no torch: :func:`search` calls ``trial(batch_size) -> TrialResult`` and decides which
batch size to try next. ``python -m batchscope.bench.maxbatch`` supplies a trial that runs one short
benchmark in a fresh process; tests supply fakes with a known limit.

How it searches
---------------
1. **Doubling** from ``start`` (``start``, 2·``start``, 4·``start``, …, then ``cap`` itself) until
   a size fails or ``cap`` fits. If ``start`` itself fails, **halving** goes down instead until
   one fits; when batch 1 fails, nothing fits and the limit is None. A size that *cannot run*
   for a reason other than memory before any size has fitted (BatchNorm refuses one sample per
   channel in training, so a stock ResNet on small images cannot run at batch 1) is a result,
   not an upper bound: it becomes the search's *floor* (``too_small``), doubling goes on above
   it, and the grid starts above it. Halving stops at such a size. After a size has fitted, a
   size that cannot run is a failure like any other.
2. **Closing in** between the largest size that fitted (``lo``) and the smallest that failed
   (``hi``) until ``lo`` is provably within ``tolerance`` of the true limit: ``hi == lo + 1`` or
   ``lo >= (1 - tolerance) * (hi - 1)``. Plain bisection of ``[L, 2L)`` needs four or five more
   trials to get there. Instead, peak memory is close to affine in the batch size, so the search
   fits ``a + c·b`` to the trials that ran to the end (:class:`MemoryModel`), predicts the
   largest batch whose peak stays under the usable memory ``W``, and tries a pair of sizes
   around the prediction: one just below it (expected to fit) and the smallest size whose failure
   would settle the answer (expected to fail). When the prediction is right, two trials (often
   one) finish the search. A trial whose outcome contradicts the prediction is a *miss*; the
   model is refitted with it and predicts again, but after two misses in a row the next size is
   the geometric midpoint of ``(lo, hi)`` (bisection). Without memory readings, or with readings
   that do not fit a rising line, it bisects all the way.

Trials: doubling from 1 to a limit ``T`` costs ``⌊log2 T⌋ + 2``; with readings that follow the
line, closing in costs one or two more, at most ``⌈log2 T⌉ + 4`` in all (tests/test_search.py
checks every limit up to 2100 and some up to 65535). Bisection alone needs up to two more.

The usable memory ``W``
-----------------------
- With ``capacity_mb`` (a GPU's total memory, say): ``W = (1 - margin) · capacity_mb``, and a
  trial *fits* only if it ran without failing **and** its peak memory is at most ``W``. A trial
  that ran but went over is recorded with status ``over_margin``; its reading still feeds the
  memory model (it is a complete one). A trial that ran without a reading cannot be held to
  the margin: it fits.
- Without ``capacity_mb``: the failures tell. A trial that failed with a peak reading (on the CPU
  under a memory budget: the resident set when the allocator refused) shows where the wall is,
  ``W`` is the highest such reading, and the margin is the trial's business (``maxbatch`` runs
  the CPU trials under a budget already reduced by the margin, so the real allocator enforces
  it).

Guarantees and noise
--------------------
The answer is always a size that was **tried and fitted**, never an extrapolation, and always
below every size that failed. Sizes are only ever tried strictly between ``lo`` and ``hi``, and
none is tried twice, so the observations stay consistent even when the device is not:
if memory is noisy (a size fits in one process and not in the next, as CPU allocator
fragmentation makes happen), a spurious failure lowers the answer (the safe side) and a
spurious success raises it only to a size that did run once. The margin is the defence against
the second; the answer is "within ``tolerance`` of the boundary these trials observed".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

#: Slack for float comparisons of batch-size ratios.
_EPS = 1e-9

#: The memory model is fitted to the readings of batch sizes within this factor of the largest
#: one that ran: spread out enough that noise does not tilt the slope, near enough that the
#: curve is still a line there.
MODEL_SPAN = 8


@dataclass(frozen=True)
class TrialResult:
    """What one trial reports.

    ``fits``: it ran to the end without an allocator failure. ``peak_mem_mb``: its peak memory,
    or, for a failure, the memory it held when it failed (None when unknown). ``status``: the
    runner's own word (``ok``, ``oom``, ...), kept in the record. ``cannot_run``: it failed for
    a reason other than memory or the data's size (the model refuses the batch); ``reason``: the
    runner's one line on why a trial failed, kept in the record.
    """

    fits: bool
    peak_mem_mb: float | None = None
    status: str | None = None
    cannot_run: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class Trial:
    """One trial as the search judged it (in the order tried)."""

    batch_size: int
    fits: bool  # ran, and within the margin when a capacity is known
    peak_mem_mb: float | None
    status: str  # "ok", "over_margin", or the runner's failure status ("failed" if it gave none)
    phase: str  # "double", "halve", "predict" or "bisect": why this size was tried
    predicted: float | None = None  # the model's predicted limit when it was chosen ("predict")
    ran: bool = True  # the runner reported it ran to the end (over_margin trials did)
    reason: str | None = None  # the runner's one line on why it failed


@dataclass(frozen=True)
class MemoryModel:
    """Peak memory ≈ ``intercept_mb + slope_mb * batch_size``, fitted by least squares."""

    intercept_mb: float
    slope_mb: float  # MB per sample
    points: tuple[tuple[int, float], ...]  # the readings it was fitted to

    def at(self, batch_size: float) -> float:
        return self.intercept_mb + self.slope_mb * batch_size

    def largest_within(self, memory_mb: float) -> float:
        """The (fractional) batch size whose predicted peak equals ``memory_mb``."""
        return (memory_mb - self.intercept_mb) / self.slope_mb


@dataclass(frozen=True)
class SearchResult:
    limit: int | None  # the largest batch size that was tried and fitted; None if none did
    trials: tuple[Trial, ...]
    grid: tuple[int, ...]  # powers of two up to the limit, plus the limit
    capped: bool  # the cap itself fitted: the device may hold more
    cap: int
    first_failure: int | None  # the smallest batch size that failed
    tolerance: float
    margin: float
    capacity_mb: float | None
    usable_mb: float | None  # the W the last prediction used
    model: MemoryModel | None  # the last memory model fitted
    summary: str
    #: the largest size that could not run for a reason other than memory before any size
    #: fitted: the grid starts above it (None: every size tried below the limit could run)
    too_small: int | None = None

    @property
    def converged(self) -> bool:
        """Is the limit provably within ``tolerance`` of the boundary (or the cap)?"""
        if self.limit is None or self.capped:
            return True
        return self.first_failure is not None and _settled(
            self.limit, self.first_failure, self.tolerance
        )

    def curve(self) -> list[tuple[int, float]]:
        """Memory vs batch size: (batch size, peak MB) of every trial that ran, by size."""
        return sorted((t.batch_size, t.peak_mem_mb) for t in self.trials if _reading(t))

    def to_dict(self) -> dict:
        return {
            "limit": self.limit,
            "capped": self.capped,
            "converged": self.converged,
            "cap": self.cap,
            "first_failure": self.first_failure,
            "too_small": self.too_small,
            "grid": list(self.grid),
            "tolerance": self.tolerance,
            "margin": self.margin,
            "capacity_mb": self.capacity_mb,
            "usable_mb": self.usable_mb,
            "memory_model": asdict(self.model) if self.model else None,
            "trial_count": len(self.trials),
            "trials": [asdict(t) for t in self.trials],
            "curve": [{"batch_size": b, "peak_mem_mb": m} for b, m in self.curve()],
            "summary": self.summary,
        }


class SearchError(ValueError):
    """The search's own settings are impossible (``start`` above ``cap``, say)."""


def grid(limit: int | None, smallest: int = 1) -> tuple[int, ...]:
    """Powers of two from ``smallest`` up to ``limit``, plus ``limit``; sorted, no duplicates."""
    if limit is None or limit < 1:
        return ()
    sizes = {limit}
    power = 1
    while power <= limit:
        if power >= smallest:
            sizes.add(power)
        power *= 2
    return tuple(sorted(sizes))


def search(
    trial: Callable[[int], TrialResult],
    *,
    start: int = 1,
    cap: int = 65536,
    capacity_mb: float | None = None,
    margin: float = 0.1,
    tolerance: float = 0.05,
    max_trials: int = 64,
    on_trial: Callable[[Trial], None] | None = None,
) -> SearchResult:
    """Find the largest batch size for which ``trial`` fits; see the module's docstring.

    ``on_trial`` is called after each trial (progress logging).
    """
    if start < 1 or cap < start:
        raise SearchError(f"need 1 <= start <= cap, got start={start} cap={cap}")
    if not 0.0 <= margin < 1.0:
        raise SearchError(f"margin must be in [0, 1), got {margin}")
    if not 0.0 < tolerance < 1.0:
        raise SearchError(f"tolerance must be in (0, 1), got {tolerance}")
    if capacity_mb is not None and capacity_mb <= 0:
        raise SearchError(f"capacity_mb must be positive, got {capacity_mb}")
    state = _State(trial, capacity_mb, margin, tolerance, max_trials, on_trial)
    state.run(start, cap)
    return state.result(cap)


# --- the search ---------------------------------------------------------------------------


class _OutOfTrials(Exception):
    pass


class _State:
    def __init__(self, trial, capacity_mb, margin, tolerance, max_trials, on_trial):
        self.trial = trial
        self.capacity_mb = capacity_mb
        self.margin = margin
        self.tol = tolerance
        self.max_trials = max_trials
        self.on_trial = on_trial
        self.trials: list[Trial] = []
        self.lo: int | None = None  # largest size that fitted
        self.hi: int | None = None  # smallest size that failed
        self.floor: int | None = None  # largest size that cannot run, below every fit
        self.capped = False
        self.out_of_trials = False
        self.usable: float | None = None
        self.model: MemoryModel | None = None

    # one trial ----------------------------------------------------------------------------

    def probe(self, batch_size: int, phase: str, predicted: float | None = None) -> bool:
        if len(self.trials) >= self.max_trials:
            raise _OutOfTrials
        raw = self.trial(batch_size)
        peak = None if raw.peak_mem_mb is None else float(raw.peak_mem_mb)
        if peak is not None and not math.isfinite(peak):
            peak = None
        fits, status = bool(raw.fits), raw.status or ("ok" if raw.fits else "failed")
        limit = self._usable_by_capacity()
        if fits and limit is not None and peak is not None and peak > limit:
            fits, status = False, "over_margin"
        record = Trial(
            batch_size, fits, peak, status, phase, predicted, ran=bool(raw.fits), reason=raw.reason
        )
        self.trials.append(record)
        if fits:
            self.lo = batch_size if self.lo is None else max(self.lo, batch_size)
        elif raw.cannot_run and self.lo is None:  # too small to run: a floor, not a ceiling
            self.floor = batch_size if self.floor is None else max(self.floor, batch_size)
        else:
            self.hi = batch_size if self.hi is None else min(self.hi, batch_size)
        if self.on_trial is not None:
            self.on_trial(record)
        return fits

    def _usable_by_capacity(self) -> float | None:
        return None if self.capacity_mb is None else (1.0 - self.margin) * self.capacity_mb

    # the phases ---------------------------------------------------------------------------

    def run(self, start: int, cap: int) -> None:
        try:
            if self._double(start, cap) and self.lo is not None:
                self._close_in()
        except _OutOfTrials:
            self.out_of_trials = True

    def _double(self, start: int, cap: int) -> bool:
        """Grow until a failure; False when there is nothing left to close in on."""
        size = start
        while True:
            if not self.probe(size, "double"):
                if self.floor != size:
                    break
                if size >= cap:  # nothing up to the cap can run
                    return False
            elif size >= cap:
                self.capped = True
                return False
            size = min(2 * size, cap)
        if self.lo is None:  # the first size failed: halve down to one that fits
            while size > (self.floor or 0) + 1:
                size //= 2
                if self.probe(size, "halve") or self.floor == size:
                    break
        return True

    def _close_in(self) -> None:
        missed = 0
        while not _settled(self.lo, self.hi, self.tol):
            choice = None if missed >= 2 else self._predicted_probe()
            if choice is None:
                size, predicted, expect, phase = self._midpoint(), None, None, "bisect"
            else:
                size, predicted, expect = choice
                phase = "predict"
            fits = self.probe(size, phase, predicted)
            missed = missed + 1 if expect is not None and fits != expect else 0

    def _midpoint(self) -> int:
        mid = int(math.sqrt(self.lo * self.hi))  # geometric: the tolerance is relative
        return min(max(mid, self.lo + 1), self.hi - 1)

    def _predicted_probe(self) -> tuple[int, float, bool] | None:
        """(size, predicted limit, expected outcome) from the memory model, or None."""
        self.model = _fit(self.trials)
        self.usable = self._usable()
        if self.model is None or self.usable is None:
            return None
        predicted = self.model.largest_within(self.usable)
        lo, hi, tol = self.lo, self.hi, self.tol
        target = int(math.floor(min(max(predicted, lo), hi - 1) + _EPS))
        # a pair (x, up(x)) with x <= target < up(x): x should fit, up(x) should fail, and both
        # together settle the search; x ranges over [lowest, target]
        lowest = max(_down(target + 1, tol), lo)
        if lowest == lo:  # lo is such an x already: try its partner
            return _up(lo, tol), predicted, False
        # an x from down(hi) on has its partner failed already (hi): one trial settles it
        lowest = max(lowest, _down(hi, tol)) if _down(hi, tol) <= target else lowest
        if predicted >= hi:  # the model says hi fits, yet it failed: stay well below
            return lowest, predicted, True
        x = int(math.sqrt(lowest * target))  # midway, for errors either way
        return min(max(x, lowest), target), predicted, True

    def _usable(self) -> float | None:
        usable = self._usable_by_capacity()
        if usable is not None:
            return usable
        walls = [t.peak_mem_mb for t in self.trials if not t.ran and t.peak_mem_mb is not None]
        return max(walls) if walls else None

    # the answer ---------------------------------------------------------------------------

    def result(self, cap: int) -> SearchResult:
        limit = self.lo
        return SearchResult(
            limit=limit,
            trials=tuple(self.trials),
            grid=grid(limit, smallest=(self.floor or 0) + 1),
            capped=self.capped,
            cap=cap,
            first_failure=self.hi,
            tolerance=self.tol,
            margin=self.margin,
            capacity_mb=self.capacity_mb,
            usable_mb=self.usable if self.usable is not None else self._usable(),
            model=self.model or _fit(self.trials),
            summary=self._summary(limit),
            too_small=self.floor,
        )

    def _trial(self, batch_size: int) -> Trial:
        return next(t for t in self.trials if t.batch_size == batch_size)

    def _summary(self, limit: int | None) -> str:
        n = len(self.trials)
        count = f"{n} trial{'s' if n != 1 else ''}"
        if self.capacity_mb is not None:
            room = f", peak at most {1 - self.margin:.0%} of {self.capacity_mb:.0f} MB"
        else:
            room = ""
        if limit is None:
            if not self.trials:
                return "no trial ran"
            smallest = min(self.trials, key=lambda t: t.batch_size)
            floor = ""
            if self.floor is not None and self.floor != smallest.batch_size:
                floor = f"; batch {_failed(self._trial(self.floor))}"
            return f"no batch size fits: batch {_failed(smallest)}{floor}{room}; {count}"
        floor = ""
        if self.floor is not None:
            floor = f"; batch {_failed(self._trial(self.floor))}, so the grid starts above it"
        if self.capped:
            return (
                f"batch {limit} fits and is the cap: the search stopped there, the device may"
                f" hold more{room}{floor}; {count}"
            )
        stop = " (stopped: out of trials)" if self.out_of_trials else ""
        if self.hi is None:
            return f"largest batch that fits: {limit}; none failed yet{room}{floor}; {count}{stop}"
        exact = "exact" if self.hi == limit + 1 else f"within {self.tol:.0%}"
        why = next(t.status for t in self.trials if t.batch_size == self.hi)
        return (
            f"largest batch that fits: {limit}; {self.hi} failed ({why}; {exact}){room}{floor};"
            f" {count}{stop}"
        )


# --- helpers ------------------------------------------------------------------------------


def _settled(lo: int | None, hi: int | None, tol: float) -> bool:
    """Is ``lo`` (fits) within ``tol`` of every limit that ``hi`` (fails) allows?"""
    if lo is None or hi is None:
        return True
    return hi <= lo + 1 or lo >= (1.0 - tol) * (hi - 1) - _EPS


def _up(lo: int, tol: float) -> int:
    """The largest size whose failure, with ``lo`` fitting, settles the search."""
    return int(math.floor(lo / (1.0 - tol) + _EPS)) + 1


def _down(hi: int, tol: float) -> int:
    """The smallest size whose fit, with ``hi`` failing, settles the search."""
    return min(int(math.ceil((1.0 - tol) * (hi - 1) - _EPS)), hi - 1)


def _failed(t: Trial) -> str:
    """``"<size> failed (<status>: <reason>)"``, the reason when the runner gave one."""
    why = t.status if t.reason is None else f"{t.status}: {t.reason}"
    return f"{t.batch_size} failed ({why})"


def _reading(t: Trial) -> bool:
    return t.ran and t.peak_mem_mb is not None


def _fit(trials: list[Trial] | tuple[Trial, ...]) -> MemoryModel | None:
    """Least squares through the readings of the largest sizes that ran; None unless rising."""
    by_size: dict[int, float] = {}
    for t in trials:
        if _reading(t):
            by_size[t.batch_size] = t.peak_mem_mb
    if not by_size:
        return None
    top = max(by_size)
    points = sorted((b, m) for b, m in by_size.items() if b * MODEL_SPAN >= top)
    if len(points) < 2:
        return None
    n = len(points)
    mean_b = sum(b for b, _ in points) / n
    mean_m = sum(m for _, m in points) / n
    sxx = sum((b - mean_b) ** 2 for b, _ in points)
    sxy = sum((b - mean_b) * (m - mean_m) for b, m in points)
    slope = sxy / sxx
    if not slope > 0:
        return None
    return MemoryModel(mean_m - slope * mean_b, slope, tuple(points))
