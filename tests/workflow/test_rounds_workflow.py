"""Rounds end to end: the same tiny grid raced and measured in full, through Snakemake."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from batchscope.core import grid, rounds, verdict
from batchscope.report.summary import round_decision

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

#: Inference on synthetic images, two batch sizes far apart in throughput: 3 rounds in full;
#: raced, 2 rounds before the first look and at most 3.
GRID = {
    "dataset": {"name": "synthetic", "channels": 1, "image_size": 12, "num_samples": 1024},
    "models": ["small_cnn"],
    "modes": ["infer"],
    "batch_sizes": [4, 128],
    "num_workers": [0],
    "seeds": [0],
    "measure": {"warmup_steps": 2, "repeats": 2, "min_steps": 4, "min_seconds": 0.2,
                "rounds": 3, "ceiling": False},
}  # fmt: skip
RACE = {"measure": {**GRID["measure"], "rounds": 2}, "sweep": {"max_rounds": 3}}


def _sweep(root: Path, strategy: str) -> Path:
    workdir = root / strategy
    workdir.mkdir()
    config = workdir / "config.yaml"
    extra = RACE if strategy == "race" else {"sweep": {}}
    sweep = {**extra["sweep"], "strategy": strategy, "foreign_cpu_limit_frac": 1.0}
    config.write_text(yaml.safe_dump({**GRID, **extra, "sweep": sweep}))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory"]
    cmd += [str(workdir), "--configfile", str(config), "--cores", "2"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    root = tmp_path_factory.mktemp("rounds")
    return {strategy: _sweep(root, strategy) for strategy in ("full", "race")}


def _runs(workdir: Path) -> list[Path]:
    return sorted((workdir / "results" / "runs" / "infer" / "small_cnn").glob("*.json"))


def test_full_measures_every_point_in_every_round_in_the_shuffled_order(sweeps):
    workdir = sweeps["full"]
    runs = _runs(workdir)
    assert len(runs) == 2 * 3
    points = [("infer", "small_cnn", b, 1, 0) for b in (4, 128)]
    jobs = [(point, 0) for point in points]
    by_time = sorted(runs, key=lambda p: p.stat().st_mtime_ns)
    rounds_run = [json.loads(p.read_text())["round"] for p in by_time]
    assert rounds_run == [1, 1, 2, 2, 3, 3]  # a round only after the one before
    for r in (1, 2, 3):
        batches = [json.loads(p.read_text())["batch_size"] for p in by_time[2 * r - 2 : 2 * r]]
        assert batches == [job[0][2] for job in rounds.job_order(jobs, 0, r)]
    points = pd.read_csv(workdir / "results" / "summary_by_point.csv").set_index("batch_size")
    assert points["n_rounds"].tolist() == [3, 3]
    assert points["eliminated_at_round"].isna().all()
    assert (points["samples_per_s_cv"] > 0).all()
    # a point's breakdown is timed once, in round 1; later rounds end with their windows
    for path in runs:
        run = json.loads(path.read_text())
        assert (run["diagnostic_steps"] > 0) == (run["round"] == 1)
        assert (run["time_forward_ms"] is not None) == (run["round"] == 1)
    assert points["time_forward_ms_mean"].notna().all()


def test_race_runs_what_its_recorded_decisions_kept_and_they_follow_from_the_runs(sweeps):
    """Which point is faster depends on the machine; what must hold is that each round ran the
    points the decision before it kept, and that the decisions follow from the runs (the same
    runs give the same decisions)."""
    workdir = sweeps["race"]
    runs = [json.loads(p.read_text()) for p in _runs(workdir)]
    assert len(runs) <= len(_runs(sweeps["full"]))
    design = verdict.Design(0.05, 0.05, "race", first_look=2, max_rounds=3)
    decided = sorted((workdir / "results" / "rounds").glob("round*.json"))
    assert [p.name for p in decided][:2] == ["round1.json", "round2.json"]
    for path in decided:
        decision = json.loads(path.read_text())
        r = decision["round"]
        kept = {tuple(p) for p in decision["next_round"]}
        assert kept == {grid.point_of(x) for x in runs if x["round"] == r + 1}
        assert (decision["look_level"] is None) == (r == 1)  # no look before measure.rounds
        assert decision["device_s"] > 0
        # the same runs, decided again, give the same decision
        paths = [str(p) for p in _runs(workdir) if json.loads(p.read_text())["round"] <= r]
        again = round_decision.decide_round(round_decision.read_runs(paths, 1.0), r, design)
        assert [list(p) for p in again.going_on] == decision["next_round"]
    points = pd.read_csv(workdir / "results" / "summary_by_point.csv").set_index("batch_size")
    for entry in json.loads(decided[-1].read_text())["eliminated"]:
        assert (
            points.loc[entry["batch_size"], "eliminated_at_round"] == entry["eliminated_at_round"]
        )
        # an eliminated point keeps its runs, and has none after its elimination
        assert points.loc[entry["batch_size"], "n_rounds"] == entry["eliminated_at_round"]


def test_the_answer_is_valid_and_the_recommendation_says_its_verdict(sweeps):
    import jsonschema

    from batchscope.core import recommendation

    for strategy in ("full", "race"):
        results = sweeps[strategy] / "results"
        document = json.loads((results / "recommendation.json").read_text())
        jsonschema.validate(document, recommendation.load_schema())
        (answer,) = document["answers"]
        pick = answer["pick"]
        text = (results / "recommendation.md").read_text()
        use = f"use batch_size={pick['batch_size']}, num_workers={pick['num_workers']}:"
        assert use in text
        said = {
            "separated": "Separated: it is faster than every other point measured",
            "equivalent": "Equivalent: ",
            "undetermined": "Undetermined: ",
        }
        assert said[answer["verdict"]] in text
        assert answer["device_s"] > 0
        assert sum(p["rounds"] for p in answer["points"]) == len(_runs(sweeps[strategy]))
