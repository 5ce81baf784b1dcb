"""Building the config's model entries: weights loaded strictly, timm and Hugging Face models
built offline, every mistake one line naming the entry."""

from pathlib import Path

import pytest
import torch

from batchscope.bench import models
from batchscope.bench.models import ModelError
from batchscope.core.config import load_schema
from batchscope.core.model_entries import ModelSpec


def test_a_checkpoint_holding_a_state_dict_under_model_is_loaded(tmp_path):
    source = models.build(
        ModelSpec(name="s", source="builtin", id="small_cnn"), num_classes=3, in_channels=1
    )
    path = tmp_path / "ckpt.pt"
    torch.save({"model": source.state_dict(), "step": 10}, path)
    entry = ModelSpec(name="s", source="builtin", id="small_cnn", weights=str(path))
    model = models.build(entry, num_classes=3, in_channels=1)
    models.load_weights(model, entry)
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_weights_of_another_model_name_the_missing_and_unexpected_keys(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"state_dict": {"head.weight": torch.zeros(2, 2), "0.weight": torch.zeros(4)}}, path)
    entry = ModelSpec(name="mine", source="builtin", id="small_cnn", weights=str(path))
    model = models.build(entry, num_classes=3, in_channels=1)
    with pytest.raises(ModelError) as info:
        models.load_weights(model, entry)
    message = str(info.value)
    assert message.startswith("model entry mine: weights ") and "\n" not in message
    assert "missing: features.0.weight, features.0.bias" in message
    assert "unexpected: head.weight, 0.weight" in message


def test_an_unknown_timm_name_offers_close_ones():
    pytest.importorskip("timm")
    entry = ModelSpec(name="t", source="timm", id="resnet1B")
    with pytest.raises(ModelError, match=r"model entry t: unknown timm model 'resnet1B' \(did"):
        models.build(entry, num_classes=3, in_channels=3)


def test_a_timm_model_is_built_for_the_datas_channels_and_classes():
    pytest.importorskip("timm")
    entry = ModelSpec(name="t", source="timm", id="resnet10t")
    channels = models.entry_input_channels(entry, 1)
    model = models.build(entry, num_classes=5, in_channels=channels)
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 5)


def test_a_hugging_face_config_builds_an_untrained_model_offline(monkeypatch):
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    entry = ModelSpec(
        name="g",
        source="hf",
        id="gpt2",
        kwargs={"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 100},
        task="causal_lm",
    )
    model = models.build(entry, num_classes=2, in_channels=1)
    logits = models.logits_of(model(input_ids=torch.zeros(1, 5, dtype=torch.long)))
    assert logits.shape == (1, 5, 100)
    wrong = ModelSpec(name="g", source="hf", id="gtp2", task="causal_lm")
    with pytest.raises(ModelError, match=r"model entry g: no Hugging Face config for 'gtp2'"):
        models.build(wrong, num_classes=2, in_channels=1)


VIT = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
       "intermediate_size": 32, "patch_size": 7}  # fmt: skip


def test_a_hugging_face_image_classifier_is_sized_to_the_data_and_trains_on_its_own_loss():
    pytest.importorskip("transformers")
    from batchscope.bench import losses

    entry = ModelSpec(name="v", source="hf", id="vit", kwargs=VIT, task="image_classification")
    channels = models.entry_input_channels(entry, 1)  # Fashion-MNIST: 1 channel, 28 px
    model = models.build(entry, num_classes=10, in_channels=channels, image_size=28)
    images, labels = torch.randn(3, 1, 28, 28), torch.tensor([0, 9, 4])
    assert models.logits_of(model(images)).shape == (3, 10)
    assert losses.takes_labels(model)  # train.loss auto: the model's own loss
    assert model(images, labels=labels).loss.item() > 0


@pytest.mark.parametrize(
    ("override", "says"),
    [
        ({"num_channels": 3}, "its config sets num_channels=3, and the sweep's"),
        ({"num_labels": 3}, "its config sets num_labels=3, and"),
    ],
)
def test_a_hugging_face_image_config_that_contradicts_the_data_is_one_line(override, says):
    pytest.importorskip("transformers")
    entry = ModelSpec(
        name="v", source="hf", id="vit", kwargs={**VIT, **override},
        task="image_classification",
    )  # fmt: skip
    with pytest.raises(ModelError) as caught:
        models.build(entry, num_classes=10, in_channels=1, image_size=28)
    message = str(caught.value)
    assert message.startswith(f"model entry v: {says}")
    assert "\n" not in message


#: A Hugging Face config whose image_size is a [height, width] list (Hiera): one tiny stage.
HIERA = {"embed_dim": 8, "num_heads": [1], "depths": [1], "patch_stride": [4, 4],
         "patch_size": [7, 7], "patch_padding": [3, 3], "masked_unit_size": [8, 8],
         "query_stride": [2, 2], "num_query_pool": 0}  # fmt: skip


def test_an_image_size_its_config_keeps_as_a_list_is_set_from_the_data_as_a_list():
    pytest.importorskip("transformers")
    entry = ModelSpec(name="h", source="hf", id="hiera", kwargs=HIERA, task="image_classification")
    model = models.build(entry, num_classes=4, in_channels=3, image_size=32)
    assert list(model.config.image_size) == [32, 32]
    assert models.logits_of(model(torch.zeros(2, 3, 32, 32))).shape == (2, 4)


def test_the_model_check_takes_an_image_classifiers_num_labels_where_it_cannot_count_classes():
    pytest.importorskip("transformers")
    from batchscope.bench import model_check

    entry = {"name": "v", "source": "hf", "id": "vit", "task": "image_classification"}
    entry |= {"kwargs": {**VIT, "num_labels": 3}, "weights": None}
    entry |= {"weights_sha256": None, "file_sha256": None}
    # an image folder's classes: a job counts them; the check has only a guess (10)
    data = {"dataset": "imagefolder", "channels": 3, "image_size": 28, "num_classes": 10}
    found = model_check.check(
        {"model": entry, "input": data | {"classes_known": False}, "train": True}
    )
    assert found["output_shape"] == [1, 3] and found["input_shape"] == [3, 28, 28]


def test_model_names_are_exactly_what_the_pinned_torchvision_builds():
    schema = load_schema(
        Path(__file__).resolve().parents[2] / "workflow/schemas/config.schema.yaml"
    )
    assert schema["$defs"]["model_name"]["enum"] == models.available_models()
