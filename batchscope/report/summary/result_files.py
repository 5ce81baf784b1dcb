"""Read the per-run result files of a sweep: validated, one per grid point, and a row for each
grid point whose file does not exist.

``read_results`` reads and checks result JSONs; ``read_grid`` adds, with ``allow_missing``, a
row per absent result: status ``missing``, or ``failed`` when its job's log exists, with
``error`` the log's last non-empty line. The grid point is read from the file name the workflow
gives results (``batchscope.core.paths``). ``with_grid_defaults`` fills the grid keys older
results lack; ``read_eliminated`` reads the race's decisions (``results/rounds/``).

This module imports pandas only, never a plotting library (nor torch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from batchscope.core import grid, results
from batchscope.core.paths import grid_of_path

#: Order of the rows: by grid point, then seed and round.
SORT_KEYS = [k for k in results.GRID_KEYS if k != "dataset"]

#: The key columns of the points table: a grid point (``batchscope.core.grid.POINT_KEYS``) and
#: the dataset it read, its seeds and rounds pooled.
POINT_COLUMNS = [k for k in results.GRID_KEYS if k not in ("seed", "round")]

#: Keys a result must carry for its row to mean anything (a result from before rounds has no
#: ``round``: it is round 1; one from before token data no ``sequence_length``: it is images).
REQUIRED_KEYS = (
    *(k for k in results.GRID_KEYS if k not in ("round", "sequence_length")),
    "status",
    "env_fingerprint",
    "schema_version",
)

#: Statuses of grid points without a result file (``--allow-missing``): no log, or a log.
MISSING, FAILED = "missing", "failed"
ABSENT_STATUSES = (MISSING, FAILED)

#: Grid keys added after the first results were written, and what an older result meant by
#: leaving them out: one micro-batch per update, one round, one device.
LATER_GRID_KEYS = {"accumulation_steps": 1, "round": 1, "devices": 1}


def with_grid_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with integer ``accumulation_steps``, ``round`` and ``devices`` columns. Tables
    from before each was an axis (and rows that lack them) ran one micro-batch per update, in
    one round, on one device. A table from before token data has no ``sequence_length``: its
    rows are images (empty)."""
    filled = {}
    seq = frame.get("sequence_length", pd.Series(pd.NA, index=frame.index, dtype="Int64"))
    filled["sequence_length"] = pd.to_numeric(seq).astype("Int64")
    for key, value in LATER_GRID_KEYS.items():
        column = frame.get(key, pd.Series(value, index=frame.index))
        filled[key] = pd.to_numeric(column).fillna(value).astype(results.FIELDS[key].dtype)
    return frame.assign(**filled)


def steps_path(result_path: str | Path) -> Path:
    """The steps CSV written next to a result JSON: ``x.json`` -> ``x.steps.csv``."""
    path = Path(result_path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: a result file must end in .json")
    return path.with_suffix(".steps.csv")


def _check_result(path: Path, result: Mapping[str, Any]) -> None:
    missing = [key for key in REQUIRED_KEYS if key not in result]
    if missing:
        raise ValueError(f"{path}: result lacks key(s) {', '.join(missing)}")
    if result["schema_version"] != results.SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema_version {result['schema_version']!r}, "
            f"this code reads {results.SCHEMA_VERSION}"
        )
    if result["status"] not in results.STATUSES:
        raise ValueError(f"{path}: unknown status {result['status']!r}")


def _check_unique(records: Iterable[tuple[Path, Mapping[str, Any]]]) -> None:
    """Raise ``ValueError`` for two files of the same grid point (one per point and seed)."""
    seen: dict[tuple, Path] = {}
    for path, record in records:
        grid = tuple(record.get(key, LATER_GRID_KEYS.get(key)) for key in results.GRID_KEYS)
        if grid in seen:
            point = ", ".join(f"{k}={v}" for k, v in zip(results.GRID_KEYS, grid, strict=True))
            raise ValueError(f"duplicate grid point ({point}) in {seen[grid]} and {path}")
        seen[grid] = path


