"""batchscope.report.summary.round_decision: the decision after a round (which points go on,
the budget), and the decision file."""

import json

import numpy as np
import pytest

from batchscope.core import grid, verdict
from batchscope.report.summary import round_decision as decision

POINTS = {("train", "m", None, b, 1, 0, 1): m for b, m in ((32, 1000.0), (64, 980.0), (256, 400.0))}
DESIGN = verdict.Design(0.05, 0.05, "race", first_look=2, max_rounds=8)


def _runs(medians: dict, n: int, cv: float, seed: int = 0) -> decision.Runs:
    """Every point measured in rounds 1..n, one run each."""
    rng = np.random.default_rng(seed)
    runs = decision.Runs()
    for p, m in medians.items():
        runs.values[p] = list(m * np.exp(rng.normal(0, cv, n)))
        runs.blocks[p] = list(range(1, n + 1))
        runs.measured_in[p] = set(range(1, n + 1))
        runs.device_s[p] = [5.0] * n
    return runs


def _merged(*parts: decision.Runs) -> decision.Runs:
    out = decision.Runs()
    for part in parts:
        for name in ("values", "blocks", "measured_in", "device_s"):
            getattr(out, name).update(getattr(part, name))
    return out


def test_a_race_drops_a_clearly_slower_point_and_keeps_the_close_ones():
    found = decision.decide_round(_runs(POINTS, 4, 0.05), 4, DESIGN)
    assert found.eliminated == [("train", "m", None, 256, 1, 0, 1)]
    assert found.going_on == [("train", "m", None, 32, 1, 0, 1), ("train", "m", None, 64, 1, 0, 1)]
    assert not found.settled


def test_before_the_first_look_and_with_full_every_point_goes_on():
    runs = _runs(POINTS, 4, 0.05)
    full = verdict.Design(0.05, 0.05, "full", first_look=6, max_rounds=8)
    assert decision.decide_round(runs, 4, full).going_on == sorted(POINTS)
    early = decision.decide_round(_runs(POINTS, 1, 0.05), 1, DESIGN)
    assert early.eliminated == [] and len(early.going_on) == 3


def test_a_settled_group_stops_and_groups_are_raced_apart():
    train = _runs(POINTS, 5, 0.01)
    infer = _runs(
        {("infer", "m", None, 32, 1, 0, 1): 500.0, ("infer", "m", None, 64, 1, 0, 1): 505.0}, 5, 0.1
    )
    found = decision.decide_round(_merged(train, infer), 5, DESIGN)
    # train: batch 32 and 64 are 2% apart with a 1% spread, 256 far behind: the look either
    # separates 32 or shows 32 and 64 within the margin; either way train measures no more
    assert ("train", "m", None, 256, 1, 0, 1) in found.eliminated
    assert list(found.settled) == [("train", "m", None, 1, 1)]
    # infer's two points are 1% apart with a 10% spread: neither settled nor eliminated
    assert found.going_on == [("infer", "m", None, 32, 1, 0, 1), ("infer", "m", None, 64, 1, 0, 1)]


def test_an_eliminated_point_stays_in_the_comparison_but_is_not_measured_again():
    runs = _runs(POINTS, 4, 0.05)
    slow = ("train", "m", None, 256, 1, 0, 1)
    runs.measured_in[slow] = {1, 2}  # eliminated after round 2: its runs of rounds 1-2 only
    runs.values[slow] = runs.values[slow][:2]
    runs.blocks[slow] = [1, 2]
    found = decision.decide_round(runs, 4, DESIGN)
    assert slow not in found.going_on and slow not in found.eliminated  # not measured in round 4


