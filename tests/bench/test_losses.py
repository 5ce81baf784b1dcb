"""The training loss (``train.loss``): the model's own, Hugging Face style, or from its output."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from batchscope.bench import losses


class OwnLoss(nn.Module):
    """Returns its logits and, given labels, a loss of its own (not cross-entropy)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x, labels=None):
        logits = self.linear(x)
        loss = None if labels is None else logits.pow(2).mean() + 7.0
        return SimpleNamespace(logits=logits, loss=loss)


X = torch.randn(5, 4)
Y = torch.tensor([0, 2, 1, 1, 0])


def test_auto_uses_the_loss_the_model_returns_when_given_its_labels():
    model = OwnLoss()
    loss = losses.forward_loss(model, "auto")(X, Y)
    assert torch.allclose(loss, model.linear(X).pow(2).mean() + 7.0)


def test_auto_falls_back_to_cross_entropy_for_a_model_without_a_loss():
    model = nn.Linear(4, 3)
    assert torch.allclose(losses.forward_loss(model, "auto")(X, Y), F.cross_entropy(model(X), Y))


def test_model_requires_the_models_own_loss():
    with pytest.raises(losses.LossError, match="returned no loss .its forward takes no labels"):
        losses.forward_loss(nn.Linear(4, 3), "model")(X, Y)


def test_cross_entropy_ignores_a_models_own_loss_and_scores_a_sequence_on_the_next_ids():
    model = OwnLoss()
    assert torch.allclose(
        losses.forward_loss(model, "cross_entropy")(X, Y), F.cross_entropy(model.linear(X), Y)
    )
    logits, ids = torch.randn(2, 6, 9), torch.randint(9, (2, 6))
    # position t predicts id t + 1 (the labels are the input ids, Hugging Face style)
    expected = F.cross_entropy(logits[:, :5].reshape(10, 9), ids[:, 1:].reshape(10))
    assert torch.allclose(losses.cross_entropy(logits, ids), expected)


def test_a_language_models_cross_entropy_is_the_one_it_computes_itself():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=40)
    model = transformers.GPT2LMHeadModel(config).eval()  # no dropout: two passes agree
    ids = torch.randint(40, (3, 10))
    own = losses.forward_loss(model, "auto")(ids, ids)
    assert torch.allclose(losses.forward_loss(model, "cross_entropy")(ids, ids), own)


def test_mse_compares_class_ids_as_one_hot_vectors():
    model = nn.Linear(4, 3)
    expected = F.mse_loss(model(X), F.one_hot(Y, 3).float())
    assert torch.allclose(losses.forward_loss(model, "mse")(X, Y), expected)


def test_a_loss_from_a_file(tmp_path):
    (tmp_path / "myloss.py").write_text(
        "def halved(output, target):\n    return (output.sum() - target.sum()) / 2\n"
    )
    model = nn.Linear(4, 3)
    loss = losses.forward_loss(model, f"{tmp_path / 'myloss.py'}:halved")(X, Y)
    assert torch.allclose(loss, (model(X).sum() - Y.sum()) / 2)
    with pytest.raises(losses.LossError, match="has no function 'nope'"):
        losses.forward_loss(model, f"{tmp_path / 'myloss.py'}:nope")


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of one process, for models under DDP."""
    dist = torch.distributed
    store = f"file://{tmp_path / 'store'}"
    dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_under_ddp_and_compile_auto_still_asks_the_model_inside_for_its_loss(one_process_group):
    from torch.nn.parallel import DistributedDataParallel

    model = OwnLoss()
    wrapped = DistributedDataParallel(model)
    compiled = torch.compile(wrapped)  # compiles lazily: nothing runs here
    assert losses.unwrapped(wrapped) is model and losses.unwrapped(compiled) is model
    assert losses.takes_labels(wrapped) and losses.takes_labels(compiled)
    loss_of = losses.forward_loss(wrapped, "auto")
    # the model's own loss (not cross-entropy, which the wrapper's signature used to give)
    assert torch.allclose(loss_of(X, Y), model.linear(X).pow(2).mean() + 7.0)
    assert loss_of.used == "model"


def test_a_hugging_face_model_under_ddp_uses_its_own_loss(one_process_group):
    transformers = pytest.importorskip("transformers")
    from torch.nn.parallel import DistributedDataParallel

    config = transformers.AutoConfig.for_model(
        "gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=64
    )
    model = DistributedDataParallel(transformers.AutoModelForCausalLM.from_config(config))
    ids = torch.randint(64, (2, 8))
    loss_of = losses.forward_loss(model, "auto")
    assert loss_of.used is None
    loss_of(ids, ids).backward()
    assert loss_of.used == "model"


def test_the_loss_used_names_the_fallback_and_the_configured_loss():
    auto = losses.forward_loss(nn.Linear(4, 3), "auto")
    auto(X, Y)
    assert auto.used == "cross_entropy"
    mse = losses.forward_loss(nn.Linear(4, 3), "mse")
    mse(X, Y)
    assert mse.used == "mse"
