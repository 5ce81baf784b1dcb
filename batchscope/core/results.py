"""The result format, and reading and writing result files atomically.

The format of one run's result is ``result.schema.json`` beside this module (package data; the
meaning, unit and caveats of every key: ``docs/results.md``). This module is where the rest of
batchscope takes the names and types of results from: :data:`FIELDS` (every key of one run's
result, read from the schema), :data:`GRID_KEYS`, :data:`STEP_COLUMNS` and the columns the
summary adds, :func:`column_dtypes` and :func:`curve_dtypes` for tables, and
:func:`validate_result`. It imports no torch and no pandas.

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
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from batchscope.core import grid

#: Bumped whenever a key of the per-run result changes meaning (the schema's ``const``).
SCHEMA_VERSION = 1

#: The JSON Schema (draft 2020-12) of a result file the benchmark job writes: package data
#: beside this module.
SCHEMA_FILE = "result.schema.json"

#: Keys that identify a run: every result and every steps row carries them (its grid point,
#: dataset, seed and round: :data:`batchscope.core.grid.RUN_KEYS`).
GRID_KEYS = grid.RUN_KEYS

#: Columns of the per-step CSV a benchmark run writes next to its result, with their pandas
#: dtypes (empty cells: the value was not measured at that step, or was not finite).
STEP_DTYPES = MappingProxyType(
    {
        "step": "int64",
        "phase": "str",
        "samples_seen": "int64",
        "elapsed_s": "float64",
        "step_time_ms": "float64",
        "data_wait_ms": "float64",
        "loss": "float64",
        "lr": "float64",
        "val_accuracy": "float64",
        "val_loss": "float64",
        "noise_sq_small": "float64",
        "noise_sq_big": "float64",
    }
)
STEP_COLUMNS = tuple(STEP_DTYPES)

#: The statuses of a run's result (the schema's ``status`` enum).
STATUSES = ("ok", "oom", "diverged")

#: The status of a largest-batch trial whose batch leaves no step to measure after its
#: warm-up: the whole result is ``{"status": ..., "error": ...}`` (the schema's second form).
TOO_LARGE_FOR_DATA = "too_large_for_data"

#: The status of a largest-batch trial whose run failed for a reason other than memory or the
#: data's size (the model refuses the batch): the whole result is ``{"status": ..., "error": ...}``
#: (the schema's third form).
CANNOT_RUN = "cannot_run"

#: Columns ``summary.csv`` adds to the result fields (batchscope.report.summary.aggregate), with
#: their pandas dtypes: the diagnosis, the environment check, the compute-only ceiling and the
#: flags of a disturbed measurement.
SUMMARY_DTYPES = MappingProxyType(
    {
        "bound": "str",
        "stall_removed_by_workers": "str",  # a worker count, or "none"
        "env_matches_capture": "boolean",
        "ceiling_samples_per_s": "float64",
        "frac_of_ceiling": "float64",
        "foreign_load": "boolean",
        "above_ceiling": "boolean",
        "scaling_efficiency": "float64",
    }
)


class ResultError(ValueError):
    """A result that does not follow the schema; the message is one line naming the key."""


@cache
def _schema_text() -> str:
    return resources.files("batchscope.core").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")


def load_schema() -> dict[str, Any]:
    """The result schema (a fresh copy): ``$defs/run`` is one run's result,
    ``$defs/too_large_for_data`` a largest-batch trial's answer for a batch too large for the
    data, ``$defs/cannot_run`` its answer for a batch the model cannot run; the top level picks
    one of the three by ``status``."""
    return json.loads(_schema_text())


@dataclass(frozen=True)
class Field:
    """One key of a run's result, as the schema has it."""

    name: str
    #: JSON type: "integer", "number", "boolean", "string" or "array"
    kind: str
    #: may be null
    nullable: bool
    #: in every result (the schema's ``required``); the others come in groups: the target
    #: fields with a training target, the noise-scale fields with ``noise_scale_every_steps``
    required: bool
    description: str

    @property
    def dtype(self) -> str:
        """The pandas dtype of this key as a column of a table of results (``summary.csv``).
        Integers other than the never-null grid keys are nullable (``Int64``): a row without a
        result (failed, missing) or without the field has none; an array is ';'-joined text."""
        if self.kind == "integer":
            return "int64" if self.name in GRID_KEYS and not self.nullable else "Int64"
        return {"number": "float64", "boolean": "boolean"}.get(self.kind, "str")


def _fields(schema: Mapping[str, Any]) -> dict[str, Field]:
    run = schema["$defs"]["run"]
    required = set(run["required"])
    fields = {}
    for name, prop in run["properties"].items():
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        (kind,) = [t for t in types if t != "null"]
        fields[name] = Field(name, kind, "null" in types, name in required, prop["description"])
    return fields


#: Every key of one run's result, in the schema's order (grouped as docs/results.md is).
FIELDS: Mapping[str, Field] = MappingProxyType(_fields(load_schema()))


def column_dtypes() -> dict[str, str]:
    """pandas dtypes of the columns of ``summary.csv``: every result field, then the columns the
    summary adds. ``pd.read_csv("results/summary.csv", dtype=results.column_dtypes())``."""
    return {name: field.dtype for name, field in FIELDS.items()} | dict(SUMMARY_DTYPES)


def curve_dtypes() -> dict[str, str]:
    """pandas dtypes of a steps CSV's columns and of ``curves.csv`` (the grid keys, then the
    steps CSV's columns)."""
    return {key: FIELDS[key].dtype for key in GRID_KEYS} | dict(STEP_DTYPES)


def _where(path: Iterable[Any]) -> str:
    parts = [f"[{p}]" if isinstance(p, int) else str(p) for p in path]
    return ".".join(parts).replace(".[", "[") or "(top level)"


def validate_result(result: Mapping[str, Any]) -> None:
    """Raise :class:`ResultError` if ``result`` is not a result file the benchmark job may
    write: one run's result (every key known, every always-written key there, each of its
    type), or a trial's ``too_large_for_data`` or ``cannot_run``."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(result))
    if error is None:
        return
    if error.validator == "additionalProperties":
        known = error.schema.get("properties", {})
        unknown = sorted(key for key in error.instance if key not in known)
        raise ResultError(f"result key {unknown[0]}: not in the result schema")
    if error.validator == "required":
        missing = [key for key in error.validator_value if key not in error.instance]
        raise ResultError(f"result key {_where([*error.absolute_path, missing[0]])}: missing")
    raise ResultError(f"result key {_where(error.absolute_path)}: {error.message}")


@cache
def _validator():
    import jsonschema  # here: a benchmark job never validates, and need not import it

    return jsonschema.Draft202012Validator(load_schema())


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


def is_missing(value: Any) -> bool:
    """None or NaN (a table's empty cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def canonical_json(data: Any) -> str:
    """The one JSON text the project writes: keys sorted, indented by 2, a final newline (the
    same data, the same bytes: specs and results compare and hash as text)."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_json(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    """Write ``data`` as :func:`canonical_json`, atomically; non-finite floats become null."""
    write_text(path, canonical_json(finite_or_null(data)))


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