def test_a_group_held_open_only_by_an_eliminated_point_settles():
    # 32 leads 64 by half, clearly; 48, eliminated after round 2 on 2 runs, is 3% behind 32:
    # its 2 runs keep its interval wide enough to reach the best, but it is out of the race
    fast, mid, slow = (("train", "m", None, b, 1, 0, 1) for b in (32, 48, 64))
    runs = _runs({fast: 1000.0, mid: 970.0, slow: 500.0}, 6, 0.02, seed=1)
    runs.measured_in[mid] = {1, 2}
    runs.values[mid] = [970.0 * 1.02, 970.0 / 1.02]
    runs.blocks[mid] = [1, 2]
    found = decision.decide_round(runs, 6, DESIGN)
    assert list(found.settled) == [("train", "m", None, 1, 1)] and found.going_on == []
    assert found.eliminated == [slow]


def test_a_round_past_the_budget_does_not_start():
    runs = _runs(POINTS, 3, 0.1)  # 9 runs of 5 device-seconds: 45 spent
    found = decision.decide_round(runs, 3, DESIGN)
    assert found.going_on and found.stopped is None
    cost = decision.next_round_s(runs, found.going_on, 3)
    assert cost == pytest.approx(5.0 * len(found.going_on))
    assert decision.apply_budget(found, runs, 3, 45.0 + cost).going_on == found.going_on
    stopped = decision.apply_budget(found, runs, 3, 45.0 + cost - 1)
    assert stopped.going_on == [] and stopped.stopped == "budget"


def _result(tmp_path, name, point, samples_per_s, status="ok", round_=1):
    path = tmp_path / f"{name}.json"
    row = {**grid.as_dict(point), "status": status, "samples_per_s": samples_per_s,
           "round": round_, "process_s": 4.0}  # fmt: skip
    path.write_text(json.dumps(row))
    return str(path)


def test_the_decision_file_carries_earlier_eliminations_and_only_ok_runs_count(tmp_path):
    fast, slow, broken = (("train", "m", None, b, 1, 0, 1) for b in (32, 256, 512))
    paths = [_result(tmp_path, f"f{i}", fast, 1000.0 + i, round_=i + 1) for i in range(3)]
    paths += [_result(tmp_path, f"s{i}", slow, 500.0 + i, round_=i + 1) for i in range(3)]
    paths += [_result(tmp_path, f"b{i}", broken, None, "oom", round_=i + 1) for i in range(3)]
    previous = tmp_path / "round2.json"
    earlier = {**grid.as_dict(("train", "m", None, 8, 1, 0, 1)), "eliminated_at_round": 2}
    previous.write_text(json.dumps({"eliminated": [earlier], "settled": []}))
    out = tmp_path / "round3.json"
    decision.main(
        ["--round", "3", "--rounds", "2", "--max-rounds", "8", "--strategy", "race"]
        + ["--level", "0.05", "--margin", "0.05", "--order-seed", "0"]
        + ["--foreign-cpu-limit", "1.0", "--previous", str(previous), "--results", *paths]
        + ["--output", str(out)]
    )
    written = json.loads(out.read_text())
    assert written["eliminated"][0] == earlier
    assert written["eliminated"][1]["batch_size"] == 256
    assert written["eliminated"][1]["eliminated_at_round"] == 3
    # an out-of-memory point has no throughput to compare: it is not eliminated on speed, and
    # its result is that it does not fit, so it is not run again; batch 32 alone is left
    assert written["next_round"] == []
    assert [p["batch_size"] for p in written["measured"]] == [32, 256, 512]
    assert written["device_s"] == pytest.approx(9 * 4.0)
    assert written["look_level"] == pytest.approx(DESIGN.look_level(3))


@pytest.mark.parametrize("strategy", ["race", "full"])
def test_the_same_results_give_the_same_decision(strategy):
    runs = _runs(POINTS, 3, 0.08, seed=4)
    design = verdict.Design(0.05, 0.05, strategy, first_look=2, max_rounds=8)
    first = decision.decide_round(runs, 3, design)
    backwards = decision.Runs(
        values=dict(reversed(runs.values.items())),
        blocks=dict(reversed(runs.blocks.items())),
        measured_in=runs.measured_in,
        device_s=runs.device_s,
    )
    assert decision.decide_round(backwards, 3, design) == first
