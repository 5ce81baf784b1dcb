"""The answer per objective: fastest, least energy, and a trade-off between the two.

``fastest`` is the verdict's pick (``batchscope.core.verdict``: time alone, unchanged). Where
the runs measured energy (``energy_source`` ``nvml`` or ``rapl``), ``least_energy`` is the point
with the lowest median ``energy_j_per_sample``, and ``tradeoff`` the point with the lowest
Zeus-style cost per sample (You, Chung and Chowdhury, NSDI 2023)::

    cost_s = η · time_per_sample + (1 − η) · energy_j_per_sample / max_power_w

with ``time_per_sample = 1 / samples_per_s_median``, ``η = recommend.energy_eta`` (1: time
only; 0: energy only) and ``max_power_w`` the GPU's power limit (NVML), else the largest mean
power measured in the group. Both terms are seconds per sample: energy at full power takes
that long to spend. Where no run measured energy, ``energy_unavailable`` says why and the two
energy answers are null.

This module reads the points table (``summary_by_point.csv``) only; pandas, no plotting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from batchscope.core.recommendation import choice_of


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _measured(points: pd.DataFrame) -> pd.DataFrame:
    """The points with a median energy per sample and a median throughput."""
    energy = pd.to_numeric(points.get("energy_j_per_sample_median"), errors="coerce")
    speed = pd.to_numeric(points.get("samples_per_s_median"), errors="coerce")
    if energy is None or speed is None:
        return points.iloc[:0]
    return points[energy.notna() & (energy > 0) & speed.notna() & (speed > 0)]


def unavailable_reason(points: pd.DataFrame) -> str:
    """Why a group has no energy: its points' ``energy_source`` texts, or that none was
    recorded (results from before energy was measured)."""
    sources = sorted({str(s) for s in points.get("energy_source", pd.Series()).dropna()})
    sources = [s for s in sources if s.strip()]
    return "; ".join(sources) or "unavailable: the results record no energy_source"


def max_power(points: pd.DataFrame) -> tuple[float | None, str | None]:
    """``(watts, where from)``: the largest NVML power limit, else the largest mean power."""
    limits = pd.to_numeric(points.get("power_limit_w", pd.Series(dtype=float)), errors="coerce")
    if limits.notna().any():
        return float(limits.max()), "power_limit"
    power = pd.to_numeric(
        points.get("mean_power_w_median", pd.Series(dtype=float)), errors="coerce"
    )
    if power.notna().any():
        return float(power.max()), "measured_max"
    return None, None


def zeus_cost(points: pd.DataFrame, eta: float, max_power_w: float) -> pd.Series:
    """Cost per sample in seconds, η · 1/throughput + (1 − η) · J/sample / max power."""
    time_s = 1.0 / pd.to_numeric(points["samples_per_s_median"])
    energy_j = pd.to_numeric(points["energy_j_per_sample_median"])
    return eta * time_s + (1.0 - eta) * energy_j / max_power_w


def objectives(points: pd.DataFrame, pick: Mapping[str, Any] | None, eta: float) -> dict[str, Any]:
    """The group's answer per objective (``points``: its rows of the points table; ``pick``:
    the verdict's pick, or None)."""
    out: dict[str, Any] = {
        "fastest": None if pick is None else {k: pick[k] for k in ("batch_size", "num_workers")},
        "energy_eta": eta,
        "energy_unavailable": None,
        "max_power_w": None,
        "max_power_source": None,
        "least_energy": None,
        "tradeoff": None,
    }
    measured = _measured(points)
    if measured.empty:
        out["energy_unavailable"] = unavailable_reason(points)
        return out
    least = measured.loc[pd.to_numeric(measured["energy_j_per_sample_median"]).idxmin()]
    out["least_energy"] = {
        **choice_of(least),
        "energy_j_per_sample": float(least["energy_j_per_sample_median"]),
        "samples_per_s": float(least["samples_per_s_median"]),
    }
    watts, source = max_power(measured)
    out.update(max_power_w=watts, max_power_source=source)
    if watts is None or watts <= 0:
        return out
    cost = zeus_cost(measured, eta, watts)
    best = measured.loc[cost.idxmin()]
    out["tradeoff"] = {
        **choice_of(best),
        "cost_s_per_sample": float(cost.min()),
        "energy_j_per_sample": float(best["energy_j_per_sample_median"]),
        "samples_per_s": float(best["samples_per_s_median"]),
    }
    return out


def _point(entry: Mapping[str, Any]) -> str:
    return f"batch_size={entry['batch_size']}, num_workers={entry['num_workers']}"


def lines(answer: Mapping[str, Any] | None) -> list[str]:
    """The answer per objective in sentences, one per objective, or one line saying why
    energy has no answer."""
    found = (answer or {}).get("objectives")
    if not found:
        return []
    fastest = found["fastest"]
    out = [
        f"Fastest: {_point(fastest)} (the verdict's pick)."
        if fastest
        else "Fastest: no point named (see the verdict)."
    ]
    if found["energy_unavailable"]:
        out.append(f"Energy: no answer, energy was not measured ({found['energy_unavailable']}).")
        return out
    least = found["least_energy"]
    out.append(
        f"Least energy: {_point(least)}, {least['energy_j_per_sample']:.4g} J/sample at "
        f"{least['samples_per_s']:.4g} samples/s."
    )
    trade = found["tradeoff"]
    if trade:
        eta, watts = found["energy_eta"], found["max_power_w"]
        where = "the power limit" if found["max_power_source"] == "power_limit" else "measured"
        out.append(
            f"Trade-off (η={eta:g}: η·time + (1−η)·energy/{watts:.4g} W, max power {where}): "
            f"{_point(trade)}, {trade['energy_j_per_sample']:.4g} J/sample at "
            f"{trade['samples_per_s']:.4g} samples/s."
        )
    return out
