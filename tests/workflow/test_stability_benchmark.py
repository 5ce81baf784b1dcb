"""The pure parts of scripts/stability_benchmark.py (scripts/stability/answers.py, and the ratio
summary of scripts/sweeps.py): reading answers, agreement between reruns, contradicted
separations, full vs race. No sweeps, no timing."""

import subprocess
import sys

import pytest

from tests.workflow.helpers import SCRIPTS, scripts_module

sb = scripts_module("stability.answers")
consistency = scripts_module("stability.consistency")
sweeps = scripts_module("sweeps")

GROUP = ("train", "small_cnn", None, 1, 1)  # mode, model, sequence length, accumulation, devices


def member(b, w, median=1000.0):
    return {"batch_size": b, "num_workers": w, "median_samples_per_s": median, "n_rounds": 3}


def document(pick, tie, verdict, mode="train"):
    """A results/recommendation.json with one answer (tie: (b, w) pairs, leader first)."""
    return {
        "schema_version": 2,
        "level": 0.05,
        "test": "mcb_pooled_log",
        "answers": [
            {
                "mode": mode,
                "model": "small_cnn",
                "accumulation_steps": 1,
                "pick": None if pick is None else {"batch_size": pick[0], "num_workers": pick[1]},
                "tie_set": [member(b, w) for b, w in tie],
                "verdict": verdict,
            }
        ],
    }


def answer(pick, tie, verdict):
    return sb.answers_of(document(pick, tie, verdict))[GROUP]


def test_answers_are_read_by_group_with_the_leader_first():
    doc = document((32, 0), [(64, 2), (32, 0)], "undetermined")
    doc["answers"] += document((128, 0), [(128, 0)], "separated", mode="infer")["answers"]
    answers = sb.answers_of(doc)
    assert set(answers) == {GROUP, ("infer", "small_cnn", None, 1, 1)}
    assert answers[GROUP] == sb.Answer((32, 0), ((64, 2), (32, 0)), "undetermined")
    assert answers[GROUP].leader == (64, 2)


def test_reruns_with_the_same_pick_agree():
    runs = [answer((64, 0), [(64, 0)], "separated")] * 3
    found = sb.agreement(runs)
    assert found["same_pick"] and found["agree"] and not found["verdict_flips"]
    assert found["contradictions"] == []


def test_different_picks_agree_when_every_pick_is_in_every_tie_set():
    runs = [
        answer((32, 0), [(64, 0), (32, 0)], "undetermined"),
        answer((64, 0), [(64, 0), (128, 0)], "undetermined"),  # 32 is not in this tie set
        answer((64, 0), [(32, 0), (64, 0)], "undetermined"),
    ]
    found = sb.agreement(runs)
    assert not found["same_pick"] and not found["agree"]
    runs[1] = answer((64, 0), [(64, 0), (32, 0), (128, 0)], "undetermined")
    found = sb.agreement(runs)
    assert not found["same_pick"] and found["agree"]
    assert not found["contradicted"]  # ties claim no separation


def test_a_separation_contradicted_by_another_separation_is_strong():
    runs = [answer((64, 0), [(64, 0)], "separated"), answer((128, 2), [(128, 2)], "separated")]
    found = sb.agreement(runs)
    kinds = {(c.claimant, c.other, c.kind) for c in found["contradictions"]}
    assert kinds == {(0, 1, "separated-other"), (1, 0, "separated-other")}
    assert found["strongly_contradicted"] and not found["agree"]


@pytest.mark.parametrize(
    ("other", "kind", "strong"),
    [
        (answer((128, 0), [(128, 0), (32, 0)], "undetermined"), "excluded", True),
        (answer((64, 0), [(128, 0), (64, 0)], "undetermined"), "other-leader", False),
        (answer((32, 0), [(64, 0), (32, 0)], "undetermined"), "other-pick", False),
    ],
)
def test_kinds_of_contradiction_of_a_separation(other, kind, strong):
    claim = answer((64, 0), [(64, 0)], "separated")
    found = sb.agreement([claim, other])
    assert [(c.claimant, c.other, c.point, c.kind) for c in found["contradictions"]] == [
        (0, 1, (64, 0), kind)
    ]
    assert found["strongly_contradicted"] is strong
    assert found["verdict_flips"]


def test_a_tie_led_by_the_separated_point_and_picking_it_does_not_contradict():
    claim = answer((64, 0), [(64, 0)], "separated")
    other = answer((64, 0), [(64, 0), (32, 0)], "undetermined")
    found = sb.agreement([claim, other])
    assert found["same_pick"] and found["agree"] and found["contradictions"] == []


def test_disturbed_reruns_and_missing_answers_claim_nothing():
    claim = answer((64, 0), [(64, 0)], "separated")
    disturbed = answer(None, [(128, 0), (64, 0), (32, 0)], "disturbed")
    found = sb.agreement([claim, disturbed, None])
    assert found["n"] == 2 and found["contradictions"] == []
    assert not found["agree"]  # the disturbed rerun names no point: not in the tie set
    assert found["verdicts"] == ["separated", "disturbed", None]


