"""Runs measured beside other work: flagged, left out of the race and the verdict, and an
answer that names no point when too few undisturbed runs remain."""

import jsonschema
import pandas as pd
import pytest

from batchscope.core import recommendation, results, verdict
from batchscope.report.recommend import answer
from batchscope.report.summary import diagnosis, point_table, round_decision
from tests.factories import design, fake_result, summary_row

LIMIT = 0.1


def _runs(point_values: dict[tuple[int, int], list[tuple[float, float]]]) -> pd.DataFrame:
    """Summary rows: per (batch_size, num_workers), (samples_per_s, foreign_cpu_frac) per round."""
    rows = [
        summary_row(
            "infer", batch_size=b, num_workers=w, round=r, samples_per_s=rate,
            foreign_cpu_frac=frac,
        )
        for (b, w), runs in point_values.items()
        for r, (rate, frac) in enumerate(runs, start=1)
    ]  # fmt: skip
    return diagnosis.flag_disturbed(pd.DataFrame(rows), LIMIT)


def _answer(summary: pd.DataFrame) -> dict:
    doc = answer.document(summary, point_table.summarize_points(summary), design(), LIMIT)
    (found,) = doc["answers"]
    return found


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.5, True), (0.1, False), (0.05, False), (None, False), (float("nan"), False), ("", False)],
)
def test_only_a_known_share_above_the_limit_is_foreign_load(value, expected):
    assert verdict.under_foreign_load(value, LIMIT) is expected


def test_the_summary_flags_loaded_runs_and_runs_above_their_ceiling():
    rows = pd.DataFrame(
        [
            summary_row("infer", batch_size=8, foreign_cpu_frac=0.3, frac_of_ceiling=0.8),
            summary_row("infer", batch_size=16, foreign_cpu_frac=0.01, frac_of_ceiling=1.2),
            summary_row("infer", batch_size=32, status="missing"),
        ]
    )
    flagged = diagnosis.flag_disturbed(rows, LIMIT)
    assert flagged["foreign_load"].tolist()[:2] == [True, False]
    assert pd.isna(flagged["foreign_load"].iloc[2])  # no result, no flag
    assert flagged["above_ceiling"].tolist()[:2] == [False, True]
    points = point_table.summarize_points(flagged)
    assert points.set_index("batch_size")["n_foreign_load"].to_dict() == {8: 1, 16: 0, 32: 0}


def test_a_run_slowed_by_other_work_is_left_out_of_the_verdict():
    # (8, 0) is 10% faster than (16, 0), but one of its three runs was measured beside a build
    quiet = [(1000.0, 0.0), (1010.0, 0.0), (990.0, 0.0)]
    summary = _runs({(8, 0): [(1100.0, 0.0), (600.0, 0.45), (1105.0, 0.0)], (16, 0): quiet})
    found = _answer(summary)
    assert found["verdict"] == "separated" and found["pick"] == {"batch_size": 8, "num_workers": 0}
    assert found["tie_set"][0]["n_rounds"] == 2  # its undisturbed runs
    (left,) = found["left_out"]
    assert left["batch_size"] == 8 and left["round"] == 2 and left["foreign_cpu_frac"] == 0.45
    assert left["result"] == "results/runs/infer/small_cnn/bs8_acc1_nw0_seed0_round2.json"
    assert "left out" in found["pick_reason"]
    counted = answer.document(summary, point_table.summarize_points(summary), design(), 1.0)
    assert counted["answers"][0]["verdict"] == "undetermined"  # the slow run blurs it


def test_too_few_undisturbed_runs_and_no_point_is_named():
    summary = _runs(
        {
            (8, 0): [(2000.0, 0.0), (2100.0, 0.0), (2050.0, 0.0)],
            (16, 0): [(900.0, 0.6), (950.0, 0.0), (920.0, 0.5)],
            # one run loaded, two undisturbed kept: not what stops the answer
            (32, 0): [(1500.0, 0.0), (1400.0, 0.3), (1450.0, 0.0)],
        }
    )
    found = _answer(summary)
    assert found["verdict"] == "disturbed"
    assert found["pick"] is None
    assert "leaving batch_size=16, num_workers=0 with fewer than 2" in found["pick_reason"]
    assert "batch_size=32" not in found["pick_reason"]
    assert "60%" in found["pick_reason"]  # the worst share seen
    assert sorted((run["batch_size"], run["round"]) for run in found["left_out"]) == [
        (16, 1),
        (16, 3),
        (32, 2),
    ]
    schema = recommendation.load_schema()
    jsonschema.validate(
        results.finite_or_null(recommendation.to_document([found], 0.05)),
        schema,
    )


