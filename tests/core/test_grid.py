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
