"""The grid point: the one declaration of the sweep's axes, in their order.

A *point* is what the recommendation compares: mode × model × sequence length × batch size ×
accumulation × workers × devices. Its runs are its measurements (seeds and rounds, each a fresh
process). A *group* is what one answer is given for: the point without the two axes the answer
chooses between (:data:`CHOICE_KEYS`). Every key list of the tables, the rounds and the result
files is derived here from :class:`GridPoint`'s fields, and the run's path, its file name's
parser and the rules' wildcard constraints from :data:`FILE_PARTS` and :data:`WILDCARDS`:
adding an axis is a field, a row and a wildcard here, its key in the config schema, and the
code that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

#: The ``modes`` a sweep measures (the grid point's ``mode``).
MODES = ("train", "infer")


class GridPoint(NamedTuple):
    """One point of the grid. A tuple, so it sorts, hashes and writes as before; its fields are
    the axes, in the order every table and key list follows.

    ``sequence_length``: token data only, None for images (a group is one sequence length).
    """

    mode: str
    model: str
    sequence_length: int | None
    batch_size: int
    accumulation_steps: int
    num_workers: int
    devices: int = 1

    @property
    def group(self) -> tuple:
        """The group the point is compared within (:data:`GROUP_KEYS`)."""
        return tuple(getattr(self, key) for key in GROUP_KEYS)


#: The keys of a point, in the declared order.
POINT_KEYS: tuple[str, ...] = GridPoint._fields
#: The axes one answer chooses between; the rest of a point is its group.
CHOICE_KEYS = ("batch_size", "num_workers")
GROUP_KEYS = tuple(key for key in POINT_KEYS if key not in CHOICE_KEYS)
#: Point keys added after results were written: a result without one has this value.
LATER_POINT_KEYS = {"devices": GridPoint._field_defaults["devices"]}
#: The keys of one run, every result's and every steps row's: its point (with the dataset it
#: read, after the model), its seed and its round.
RUN_KEYS = (*POINT_KEYS[:2], "dataset", *POINT_KEYS[2:], "seed", "round")

_TEXT_KEYS = ("mode", "model")

#: How a run's keys stand in its path: the folders, then the file name's parts in order, each
#: ``(key, prefix, kind)``: ``always``; ``tokens`` (token data only: ``seq128_`` leads the
#: name); ``not_one`` (absent at its default of 1, so the paths from before the devices axis
#: stay: ``_dev2``); ``later`` (absent from results written before it). ``core.paths`` builds
#: the path pattern and the file name's parser from these, so a new axis is a row here.
PATH_FOLDERS = ("mode", "model")
FILE_PARTS = (
    ("sequence_length", "seq", "tokens"),
    ("batch_size", "bs", "always"),
    ("accumulation_steps", "acc", "always"),
    ("num_workers", "nw", "always"),
    ("devices", "dev", "not_one"),
    ("seed", "seed", "always"),
    ("round", "round", "later"),
)

#: What each key's wildcard matches in the rules' paths (common.smk's wildcard_constraints).
WILDCARDS = {
    "mode": "|".join(MODES),
    "model": "[A-Za-z0-9_]+",
    "sequence_length": r"[1-9]\d*",
    "batch_size": r"[1-9]\d*",
    "accumulation_steps": r"[1-9]\d*",
    "num_workers": r"\d+",
    "seed": r"\d+",
    "round": r"[1-9]\d*",
}


def _value(key: str, value: Any) -> Any:
    if key == "sequence_length":  # absent or empty (None, NaN, pandas' NA) for images
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    return str(value) if key in _TEXT_KEYS else int(value)


def _values(row: Mapping[str, Any], keys: Sequence[str]) -> tuple:
    """``row``'s values of ``keys``, typed; a key added after results were written takes
    :data:`LATER_POINT_KEYS`' value."""
    values = {**LATER_POINT_KEYS, **row}
    return tuple(_value(key, values.get(key)) for key in keys)


def point_of(row: Mapping[str, Any]) -> GridPoint:
    """The point a result (or any mapping with the point keys, extra keys ignored) belongs to."""
    return GridPoint(*_values(row, POINT_KEYS))


def group_key(row: Mapping[str, Any]) -> tuple:
    """The group a row names (an answer of recommendation.json, a table row): its
    :data:`GROUP_KEYS`, read as :func:`point_of` reads them."""
    return _values(row, GROUP_KEYS)


def group_of(point: Sequence) -> tuple:
    """The group of a point (a :class:`GridPoint` or a tuple in its order)."""
    return GridPoint(*point).group


def as_dict(point: Sequence) -> dict[str, Any]:
    """A point (a :class:`GridPoint` or a tuple in its order) by key."""
    return GridPoint(*point)._asdict()
