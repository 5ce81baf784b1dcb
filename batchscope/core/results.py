"""Reading and writing result files, atomically.

A result that exists on disk is complete: every write goes to a temporary file in the same
folder, is flushed to disk, then renamed over the target. A job killed mid-write leaves no file
that looks finished.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Bumped whenever a key of the per-run result changes meaning.
SCHEMA_VERSION = 1

#: Keys that identify a grid point; every result and every steps row carries them.
GRID_KEYS = (
    "mode",
    "model",
    "dataset",
    "batch_size",
    "accumulation_steps",
    "num_workers",
    "seed",
    "round",
)

#: Columns of the per-step CSV a benchmark run writes next to its result.
STEP_COLUMNS = (
    "step",
    "phase",
    "samples_seen",
    "elapsed_s",
    "step_time_ms",
    "data_wait_ms",
    "loss",
    "lr",
    "val_accuracy",
    "val_loss",
    "noise_sq_small",
    "noise_sq_big",
)

STATUSES = ("ok", "oom", "diverged")


def finite_or_null(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every reader agrees."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    return value


@contextmanager
def _atomic(path: str | os.PathLike, mode: str):
    """Yield a handle on a temporary file beside ``path``; rename it over ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(
            fd, mode, **({} if "b" in mode else {"newline": "", "encoding": "utf-8"})
        ) as handle:
            yield handle
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes it 0600; results are for reading
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically."""
    with _atomic(path, "wb") as handle:
        handle.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically."""
    with _atomic(path, "w") as handle:
        handle.write(text)


def write_json(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON, atomically; non-finite floats become null."""
    write_text(path, json.dumps(finite_or_null(data), indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def write_csv(
    path: str | os.PathLike, rows: Iterable[Mapping[str, Any]], columns: Iterable[str]
) -> None:
    """Write ``rows`` (dicts) with the given columns as CSV, atomically."""
    with _atomic(path, "w") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: finite_or_null(v) for k, v in row.items()})