def test_race_agrees_with_full_when_its_pick_is_in_fulls_tie_set():
    full = answer((32, 0), [(64, 0), (32, 0)], "undetermined")
    assert sb.full_vs_race(full, answer((64, 0), [(64, 0)], "separated"))["agree"]
    assert sb.full_vs_race(full, answer((32, 0), [(32, 0)], "separated"))["same_pick"]
    outside = sb.full_vs_race(full, answer((256, 0), [(256, 0)], "separated"))
    assert not outside["agree"] and not outside["race_pick_in_full_tie"]
    assert [c.kind for c in outside["contradictions"]] == ["excluded"]
    assert sb.full_vs_race(full, None)["agree"] is None


def test_cv():
    assert sb.cv([100.0]) is None
    assert sb.cv([90.0, 110.0]) == pytest.approx(14.142135623730951 / 100)


def _reruns(ratios_per_rerun, runs=12, sd=0.1, seed=3):
    """Round runs of 4 points per rerun: (round, samples_per_s), log-normal around each rerun's
    ratios, every rerun at its own overall speed and with its own round effects."""
    import numpy as np

    from batchscope.core import grid

    rng = np.random.default_rng(seed)
    out = []
    for i, ratios in enumerate(ratios_per_rerun):
        speed, rounds = 1000.0 * (1 + 0.3 * i), rng.normal(0, 0.1, runs)
        out.append(
            {
                grid.GridPoint("infer", "small_cnn", None, b, 1, 0, 1): [
                    (r + 1, speed * ratio * float(np.exp(rounds[r] + rng.normal(0, sd))))
                    for r in range(runs)
                ]
                for b, ratio in zip((8, 16, 32, 64), ratios, strict=True)
            }
        )
    return out


def test_reruns_with_the_same_ratios_are_not_overdispersed():
    same = [(1.0, 0.9, 0.8, 0.5)] * 3
    (fits,) = consistency.fits_of(_reruns(same)).values()
    found = consistency.homogeneity(fits)
    assert found["df"] == 6 and found["points"] == 4 and found["reruns"] == 3
    assert 0.2 < found["overdispersion"] < 2.5  # each rerun's own speed and drift taken out
    assert found["p"] > 0.01


def test_a_point_moved_in_one_rerun_is_overdispersion():
    moved = [(1.0, 0.9, 0.8, 0.5), (1.0, 1.15, 0.8, 0.5), (1.0, 0.9, 0.8, 0.5)]
    (fits,) = consistency.fits_of(_reruns(moved)).values()
    found = consistency.homogeneity(fits)
    assert found["overdispersion"] > 3 and found["p"] < 0.01


def test_the_point_that_moved_carries_the_overdispersion():
    """Left out, the point that moved in one rerun takes the overdispersion with it; the
    carrier is that point, not one of those that kept their ratios."""
    from batchscope.core import grid

    moved = [(1.0, 0.9, 0.8, 0.5), (1.0, 0.9, 0.8, 0.65), (1.0, 0.9, 0.8, 0.5)]
    (fits,) = consistency.fits_of(_reruns(moved)).values()
    most = consistency.carrier(fits)
    assert most["point"] == grid.GridPoint("infer", "small_cnn", None, 64, 1, 0, 1)
    assert most["points"] == 3 and most["df"] == 4
    assert most["overdispersion"] < 2.5 < consistency.homogeneity(fits)["overdispersion"]


def test_one_rerun_has_nothing_to_compare_with():
    (fits,) = consistency.fits_of(_reruns([(1.0, 0.9, 0.8, 0.5)])).values()
    assert consistency.homogeneity(fits) is None


def test_ratio_summary_is_the_median_of_per_pair_ratios():
    s = sweeps.ratio_summary([0.9, 1.0, 1.1, 1.3])
    assert s["median"] == pytest.approx(1.05)
    assert (s["min"], s["max"]) == (0.9, 1.3)
    assert sweeps.ratio_summary([0.98])["iqr"] == 0.0
    assert "geo_mean" not in sweeps.ratio_summary([0.98])  # no interval from one pair


def test_ratio_summary_gives_the_geometric_mean_and_its_t_interval():
    import math

    ratios = [0.9, 1.0, 1.1, 1.3]
    s = sweeps.ratio_summary(ratios)
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    half = 3.182446 * sd / 2  # t quantile 0.975 on 3 df, from a table
    assert s["geo_mean"] == pytest.approx(math.exp(mean))
    assert s["ci_low"] == pytest.approx(math.exp(mean - half), rel=1e-5)
    assert s["ci_high"] == pytest.approx(math.exp(mean + half), rel=1e-5)


#: Run a command's side B (``--help`` only) as ``__main__``, its folder first on sys.path as
#: when it runs as a script, then say whether anything imported batchscope.
_SIDE_B_THEN_MODULES = """
import os, runpy, sys
script, *args = sys.argv[1:]
sys.argv = [script, *args, "--help"]
sys.path.insert(0, os.path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    pass
print("LOADED", any(m.split(".")[0] == "batchscope" for m in sys.modules))
"""


@pytest.mark.parametrize(
    "command", [("stability_benchmark.py", "bare-loop"), ("bare_loop_ratio.py", "bare")]
)
def test_side_b_of_a_benchmark_imports_no_batchscope(command):
    """Side B is the independent loop: the command that starts it must not import batchscope
    on the way (the editable install would find it without PYTHONPATH)."""
    cmd = [sys.executable, "-c", _SIDE_B_THEN_MODULES, str(SCRIPTS / command[0]), *command[1:]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "LOADED False"