def read_results(result_paths: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Read and validate result JSONs; returns ``(path, result)`` pairs in input order.

    Raises ``ValueError`` for a missing key, an unknown status, another schema version, or two
    files for the same grid point (a sweep measures each point once per seed).
    """
    pairs = []
    for raw_path in result_paths:
        path = Path(raw_path)
        result = results.read_json(path)
        for key in ("round", "devices"):  # results from before these axes
            result.setdefault(key, LATER_GRID_KEYS[key])
        result.setdefault("sequence_length", None)
        _check_result(path, result)
        pairs.append((path, result))
    _check_unique(pairs)
    return pairs


def log_path(log_dir: str | Path, result_path: str | Path) -> Path:
    """The log of a result in ``log_dir``, laid out as the results are:
    ``.../<mode>/<model>/<name>.json`` -> ``<log_dir>/<mode>/<model>/<name>.log``."""
    grid_of_path(result_path)  # the name must be one the workflow gives
    path = Path(result_path)
    return Path(log_dir, path.parent.parent.name, path.parent.name, path.stem + ".log")


def last_line(log: str | Path) -> str | None:
    """The last non-empty line of a log, trimmed (carriage returns split lines, as progress
    bars use them); None for an empty log."""
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


def absent_result(
    result_path: str | Path, log: str | Path | None = None, dataset: str = "unknown"
) -> dict[str, Any]:
    """The row of a grid point whose result file does not exist: ``failed`` with the last line
    of its ``log`` as ``error`` when that log exists, else ``missing``."""
    grid = grid_of_path(result_path)
    record = {**grid, "dataset": dataset, "status": MISSING, "error": None}
    if log is not None and Path(log).exists():
        record.update(status=FAILED, error=last_line(log))
    return {key: record[key] for key in (*results.GRID_KEYS, "status", "error")}


def read_grid(
    result_paths: Sequence[str | Path],
    log_paths: Sequence[str | Path] | None = None,
    *,
    allow_missing: bool = False,
    dataset: str | None = None,
) -> tuple[list[tuple[Path, dict[str, Any]]], list[dict[str, Any]]]:
    """Read the results that exist and, with ``allow_missing``, make a row for each that does
    not (see ``absent_result``). Returns ``(pairs, absent)``: ``(path, result)`` pairs of the
    results read, and the absent rows.

    ``log_paths``, when given, holds one log per result path, in the same order. The dataset of
    an absent row is ``dataset``, else the one dataset of the results read (``unknown`` when they
    have none or several). Without ``allow_missing`` a missing file raises FileNotFoundError.
    """
    if log_paths is not None and len(log_paths) != len(result_paths):
        raise ValueError(
            f"{len(log_paths)} log(s) for {len(result_paths)} result(s): "
            "give one log per result, in the same order"
        )
    logs = list(log_paths) if log_paths is not None else [None] * len(result_paths)
    present = [Path(p) for p in result_paths if not allow_missing or Path(p).exists()]
    pairs = read_results(present)
    if dataset is None:
        datasets = {result["dataset"] for _, result in pairs}
        dataset = datasets.pop() if len(datasets) == 1 else "unknown"
    absent = [
        (Path(path), absent_result(path, log, dataset))
        for path, log in zip(result_paths, logs, strict=True)
        if allow_missing and not Path(path).exists()
    ]
    _check_unique([*pairs, *absent])
    return pairs, [record for _, record in absent]


def read_eliminated(round_files: Iterable[str | Path]) -> dict[tuple, int]:
    """A point (``batchscope.core.grid.point_of``) -> the round after which the race dropped
    it, from the decisions in ``results/rounds/``."""
    out: dict[tuple, int] = {}
    for path in round_files:
        for entry in results.read_json(path)["eliminated"]:
            out[grid.point_of(entry)] = int(entry["eliminated_at_round"])
    return out
