"""Where the workflow puts each file: the one place a path convention is written down.

Snakemake patterns (``{wildcard}``) for the rules, and the parser the reporting floor uses to
tell a result's grid point from its path. Paths are relative to the working directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from batchscope.core import grid


def _file_pattern(tokens: bool) -> str:
    parts = []
    for key, prefix, kind in grid.FILE_PARTS:
        if kind == "tokens" and not tokens:
            continue
        # devices: empty at one device, ``_dev<N>`` else (:func:`devices_tag`)
        parts.append("{devices_tag}" if kind == "not_one" else f"_{prefix}{{{key}}}")
    return "".join(parts).removeprefix("_")


#: One benchmark job's result stem: ``<stem>.json`` and ``<stem>.steps.csv``, built from
#: ``grid.FILE_PARTS``: ``results/runs/{mode}/{model}/bs{batch_size}_acc{accumulation_steps}
#: _nw{num_workers}{devices_tag}_seed{seed}_round{round}``. ``{devices_tag}`` is empty for one
#: device (the paths from before the devices axis) and ``_dev<N>`` for N devices.
RUN = "results/runs/" + "".join(f"{{{k}}}/" for k in grid.PATH_FOLDERS) + _file_pattern(False)
#: What ``{devices_tag}`` matches: nothing, or ``_dev<N>`` for N >= 2.
DEVICES_TAG = r"(?:_dev(?:[2-9]|[1-9]\d+))?"
#: A token sweep's result stem: the sequence length leads the file name (``seq128_bs64_...``).
#: An image sweep has no sequence length, and its paths stay as they were: a sweep has one
#: dataset, so the workflow takes one of the two patterns (:func:`run_pattern`).
RUN_TOKENS = RUN.replace(_file_pattern(False), _file_pattern(True))


def run_pattern(tokens: bool) -> str:
    """The run stem pattern of a sweep over token data (``tokens``) or images."""
    return RUN_TOKENS if tokens else RUN


#: The decision taken after a round: which points go on (``measure.rounds``, ``sweep``).
ROUND = "results/rounds/round{round}.json"
#: One compute-only ceiling run per mode × model × batch size.
CEILING = "results/ceiling/{mode}/{model}/bs{batch_size}"
#: The largest-batch search of one mode × model (``batch_sizes: auto``).
MAXBATCH = "results/maxbatch/{mode}/{model}.json"
#: The model check of one model (``models``), which every benchmark job waits for.
MODEL_CHECK = "results/models/{model}.json"
#: Every model of the sweep checked: the checkpoint that every measurement waits for.
MODELS_CHECKED = "results/models_checked.json"
#: A prepared dataset.
DATASET_DIR = "resources/datasets/{dataset}"
#: The kept listings of image folders (``batchscope.core.folder_index``): read by every parse
#: of the workflow and by the indexing job, rebuilt when a folder changes.
FOLDER_LISTINGS = "resources/datasets/listings"
#: The run spec each job reads, laid out as the results are.
SPEC_DIR = "specs"
#: The bench rule's logs: ``results/runs/X.json``'s is ``logs/bench/X.log`` (:func:`log_of`).
BENCH_LOG_DIR = "logs/bench"


def _name_regex() -> re.Pattern:
    lead, rest = "", ""
    for key, prefix, kind in grid.FILE_PARTS:
        part = f"{prefix}(?P<{key}>\\d+)"
        if kind == "tokens":  # leads the name: ``seq128_``
            lead += f"(?:{part}_)?"
        else:  # the others joined by ``_``; an optional one with its ``_``
            rest += f"_{part}" if kind == "always" else f"(?:_{part})?"
    return re.compile(lead + rest.removeprefix("_") + r"\.json")


#: The file name of a run's result (its mode and model are the two parent folders); a part
#: absent (no sequence length, one device, a result from before rounds) does not match.
RESULT_NAME = _name_regex()


def devices_tag(devices: int | str) -> str:
    """The ``{devices_tag}`` of a run on ``devices`` devices: empty for one."""
    return "" if int(devices) == 1 else f"_dev{int(devices)}"


def devices_of(tag: str) -> int:
    """The devices a ``{devices_tag}`` names (the inverse of :func:`devices_tag`)."""
    return int(tag.removeprefix("_dev")) if tag else 1


def run_stem(grid: dict[str, Any] | None = None, **more: Any) -> str:
    """The run stem of a run's grid keys (``grid`` and ``more``: mode, model, batch_size,
    accumulation_steps, num_workers, devices (1 when absent), seed, round, and sequence_length
    (None or absent for images: :data:`RUN`; else :data:`RUN_TOKENS`); others are ignored)."""
    named = {**(grid or {}), **more}
    devices = named.pop("devices", 1)
    tokens = named.get("sequence_length") is not None
    return run_pattern(tokens).format(**named, devices_tag=devices_tag(devices))


def spec_of(stem_pattern: str) -> str:
    """The spec file of a job whose outputs live under ``results/``: ``results/runs/X`` ->
    ``specs/runs/X.json``; ``results/maxbatch/X.json`` -> ``specs/maxbatch/X.json``."""
    relative = stem_pattern.removeprefix("results/").removesuffix(".json")
    return f"{SPEC_DIR}/{relative}.json"


def log_of(stem_pattern: str, folder: str = "logs") -> str:
    """The log (or, with ``folder="benchmarks"``, the benchmark) of a job, mirroring its result:
    ``results/runs/X`` -> ``logs/bench/X.log`` (runs are the bench rule's), others by their folder.
    """
    relative = stem_pattern.removeprefix("results/").removesuffix(".json")
    kind, _, rest = relative.partition("/")
    kind = BENCH_LOG_DIR.rpartition("/")[2] if kind == "runs" else kind
    suffix = ".tsv" if folder == "benchmarks" else ".log"
    return f"{folder}/{kind}/{rest}{suffix}"


def grid_of_path(result_path: str | Path) -> dict[str, Any]:
    """Mode, model, batch size, accumulation, workers, devices, seed, round and sequence length
    of a result path the workflow named
    (``.../<mode>/<model>/[seq<L>_]bs<B>_acc<A>_nw<W>[_dev<N>]_seed<S>_round<R>.json``; without
    ``_dev<N>``, one device; without ``_round<R>``, from before rounds, round 1; without
    ``seq<L>_``, image data: sequence length None); ``ValueError`` otherwise."""
    path = Path(result_path)
    match = RESULT_NAME.fullmatch(path.name)
    if match is None or not path.parent.name or not path.parent.parent.name:
        raise ValueError(
            f"{path}: cannot tell its grid point: expected"
            " <mode>/<model>/bs<B>_acc<A>_nw<W>_seed<S>_round<R>.json"
        )
    grid = {"mode": path.parent.parent.name, "model": path.parent.name}
    numbers = {key: int(value) for key, value in match.groupdict().items() if value is not None}
    # results from before rounds existed are round 1; without a devices tag, one device; image
    # results have no sequence length
    return grid | {"round": 1, "devices": 1, "sequence_length": None} | numbers
