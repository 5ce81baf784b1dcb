"""Rounds: the shuffled job order, and the decision after a round (which points go on)."""

import json

import numpy as np
import pytest

from batchscope.core import rounds
from batchscope.report import rounds as decision

JOBS = [(("train", "small_cnn", b, 1, w), 0) for b in (32, 64, 128, 256) for w in (0, 2)]


def test_job_order_is_a_shuffle_fixed_by_seed_and_round():
    first = rounds.job_order(JOBS, 0, 1)
    assert sorted(first) == sorted(JOBS)
    assert rounds.job_order(list(reversed(JOBS)), 0, 1) == first  # the input order is irrelevant
    others = [rounds.job_order(JOBS, 0, r) for r in (2, 3, 4)] + [rounds.job_order(JOBS, 1, 1)]
    assert all(order != first for order in others)  # 8! orders: a repeat would be a bug


def test_priorities_run_earlier_rounds_first_and_a_round_in_its_shuffled_order():
    by_priority = sorted(
        ((job, r) for r in (1, 2, 3) for job in JOBS),
        key=lambda jr: -rounds.priority(jr[0], JOBS, 0, jr[1], 3),
    )
    assert [r for _, r in by_priority] == [1] * 8 + [2] * 8 + [3] * 8
    for r in (1, 2, 3):
        assert [job for job, rr in by_priority if rr == r] == rounds.job_order(JOBS, 0, r)


def _runs(medians: dict, n: int, cv: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {p: list(m * np.exp(rng.normal(0, cv, n))) for p, m in medians.items()}


POINTS = {("train", "m", None, b, 1, 0, 1): m for b, m in ((32, 1000.0), (64, 980.0), (256, 400.0))}


def test_a_race_drops_a_clearly_slower_point_and_keeps_the_close_ones():
    values = _runs(POINTS, 4, 0.05)
    going_on, dropped = decision.decide_round(values, strategy="race", level=0.05, looks=2)
    assert dropped == [("train", "m", None, 256, 1, 0, 1)]
    assert going_on == [("train", "m", None, 32, 1, 0, 1), ("train", "m", None, 64, 1, 0, 1)]


def test_full_keeps_every_point_and_one_round_eliminates_nothing():
    values = _runs(POINTS, 4, 0.05)
    assert decision.decide_round(values, strategy="full", level=0.05, looks=2)[1] == []
    one = _runs(POINTS, 1, 0.05)
    going_on, dropped = decision.decide_round(one, strategy="race", level=0.05, looks=2)
    assert dropped == [] and len(going_on) == 3


def test_a_group_with_one_point_left_is_decided_and_groups_are_raced_apart():
    values = _runs(POINTS, 5, 0.01)
    values |= _runs(
        {("infer", "m", None, 32, 1, 0, 1): 500.0, ("infer", "m", None, 64, 1, 0, 1): 505.0}, 5, 0.1
    )
    del values[("train", "m", None, 64, 1, 0, 1)]
    going_on, dropped = decision.decide_round(values, strategy="race", level=0.05, looks=1)
    assert dropped == [("train", "m", None, 256, 1, 0, 1)]
    # train: batch 32 alone is left, so train is decided; infer's two points stay tied
    assert going_on == [("infer", "m", None, 32, 1, 0, 1), ("infer", "m", None, 64, 1, 0, 1)]


def _result(tmp_path, name, point, samples_per_s, status="ok"):
    path = tmp_path / f"{name}.json"
    row = {**rounds.as_dict(point), "status": status, "samples_per_s": samples_per_s}
    path.write_text(json.dumps(row))
    return str(path)


def test_the_decision_file_carries_earlier_eliminations_and_only_ok_runs_count(tmp_path):
    fast, slow, broken = (("train", "m", None, b, 1, 0, 1) for b in (32, 256, 512))
    paths = [_result(tmp_path, f"f{i}", fast, 1000.0 + i) for i in range(3)]
    paths += [_result(tmp_path, f"s{i}", slow, 500.0 + i) for i in range(3)]
    paths += [_result(tmp_path, f"b{i}", broken, None, "oom") for i in range(3)]
    previous = tmp_path / "round1.json"
    earlier = {**rounds.as_dict(("train", "m", None, 8, 1, 0, 1)), "eliminated_at_round": 1}
    previous.write_text(json.dumps({"eliminated": [earlier]}))
    out = tmp_path / "round2.json"
    decision.main(
        ["--round", "2", "--rounds", "3", "--strategy", "race", "--level", "0.05"]
        + ["--order-seed", "0", "--foreign-cpu-limit", "1.0"]
        + ["--previous", str(previous), "--results", *paths]
        + ["--output", str(out)]
    )
    written = json.loads(out.read_text())
    assert written["eliminated"][0] == earlier
    assert written["eliminated"][1]["batch_size"] == 256
    assert written["eliminated"][1]["eliminated_at_round"] == 2
    # an out-of-memory point has no throughput to compare: it is not eliminated on speed, and
    # its result is that it does not fit, so it is not run again; batch 32 alone is left
    assert written["next_round"] == []
    assert [p["batch_size"] for p in written["measured"]] == [32, 256, 512]


@pytest.mark.parametrize("strategy", ["race", "full"])
def test_the_same_results_give_the_same_decision(tmp_path, strategy):
    values = _runs(POINTS, 3, 0.08, seed=4)
    first = decision.decide_round(values, strategy=strategy, level=0.05, looks=2)
    assert decision.decide_round(dict(reversed(values.items())), strategy=strategy, level=0.05,
                                 looks=2) == first  # fmt: skip
