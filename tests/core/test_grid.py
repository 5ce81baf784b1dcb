"""batchscope.core.grid: the grid point every key list, path and table key is derived from."""

from __future__ import annotations

import pytest

from batchscope.core import grid, paths, results

POINTS = [
    grid.GridPoint("train", "small_cnn", None, 64, 1, 2, 1),  # images, one device
    grid.GridPoint("infer", "gpt2", 128, 8, 1, 0, 1),  # tokens
    grid.GridPoint("train", "resnet18", None, 32, 4, 1, 4),  # accumulation, four devices
]


@pytest.mark.parametrize("point", POINTS, ids=str)
def test_a_point_survives_its_result_path(point):
    """The path the workflow writes a run to names every axis: a field added to GridPoint but
    not to the paths would come back different (or not parse)."""
    stem = paths.run_stem({**grid.as_dict(point), "seed": 3, "round": 2})
    named = paths.grid_of_path(f"{stem}.json")
    assert grid.point_of(named) == point
    assert (named["seed"], named["round"]) == (3, 2)


def test_every_run_key_is_a_result_field_and_the_lists_follow_the_point():
    assert set(grid.RUN_KEYS) <= set(results.FIELDS)
    assert results.GRID_KEYS == grid.RUN_KEYS
    assert [k for k in grid.RUN_KEYS if k in grid.POINT_KEYS] == list(grid.POINT_KEYS)
    assert set(grid.GROUP_KEYS) | set(grid.CHOICE_KEYS) == set(grid.POINT_KEYS)


def test_point_of_reads_a_table_row_and_an_older_result():
    row = {"mode": "infer", "model": "m", "batch_size": 16.0, "accumulation_steps": "2",
           "num_workers": 1, "sequence_length": float("nan"), "status": "ok"}  # fmt: skip
    point = grid.point_of(row)
    assert point == ("infer", "m", None, 16, 2, 1, 1)  # no devices: one device
    assert isinstance(point.batch_size, int) and point.group == ("infer", "m", None, 2, 1)
    assert grid.as_dict(tuple(point)) == point._asdict()


def test_every_axis_has_its_place_in_a_runs_path_and_a_wildcard():
    """The path pattern, the file name's parser and the wildcard constraints are built from
    the grid's declaration: every point key is in each, so an axis added to GridPoint without
    a place in the path fails here, not in a sweep whose runs overwrite each other."""
    import re

    fields = set(re.findall(r"\{(\w+)\}", paths.RUN_TOKENS)) | {"devices"}  # via devices_tag
    assert set(grid.POINT_KEYS) | {"seed", "round"} <= fields
    named = set(paths.RESULT_NAME.groupindex) | set(grid.PATH_FOLDERS)  # the folders: mode, model
    assert set(grid.POINT_KEYS) | {"seed", "round"} <= named
    assert set(re.findall(r"\{(\w+)\}", paths.RUN_TOKENS)) - {"devices_tag"} <= set(grid.WILDCARDS)


def test_the_built_paths_are_the_paths_results_were_written_at():
    assert paths.RUN == (
        "results/runs/{mode}/{model}/"
        "bs{batch_size}_acc{accumulation_steps}_nw{num_workers}{devices_tag}_seed{seed}_round{round}"
    )
    point = {"mode": "train", "model": "m", "batch_size": 64, "accumulation_steps": 2}
    point |= {"num_workers": 1, "devices": 2, "sequence_length": 128}
    stem = paths.run_stem(point, seed=3, round=1)
    assert stem == "results/runs/train/m/seq128_bs64_acc2_nw1_dev2_seed3_round1"
    parsed = paths.RESULT_NAME.fullmatch(stem.rsplit("/", 1)[1] + ".json").groupdict()
    assert parsed == {k: str(v) for k, v in point.items() if k not in ("mode", "model")} | {
        "seed": "3",
        "round": "1",
    }
    # a result from before the devices and rounds axes, of an image sweep
    old = paths.RESULT_NAME.fullmatch("bs8_acc1_nw0_seed0.json").groupdict()
    assert old["devices"] is None and old["round"] is None and old["sequence_length"] is None
