"""Token data in the config, the run spec, the paths and the grid: what is known before any
job runs."""

import pytest

from batchscope.core import config as config_module
from batchscope.core import grid, paths
from batchscope.core import spec as spec_module
from tests.factories import make_spec, sweep_config

GPT2 = {"name": "g", "hf": "gpt2", "task": "causal_lm", "config": {"n_layer": 1}}
TOKENS = {"dataset": {"name": "tokens", "num_samples": 64}, "models": [GPT2]}


def _error(**changes) -> str:
    with pytest.raises(config_module.ConfigError) as caught:
        sweep_config(**changes)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_token_data_and_image_models_do_not_mix():
    assert "tokens gives token ids, and model small_cnn reads images" in _error(
        dataset={"name": "tokens"}
    )
    assert "synthetic gives images, and model g (hf, task causal_lm) reads token ids" in _error(
        models=[GPT2]
    )
    vit = {"name": "v", "hf": "vit", "task": "image_classification"}
    sweep_config(models=[vit])  # a Hugging Face image classifier reads the images
    assert "tokens gives token ids, and model v (hf, task image_classification) reads images" in (
        _error(**TOKENS | {"models": [vit]})
    )


def test_a_sequence_longer_than_the_models_config_allows_is_refused_at_once():
    model = {**GPT2, "config": {"n_positions": 64}}
    message = _error(**{**TOKENS, "models": [model]}, sequence_lengths=[32, 128])
    assert message.startswith("config key sequence_lengths: 128 is longer than model g")


def test_a_batch_larger_than_the_tokens_is_refused():
    message = _error(**TOKENS, batch_sizes=[64])
    assert message.startswith("config key batch_sizes[0]: train batches of 64")
    assert "tokens samples (dataset.num_samples)" in message


def test_a_changed_text_file_changes_the_run_spec(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(b"x" * 1280)
    changes = {"dataset": {"name": "text", "path": str(text)}, "models": [GPT2], "model": "g"}
    changes["sequence_lengths"] = [32]
    before = make_spec("infer", sequence_length=32, **changes)
    text.write_bytes(b"y" * 1280)
    after = make_spec("infer", sequence_length=32, **changes)
    assert before.dataset.tokens.path == after.dataset.tokens.path
    assert before.sha256() != after.sha256()


def test_a_text_read_as_bytes_is_counted_at_its_longest_sequence(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(b"x" * 1280)  # 40 sequences of 32, 10 of 128
    dataset = {"name": "text", "path": str(text)}
    sweep_config(dataset=dataset, models=[GPT2], sequence_lengths=[32], modes=["infer"])
    message = _error(dataset=dataset, models=[GPT2], sequence_lengths=[32, 128], modes=["infer"])
    assert "give 1 steps over the 10 sequences of 128 bytes" in message


def test_settings_of_one_kind_of_data_are_refused_for_another(tmp_path):
    assert _error(**TOKENS | {"dataset": {"name": "tokens", "tokenizer": str(tmp_path)}}) == (
        "config key dataset.tokenizer: only used when dataset.name is text"
    )
    assert "dataset.path: 'nowhere.txt' is not a file" in _error(
        dataset={"name": "text", "path": "nowhere.txt"}, models=[GPT2]
    )


def test_the_loss_is_a_named_one_or_a_function_in_a_file():
    assert sweep_config(train={"loss": "losses/my.py:focal"})["train"]["loss"].endswith(":focal")
    assert _error(train={"loss": "l1"}).startswith("config key train.loss:")


def test_a_token_run_spec_carries_its_sequence_length_and_the_data_it_reads():
    spec = make_spec("infer", model="g", sequence_length=32, **TOKENS)
    assert spec.sequence_length == 32
    assert spec.dataset.tokens.num_samples == 64 and spec.dataset.root is None
    assert spec_module.RunSpec.from_json(spec.to_json()) == spec
    with pytest.raises(spec_module.SpecError, match="sequence_length: needed for token"):
        spec_module.build(
            sweep_config(**TOKENS), mode="infer", model="g", batch_size=8, num_workers=0, seed=0
        )


def test_token_paths_carry_the_sequence_length_and_image_paths_stay_as_they_were():
    grid = {"mode": "train", "model": "g", "batch_size": 8, "accumulation_steps": 2}
    grid |= {"num_workers": 1, "seed": 3, "round": 2}
    image = f"{paths.run_stem(**grid, sequence_length=None)}.json"
    assert image == "results/runs/train/g/bs8_acc2_nw1_seed3_round2.json"
    token = f"{paths.run_stem(**grid, sequence_length=128)}.json"
    assert token == "results/runs/train/g/seq128_bs8_acc2_nw1_seed3_round2.json"
    assert paths.grid_of_path(token) == {**grid, "sequence_length": 128, "devices": 1}
    assert paths.grid_of_path(image) == {**grid, "sequence_length": None, "devices": 1}


def test_points_of_different_sequence_lengths_are_apart_and_in_different_groups():
    row = {"mode": "infer", "model": "g", "batch_size": 8, "accumulation_steps": 1}
    row["num_workers"] = 0
    short, long = (
        grid.point_of(row | {"sequence_length": 16}),
        grid.point_of(row | {"sequence_length": 32.0}),
    )
    assert short != long and grid.group_of(short) != grid.group_of(long)
    # an image result has no sequence length, or an empty one in a table
    assert grid.point_of(row)[2] is None
    assert grid.point_of(row | {"sequence_length": float("nan")}) == grid.point_of(row)


def _spec_of(raw: dict, **point):
    """The run spec of ``raw`` with the schema's defaults, without the checks against the data
    (the tokenizer folder here is no real tokenizer)."""
    schema = config_module.load_schema(config_module.SCHEMA_PATH)
    config = config_module.with_defaults(raw, schema)
    return spec_module.build(
        config,
        kind="bench",
        batch_size=8,
        accumulation_steps=1,
        num_workers=0,
        seed=0,
        devices=1,
        **point,
    )


def test_an_edited_loss_file_or_tokenizer_folder_changes_the_run_spec(tmp_path):
    """Both are read by the jobs, so an edit must rerun them, like a factory's file."""
    loss = tmp_path / "my.py"
    loss.write_text("def focal(outputs, targets):\n    return outputs.sum()\n")
    raw = {"models": ["small_cnn"], "train": {"loss": f"{loss}:focal"}}
    before = _spec_of(raw, mode="train", model="small_cnn", sequence_length=None)
    loss.write_text("def focal(outputs, targets):\n    return outputs.mean()\n")
    after = _spec_of(raw, mode="train", model="small_cnn", sequence_length=None)
    assert before.train.loss == after.train.loss and before.sha256() != after.sha256()

    folder = tmp_path / "tok" / "nested"
    folder.mkdir(parents=True)
    (folder / "vocab.json").write_text('{"a": 0}')
    text = tmp_path / "t.txt"
    text.write_text("a a a a")
    dataset = {"name": "text", "path": str(text), "tokenizer": str(tmp_path / "tok")}
    raw = {"dataset": dataset, "models": [GPT2], "sequence_lengths": [2]}
    first = _spec_of(raw, mode="infer", model="g", sequence_length=2)
    (folder / "vocab.json").write_text('{"a": 1}')
    second = _spec_of(raw, mode="infer", model="g", sequence_length=2)
    assert first.dataset.tokens.tokenizer == second.dataset.tokens.tokenizer
    assert first.sha256() != second.sha256()
