"""results/recommendation.json from a summary: the final analysis at the level the race left,
what each point cost, and the points the race eliminated."""

import math

import jsonschema
import pandas as pd
import pytest

from batchscope.core import recommendation
from batchscope.report.recommend import answer
from batchscope.report.summary import point_table
from tests.factories import design, summary_row


def _summary(runs: dict[tuple[int, int], list[float]], process_s: float = 4.0) -> pd.DataFrame:
    rows = [
        summary_row("infer", batch_size=b, num_workers=w, round=r, samples_per_s=rate,
                    process_s=process_s)
        for (b, w), rates in runs.items()
        for r, rate in enumerate(rates, start=1)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_the_final_analysis_uses_what_the_looks_left_and_counts_what_was_spent():
    # batch 8 measured in rounds 1-4, batch 64 eliminated after round 2
    summary = _summary({(8, 0): [1000.0, 1010.0, 990.0, 1005.0], (64, 0): [505.0, 500.0]})
    by_point = point_table.summarize_points(summary)
    by_point.loc[by_point["batch_size"] == 64, "eliminated_at_round"] = 2
    race = design(first_look=2, max_rounds=8)
    doc = answer.document(summary, by_point, race, 1.0)
    jsonschema.validate(doc, recommendation.load_schema())
    (found,) = doc["answers"]
    # the looks after rounds 2 and 3 were spent: the group's last round is 4
    spent = race.look_level(2) + race.look_level(3)
    assert found["level_final"] == pytest.approx(race.level - spent)
    assert found["verdict"] == "separated" and found["pick"] == {"batch_size": 8, "num_workers": 0}
    points = {p["batch_size"]: p for p in found["points"]}
    assert points[8] == {"batch_size": 8, "num_workers": 0, "rounds": 4,
                         "eliminated_at_round": None, "device_s": pytest.approx(16.0)}  # fmt: skip
    assert points[64]["rounds"] == 2 and points[64]["eliminated_at_round"] == 2
    assert found["device_s"] == pytest.approx(24.0)
    assert found["model_fit"]["df"] == 4  # 6 runs, 2 points: one spread for both


def test_full_spends_the_whole_level_on_its_one_analysis():
    summary = _summary({(8, 0): [1000.0, 1010.0, 990.0], (64, 0): [980.0, 1020.0, 1001.0]})
    full = design(strategy="full", first_look=3)
    doc = answer.document(summary, point_table.summarize_points(summary), full, 1.0)
    (found,) = doc["answers"]
    assert found["level_final"] == full.level
    assert found["margin"] == full.margin


def test_runs_without_their_process_seconds_leave_the_cost_unknown():
    summary = _summary({(8, 0): [1000.0, 1010.0], (64, 0): [500.0, 505.0]}, process_s=math.nan)
    doc = answer.document(summary, point_table.summarize_points(summary), design(), 1.0)
    (found,) = doc["answers"]
    assert found["device_s"] is None
    assert all(p["device_s"] is None for p in found["points"])
