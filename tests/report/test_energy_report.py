"""Energy in the report: by-point medians, the answer per objective (the Zeus trade-off), the
figure only where energy was measured and one line why where it was not."""

import json

import pandas as pd
import pytest

from batchscope.core import results
from batchscope.report.recommend import answer, build, objectives
from batchscope.report.summary import point_table
from tests.factories import design, summary_row

#: (batch size, samples/s, J/sample): fast and hungry, slow and frugal, between.
POINTS = [(256, 1000.0, 0.5), (32, 200.0, 0.1), (64, 500.0, 0.2)]


def _points(power_limit_w=100.0, mean_power_w=(50.0, 20.0, 80.0)) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "batch_size": b,
            "num_workers": 0,
            "samples_per_s_median": sps,
            "energy_j_per_sample_median": j,
            "power_limit_w": power_limit_w,
            "mean_power_w_median": w,
            "energy_source": "nvml",
        }
        for (b, sps, j), w in zip(POINTS, mean_power_w, strict=True)
    )


@pytest.mark.parametrize(("eta", "batch"), [(1.0, 256), (0.0, 32), (0.5, 64)])
def test_the_zeus_tradeoff_ranks_by_its_cost(eta, batch):
    # at 100 W, eta 0.5: 256 costs .5*.001+.5*.005 = .003 s, 32 .5*.005+.5*.001 = .003,
    # 64 .5*.002+.5*.002 = .002: the middle point wins; eta 1 is time, eta 0 energy
    found = objectives.objectives(_points(), {"batch_size": 256, "num_workers": 0}, eta)
    assert found["tradeoff"]["batch_size"] == batch
    assert found["least_energy"]["batch_size"] == 32
    assert found["fastest"] == {"batch_size": 256, "num_workers": 0}
    assert (found["max_power_w"], found["max_power_source"]) == (100.0, "power_limit")


def test_without_a_power_limit_max_power_is_the_largest_measured():
    found = objectives.objectives(_points(power_limit_w=None), None, 0.5)
    assert (found["max_power_w"], found["max_power_source"]) == (80.0, "measured_max")
    # at 80 W: 256 .0005+.003125, 32 .0025+.000625, 64 .001+.00125: 64 still
    assert found["tradeoff"]["cost_s_per_sample"] == pytest.approx(0.00225)


def _summary(energy=None, source="unavailable: no RAPL energy counter (no powercap)"):
    rows = []
    for b, sps, _ in POINTS:
        for rnd, scale in enumerate((1.0, 1.02, 0.98), start=1):
            j = None if energy is None else energy[b][rnd - 1]
            fields = {
                "energy_source": source,
                "energy_j_per_sample": j,
                "mean_power_w": None if j is None else j * sps * scale,
                "power_limit_w": None,
            }
            rows.append(summary_row(batch_size=b, round=rnd, samples_per_s=sps * scale, **fields))
    return pd.DataFrame(rows)


ENERGY = {256: [0.5, 0.6, 2.0], 32: [0.1, 0.1, 0.4], 64: [0.2, 0.25, 0.9]}


def test_by_point_energy_is_the_median_of_the_runs():
    points = point_table.summarize_points(_summary(ENERGY, "rapl")).set_index("batch_size")
    # the median, not the mean (0.5, 0.6, 2.0 -> 0.6, where the mean is 1.03)
    assert points.loc[256, "energy_j_per_sample_median"] == pytest.approx(0.6)
    assert points.loc[32, "energy_j_per_sample_median"] == pytest.approx(0.1)
    assert points.loc[64, "energy_source"] == "rapl"


def test_the_answer_carries_the_objectives_and_says_why_without_energy():
    summary = _summary()
    doc = answer.document(summary, point_table.summarize_points(summary), design(), 1.0, 0.3)
    (found,) = [a["objectives"] for a in doc["answers"]]
    assert found["energy_eta"] == 0.3
    assert found["fastest"] == {k: doc["answers"][0]["pick"][k] for k in found["fastest"]}
    assert found["least_energy"] is None and found["tradeoff"] is None
    assert found["energy_unavailable"] == "unavailable: no RAPL energy counter (no powercap)"
    lines = objectives.lines(doc["answers"][0])
    assert len(lines) == 2 and "energy was not measured (unavailable: no RAPL" in lines[1]


def _recommend(tmp_path, summary):
    paths = {name: tmp_path / name for name in ("s.csv", "env.json", "rec.json", "rec.md")}
    summary.to_csv(paths["s.csv"], index=False)
    paths["env.json"].write_text(json.dumps({"fingerprint": "f", "device_name": "cpu"}))
    doc = answer.document(summary, point_table.summarize_points(summary), design(), 1.0)
    results.write_json(paths["rec.json"], doc)
    plot = tmp_path / "plots" / "energy.png"
    argv = ["--summary", str(paths["s.csv"]), "--env", str(paths["env.json"])]
    argv += ["--answer", str(paths["rec.json"]), "--markdown", str(paths["rec.md"])]
    argv += ["--html", str(tmp_path / "rec.html"), "--energy-plot", str(plot)]
    assert build.main(argv) == 0
    return plot, paths["rec.md"].read_text(), (tmp_path / "rec.html").read_text()


def test_with_energy_the_figure_is_drawn_and_each_objective_answered(tmp_path):
    plot, markdown, page = _recommend(tmp_path, _summary(ENERGY, "rapl"))
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "![Energy per sample vs throughput](plots/energy.png)" in markdown
    assert 'src="data:image/png;base64,' in page
    assert "Least energy: batch_size=32, num_workers=0" in markdown
    assert "Trade-off (η=0.5" in markdown and "Energy was not measured" not in markdown


def test_without_energy_no_figure_and_one_line_why(tmp_path):
    stale = tmp_path / "plots" / "energy.png"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier sweep's figure")
    plot, markdown, page = _recommend(tmp_path, _summary())
    # the declared file is this sweep's: a figure that says why, shown by neither document
    assert plot.read_bytes().startswith(b"\x89PNG")
    why = "Energy was not measured: unavailable: no RAPL energy counter (no powercap)."
    assert why in markdown and "<img" not in page and "energy.png" not in markdown
    assert "Least energy" not in markdown
