"""Token data: ``tokens`` (deterministic random ids) and ``text`` (a local text file,
tokenized), each sample ``sequence_length`` ids long, for models that read token ids.

An item is ``(ids, label)``: ``ids`` a ``LongTensor`` of ``sequence_length``; ``label`` the ids
again for a causal language model (which shifts them itself, Hugging Face style), or one class
id for sequence classification. Everything is built in memory when the split is opened, before
any clock: an item costs an index. A tokenizer is read from a local folder only, never fetched.
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset

from batchscope.core import datasets

#: Seeds of the ``tokens`` splits: part of the data, not of a run (no run seed moves them).
TOKENS_SEEDS = {"train": 1, "test": 2}

#: What a label is: the ids themselves (language modelling) or a class per sample.
LABELS = ("ids", "class")


class TokenError(ValueError):
    """Token data that cannot be made or read; the message is one line."""


class TokenSequences(Dataset):
    """Fixed ``(ids, label)`` pairs: ``ids`` is an ``N x L`` LongTensor, ``labels`` ``N`` class
    ids or None (the label of a sample is then its ids)."""

    def __init__(self, ids: torch.Tensor, labels: torch.Tensor | None) -> None:
        self.ids = ids
        self.labels = labels

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, index: int):
        ids = self.ids[index]
        return ids, (ids if self.labels is None else self.labels[index])


def random_tokens(
    num_samples: int,
    sequence_length: int,
    vocab_size: int,
    *,
    labels: str,
    num_classes: int,
    split: str,
) -> TokenSequences:
    """``num_samples`` sequences of ids drawn uniformly from ``0 .. vocab_size - 1`` by a
    generator of the split's own seed: the same every run, the two splits different."""
    if labels not in LABELS:
        raise TokenError(f"tokens: labels {labels!r}: expected one of {', '.join(LABELS)}")
    if split not in TOKENS_SEEDS:
        raise TokenError(f"tokens: unknown split {split!r}; expected train or test")
    generator = torch.Generator().manual_seed(TOKENS_SEEDS[split])
    ids = torch.randint(vocab_size, (num_samples, sequence_length), generator=generator)
    classes = None
    if labels == "class":
        classes = torch.randint(num_classes, (num_samples,), generator=generator)
    return TokenSequences(ids, classes)


def read_text_ids(path: str, tokenizer: str | None) -> tuple[list[int], int]:
    """The ids of a text file, and the vocabulary they come from: the local tokenizer folder's
    (``AutoTokenizer.from_pretrained(folder)``, nothing downloaded), or the file's UTF-8 bytes."""
    try:
        if tokenizer is None:
            with open(path, "rb") as handle:
                return list(handle.read()), datasets.BYTE_VOCAB
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise TokenError(f"text: cannot read {path}: {' '.join(str(exc).split())}") from exc
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    except ImportError:
        raise TokenError(
            "text: a tokenizer needs transformers: pip install 'batchscope[models]'"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure to load is the folder's
        raise TokenError(f"text: cannot load the tokenizer in {tokenizer}: {exc}") from exc
    return list(tok(text, add_special_tokens=False)["input_ids"]), len(tok)


def text_sequences(
    ids: list[int], sequence_length: int, split: str, val_fraction: float
) -> TokenSequences:
    """The text's ids cut into whole sequences (the remainder dropped); ``train`` is those
    :func:`batchscope.core.datasets.text_held_out` keeps, ``test`` the held-out ones, ``all``
    every one. Labels are the ids (language modelling)."""
    count = datasets.text_sequences(len(ids), sequence_length)
    if count == 0:
        raise TokenError(
            f"text: {len(ids)} tokens make no sequence of {sequence_length}: use a longer text"
        )
    table = torch.tensor(ids[: count * sequence_length], dtype=torch.long)
    table = table.view(count, sequence_length)
    if split != "all":
        held = torch.tensor(datasets.text_held_out(count, val_fraction))
        table = table[held] if split == "test" else table[~held]
    return TokenSequences(table, None)


def open_split(dataset, split: str, sequence_length: int, facts: dict):
    """The split ``split`` of the token dataset of ``dataset`` (a
    :class:`~batchscope.core.spec.DatasetSpec`) as a :class:`batchscope.bench.data.Split`, for
    a model with ``facts`` (:func:`batchscope.bench.models.token_facts`: its vocabulary, and
    for sequence classification its classes)."""
    from batchscope.bench.data import Split

    tokens = dataset.tokens
    num_classes = facts.get("num_labels") or 1
    labels = "class" if facts.get("task") == "sequence_classification" else "ids"
    vocab = facts.get("vocab_size")
    if dataset.name == "tokens":
        vocab = tokens.vocab_size or vocab
        if not vocab:
            raise TokenError("tokens: no vocabulary: give dataset.vocab_size")
        data = random_tokens(
            tokens.num_samples,
            sequence_length,
            vocab,
            labels=labels,
            num_classes=num_classes,
            split="train" if split == "train" else "test",
        )
    else:
        if labels == "class":
            raise TokenError("text: its samples have no class; use a causal_lm model")
        ids, text_vocab = read_text_ids(tokens.path, tokens.tokenizer)
        if vocab and text_vocab > vocab:
            source = "the tokenizer's" if tokens.tokenizer else "the text's bytes,"
            raise TokenError(
                f"text: {source} {text_vocab} ids do not fit the model's vocabulary of {vocab}"
            )
        vocab = text_vocab
        data = text_sequences(ids, sequence_length, split, dataset.val_fraction or 0.0)
    return Split(data, num_classes, channels=None, image_size=None, skipped=0), vocab
