"""End to end: the tiny GPT-2 example (examples/tiny_gpt2), shrunk, on the tokens dataset over
batch size x sequence length, trained and run, to a summary, plots and recommendation; and a
token-data mistake stopped in one line before any job."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.factories import NO_RACE, ONE_ROUND
from tests.workflow.helpers import REPO, is_png, snakemake, write_config

pytestmark = pytest.mark.e2e

pytest.importorskip("transformers")

EXAMPLE = REPO / "examples" / "tiny_gpt2" / "config.yaml"

#: The example, tiny: one layer, a vocabulary of 256, a few hundred sequences, a few steps.
SHRINK = {
    "dataset": {"name": "tokens", "num_samples": 200},
    "sequence_lengths": [16, 32],
    "batch_sizes": [4, 8],
    "measure": {"warmup_steps": 1, "min_steps": 1, **ONE_ROUND},
    "sweep": NO_RACE,
    "train": {"max_steps": 4, "val_batch_size": 100},
    "infer": {"max_steps": 4},
}
GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 256, "n_positions": 64}


def _config() -> dict:
    config = yaml.safe_load(EXAMPLE.read_text())
    config["models"][0]["config"] = GPT2
    for key, value in SHRINK.items():
        merged = {**config.get(key, {}), **value} if isinstance(value, dict) else value
        config[key] = merged
    return config


@pytest.fixture(scope="module")
def token_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tokens")
    config = write_config(workdir, **_config())
    done = snakemake(workdir, "--cores", "2", "--configfile", str(config))
    assert done.returncode == 0, done.stderr[-3000:]
    return workdir


def test_the_example_runs_each_sequence_length_to_a_summary_with_tokens_per_s(token_run):
    summary = pd.read_csv(token_run / "results" / "summary.csv")
    grid = {(r.mode, r.sequence_length, r.batch_size) for r in summary.itertuples()}
    assert grid == {(m, s, b) for m in ("train", "infer") for s in (16, 32) for b in (4, 8)}
    assert (summary["status"] == "ok").all()
    assert (summary["tokens_per_s"] == summary["samples_per_s"] * summary["sequence_length"]).all()
    assert (summary["model_source"] == "hf").all() and (summary["dataset"] == "tokens").all()
    # FLOPs per sample grow with the sequence (counted on token ids, not images)
    flops = summary.groupby("sequence_length")["flops_per_sample"].min()
    assert flops[32] > flops[16] > 0
    train = summary[summary["mode"] == "train"]
    assert train["final_loss"].notna().all() and train["val_accuracy"].notna().all()
    # random ids cannot be predicted: scored on the next id, not the input one (which a model
    # with tied embeddings copies at once), accuracy stays near 1 / vocabulary
    assert (train["val_accuracy"] < 0.25).all()
    paths = {
        p.name for p in (token_run / "results" / "runs" / "train" / "tiny_gpt2").glob("*.json")
    }
    assert "seq32_bs8_acc1_nw0_seed0_round1.json" in paths
    by_point = pd.read_csv(token_run / "results" / "summary_by_point.csv")
    assert by_point["tokens_per_s_mean"].notna().all()


def test_each_sequence_length_gets_its_answer_and_the_memory_figure(token_run):
    answers = json.loads((token_run / "results" / "recommendation.json").read_text())["answers"]
    assert sorted((a["mode"], a["sequence_length"]) for a in answers) == [
        (m, s) for m in ("infer", "train") for s in (16, 32)
    ]
    text = (token_run / "results" / "recommendation.md").read_text()
    assert "sequences of 32 tokens" in text
    for name in ("memory_tokens", "throughput", "peak_memory"):
        assert is_png(token_run / "results" / "plots" / f"{name}.png")
    check = json.loads((token_run / "results" / "models" / "tiny_gpt2.json").read_text())
    assert check["input_shape"] == [16] and check["output_shape"] == [1, 16, 256]
    assert check["flops_per_sample_infer"] > 0


def test_a_sequence_longer_than_the_model_takes_stops_in_its_check(tmp_path: Path):
    config = _config()
    # the config does not say its positions: the check job, which builds it, does
    config["models"][0]["config"] = {k: v for k, v in GPT2.items() if k != "n_positions"}
    config["sequence_lengths"] = [16, 2048]
    config["modes"] = ["infer"]
    done = snakemake(
        tmp_path, "--cores", "2", "--configfile", str(write_config(tmp_path, **config))
    )
    assert done.returncode != 0
    ours = [line for line in done.stderr.splitlines() if line.startswith("batchscope:")]
    assert len(ours) == 1 and "up to 2048, longer than its 1024 positions" in ours[0], ours
    assert not list(tmp_path.glob("results/runs/**/*.json"))
