"""Where the workflow puts each file: the one place a path convention is written down.

Snakemake patterns (``{wildcard}``) for the rules, and the parser the reporting floor uses to
tell a result's grid point from its path. Paths are relative to the working directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: One benchmark job's result stem: ``<stem>.json`` and ``<stem>.steps.csv``.
RUN = (
    "results/runs/{mode}/{model}/"
    "bs{batch_size}_acc{accumulation_steps}_nw{num_workers}_seed{seed}_round{round}"
)
#: A token sweep's result stem: the sequence length leads the file name (``seq128_bs64_...``).
#: An image sweep has no sequence length, and its paths stay as they were: a sweep has one
#: dataset, so the workflow takes one of the two patterns (:func:`run_pattern`).
RUN_TOKENS = RUN.replace("/bs{batch_size}", "/seq{sequence_length}_bs{batch_size}")


def run_pattern(tokens: bool) -> str:
    """The run stem pattern of a sweep over token data (``tokens``) or images."""
    return RUN_TOKENS if tokens else RUN


def run_stem(**grid: Any) -> str:
    """The stem of one run: the token pattern when ``grid`` has a ``sequence_length``."""
    return run_pattern(grid.get("sequence_length") is not None).format(**grid)


#: The decision taken after a round: which points go on (``measure.rounds``, ``sweep``).
ROUND = "results/rounds/round{round}.json"
#: One compute-only ceiling run per mode × model × batch size.
CEILING = "results/ceiling/{mode}/{model}/bs{batch_size}"
#: The largest-batch search of one mode × model (``batch_sizes: auto``).
MAXBATCH = "results/maxbatch/{mode}/{model}.json"
#: The model check of one model (``models``), which every benchmark job waits for.
MODEL_CHECK = "results/models/{model}.json"
#: A prepared dataset.
DATASET_DIR = "resources/datasets/{dataset}"
#: The run spec each job reads, laid out as the results are.
SPEC_DIR = "specs"

#: The file name of a run's result (its mode and model are the two parent folders).
RESULT_NAME = re.compile(
    r"(?:seq(?P<sequence_length>\d+)_)?bs(?P<batch_size>\d+)_acc(?P<accumulation_steps>\d+)"
    r"_nw(?P<num_workers>\d+)_seed(?P<seed>\d+)(?:_round(?P<round>\d+))?\.json"
)


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
    kind = "bench" if kind == "runs" else kind
    suffix = ".tsv" if folder == "benchmarks" else ".log"
    return f"{folder}/{kind}/{rest}{suffix}"


def grid_of_path(result_path: str | Path) -> dict[str, Any]:
    """Mode, model, batch size, accumulation, workers, seed, round and sequence length of a
    result path the workflow named (``.../<mode>/<model>/bs<B>_acc<A>_nw<W>_seed<S>_round<R>.json``;
    without ``_round<R>``, from before rounds, round 1; ``seq<L>_bs...`` for token data, else
    sequence length None); ``ValueError`` otherwise."""
    path = Path(result_path)
    match = RESULT_NAME.fullmatch(path.name)
    if match is None or not path.parent.name or not path.parent.parent.name:
        raise ValueError(
            f"{path}: cannot tell its grid point: expected"
            " <mode>/<model>/bs<B>_acc<A>_nw<W>_seed<S>_round<R>.json"
        )
    grid = {"mode": path.parent.parent.name, "model": path.parent.name}
    numbers = {key: int(value) for key, value in match.groupdict().items() if value is not None}
    # results from before rounds existed are round 1; image results have no sequence length
    return grid | {"round": 1, "sequence_length": None} | numbers