def test_a_disturbed_answer_without_the_points_it_lacks_is_refused():
    key = ("infer", "small_cnn", 16, 0)
    decision = verdict.disturbed_verdict({key: [900.0, 950.0]}, 0.05, 0.05)
    row = {"batch_size": 16, "num_workers": 0, "peak_mem_mb": 100.0}
    run = {"batch_size": 16, "num_workers": 0, "foreign_cpu_frac": 0.6, "result": "r.json"}
    kwargs = {"mode": "infer", "model": "small_cnn", "accumulation_steps": 1, "left_out": [run]}
    with pytest.raises(ValueError, match="short of undisturbed runs"):
        recommendation.to_answer(decision, {key: row}, foreign_cpu_limit=LIMIT, **kwargs)
    named = recommendation.to_answer(
        decision, {key: row}, foreign_cpu_limit=LIMIT, short=[key], **kwargs
    )
    assert "leaving batch_size=16, num_workers=0 with fewer than 2" in named["pick_reason"]


def test_the_race_leaves_loaded_runs_out_and_remeasures_a_point_that_has_no_other(tmp_path):
    paths = []
    for b, rate, frac in [(8, 1000.0, 0.0), (16, 400.0, 0.7), (32, 990.0, 0.0)]:
        path = tmp_path / f"bs{b}.json"
        results.write_json(
            path,
            fake_result("infer", batch_size=b, samples_per_s=rate, foreign_cpu_frac=frac),
        )
        paths.append(str(path))
    runs = round_decision.read_runs(paths, LIMIT)
    assert runs.values[("infer", "small_cnn", None, 16, 1, 0, 1)] == [] and runs.loaded == {
        ("infer", "small_cnn", None, 16, 1, 0, 1)
    }
    found = round_decision.decide_round(runs, 1, design(strategy="full", first_look=2))
    assert ("infer", "small_cnn", None, 16, 1, 0, 1) in found.going_on  # measured again


def test_the_race_keeps_a_point_left_with_one_undisturbed_run_instead_of_eliminating_it(tmp_path):
    # batch 4 is far slower than 8 and 16, but its round-2 run was measured beside other work:
    # eliminated on its one clean run, it would leave the final verdict `disturbed` (fewer than
    # 2 undisturbed runs), as a sweep of 7 December 2026 did; it is measured again instead
    paths = []
    for b, rates in [(8, [1000, 1010]), (16, [1005, 995]), (4, [300, 310])]:
        for r, rate in enumerate(rates, start=1):
            frac = 0.3 if (b, r) == (4, 2) else 0.0
            path = tmp_path / f"bs{b}_round{r}.json"
            result = fake_result("infer", batch_size=b, samples_per_s=rate, foreign_cpu_frac=frac)
            results.write_json(path, {**result, "round": r})
            paths.append(str(path))
    runs = round_decision.read_runs(paths, LIMIT)
    point = ("infer", "small_cnn", None, 4, 1, 0, 1)
    found = round_decision.decide_round(runs, 2, design(first_look=2))
    assert point not in found.eliminated and point in found.going_on
    # with both its runs undisturbed, the same look eliminates it
    clean = round_decision.read_runs(paths, 1.0)
    assert point in round_decision.decide_round(clean, 2, design(first_look=2)).eliminated


def test_the_recommendation_names_no_point_and_the_files_to_redo():
    from batchscope.report.recommend import build as recommend

    summary = _runs(
        {
            (8, 0): [(2000.0, 0.0), (2100.0, 0.0), (2050.0, 0.0)],
            (16, 0): [(900.0, 0.6), (950.0, 0.0), (920.0, 0.5)],
        }
    )
    doc = answer.document(summary, point_table.summarize_points(summary), design(), LIMIT)
    (rec,) = recommend.recommend(summary, answer=doc)
    text = rec["recommendation"]
    assert text.startswith("Disturbed: no recommendation for infer / small_cnn.")
    assert "Use batch_size" not in text
    assert "results/runs/infer/small_cnn/bs16_acc1_nw0_seed0_round1.json" in text
    assert "results/runs/infer/small_cnn/bs16_acc1_nw0_seed0_round3.json" in text
