"""Token data: the random ids of ``tokens`` and the tokenized text of ``text``."""

from types import SimpleNamespace

import pytest
import torch

from batchscope.bench import tokens


def _random(split="train", **changes):
    options = {"labels": "ids", "num_classes": 3, "split": split, **changes}
    return tokens.random_tokens(50, 12, 7, **options)


def test_random_tokens_are_the_same_every_time_and_differ_between_splits():
    first, again, held_out = _random(), _random(), _random("test")
    assert torch.equal(first.ids, again.ids)
    assert not torch.equal(first.ids, held_out.ids)
    # no run seed moves them: the global generator is not what draws them
    torch.manual_seed(123)
    assert torch.equal(_random().ids, first.ids)


def test_random_ids_cover_the_vocabulary_and_nothing_beyond_it():
    ids = _random().ids
    assert ids.shape == (50, 12) and ids.dtype == torch.long
    assert set(ids.unique().tolist()) == set(range(7))


def test_labels_are_the_ids_for_a_language_model_and_one_class_per_sequence_otherwise():
    ids, label = _random()[4]
    assert ids.shape == (12,) and torch.equal(label, ids)
    classes = _random(labels="class")
    ids, label = classes[4]
    assert ids.shape == (12,) and label.shape == ()
    assert set(classes.labels.tolist()) <= {0, 1, 2} and len(set(classes.labels.tolist())) > 1


def _dataset(name="tokens", vocab_size=None, path=None, tokenizer=None, val_fraction=None):
    spec = SimpleNamespace(num_samples=40, vocab_size=vocab_size, path=path, tokenizer=tokenizer)
    return SimpleNamespace(name=name, tokens=spec, val_fraction=val_fraction)


FACTS = {"task": "causal_lm", "vocab_size": 5, "num_labels": None, "max_positions": 64}
#: A model that takes bytes.
BYTES = {**FACTS, "vocab_size": 300}


def test_the_vocabulary_is_the_models_unless_the_dataset_gives_one():
    split, vocab = tokens.open_split(_dataset(), "train", 8, FACTS)
    assert vocab == 5 and int(split.dataset.ids.max()) == 4
    split, vocab = tokens.open_split(_dataset(vocab_size=3), "train", 8, FACTS)
    assert vocab == 3 and int(split.dataset.ids.max()) == 2
    with pytest.raises(tokens.TokenError, match="give dataset.vocab_size"):
        tokens.open_split(_dataset(), "train", 8, {**FACTS, "vocab_size": None})


def test_sequence_classification_gets_a_class_below_the_models_num_labels():
    facts = {**FACTS, "task": "sequence_classification", "num_labels": 4}
    split, _ = tokens.open_split(_dataset(), "train", 8, facts)
    assert split.num_classes == 4 and split.dataset.labels.max() < 4


def test_a_text_read_as_bytes_is_cut_into_whole_sequences_split_apart(tmp_path):
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(256)) * 4 + b"tail")  # 1028 bytes: 32 sequences of 32
    with pytest.raises(tokens.TokenError, match="the text's bytes, 256 ids do not fit .* of 5"):
        tokens.open_split(_dataset("text", path=str(text)), "all", 32, FACTS)
    every, vocab = tokens.open_split(_dataset("text", path=str(text)), "all", 32, BYTES)
    assert vocab == 256 and every.dataset.ids.shape == (32, 32)
    assert every.dataset.ids.flatten().tolist() == list(range(256)) * 4
    dataset = _dataset("text", path=str(text), val_fraction=0.25)
    train, _ = tokens.open_split(dataset, "train", 32, BYTES)
    test, _ = tokens.open_split(dataset, "test", 32, BYTES)
    assert (len(train.dataset), len(test.dataset)) == (24, 8)
    rows = {tuple(r) for r in every.dataset.ids.tolist()}
    assert {tuple(r) for r in torch.cat([train.dataset.ids, test.dataset.ids]).tolist()} == rows
    ids, label = train.dataset[0]
    assert torch.equal(ids, label)


def test_a_text_too_short_for_one_sequence_says_so(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("short")
    with pytest.raises(tokens.TokenError, match="5 tokens make no sequence of 8"):
        tokens.open_split(_dataset("text", path=str(text)), "all", 8, BYTES)


def test_a_text_is_tokenized_with_the_local_tokenizer_folder(tmp_path):
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"[UNK]": 0, "hello": 1, "world": 2, "again": 3}
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(
        tmp_path / "tok"
    )
    text = tmp_path / "t.txt"
    text.write_text("hello world again hello nonsense world")
    ids, vocab = tokens.read_text_ids(str(text), str(tmp_path / "tok"))
    assert ids == [1, 2, 3, 1, 0, 2] and vocab == 4
    with pytest.raises(tokens.TokenError, match="do not fit the model's vocabulary of 3"):
        tokens.open_split(
            _dataset("text", path=str(text), tokenizer=str(tmp_path / "tok")),
            "all",
            2,
            {**FACTS, "vocab_size": 3},
        )


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_flops_per_sample_of_a_model_fed_token_ids(device):
    from batchscope.bench.flops import count_flops

    def build():
        return torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 50))

    flops = count_flops(build, (12,), train=False, device=device, dtype=torch.long)
    assert flops.per_sample == 2 * 12 * 8 * 50  # the head's matmul at every position
