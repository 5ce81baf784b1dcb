"""The training loss (``train.loss``): the model's own, Hugging Face style, or one computed
from its output.

- ``auto``: a model whose ``forward`` takes ``labels`` is called with them, and the ``loss`` it
  returns is used; a model that returns none (or takes no labels) gets ``cross_entropy``;
- ``model``: the model's own loss, required (one line when it returns none);
- ``cross_entropy``: over the logits' last dimension; a sequence output (``B x L x V``) against
  its input ids (``B x L``, a language model's labels) is next-token prediction, Hugging Face
  style: position t is scored against id t + 1, one term per position;
- ``mse``: mean squared error; class-id targets are compared as one-hot vectors;
- ``file.py:function``: ``function(output, target)`` returns the loss (averaged over the batch).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F

from batchscope.bench.models import logits_of
from batchscope.core.model_entries import LOSSES

#: The losses named in the config (the core's list); anything else is ``file.py:function``.
NAMED = LOSSES


class LossError(ValueError):
    """A loss the run cannot compute; the message is one line naming ``train.loss``."""


def next_token(logits: torch.Tensor, target: torch.Tensor):
    """A language model's predictions and the ids they predict: position t against id t + 1
    (labels are the input ids, shifted here as Hugging Face models shift them)."""
    return logits[:, :-1].flatten(0, -2), target[:, 1:].flatten()


def cross_entropy(output, target: torch.Tensor) -> torch.Tensor:
    logits = logits_of(output)
    if logits.dim() > 2:  # one prediction per position: the next id
        predicted, ids = next_token(logits, target)
        return F.cross_entropy(predicted.float(), ids)
    return F.cross_entropy(logits, target)


def mse(output, target: torch.Tensor) -> torch.Tensor:
    prediction = logits_of(output)
    if not target.is_floating_point() and target.dim() == prediction.dim() - 1:
        target = F.one_hot(target, prediction.shape[-1])
    return F.mse_loss(prediction.float(), target.float())


def _from_file(text: str) -> Callable:
    where, _, name = text.rpartition(":")
    if not os.path.isfile(where):
        raise LossError(f"train.loss: file {where} not found")
    spec = importlib.util.spec_from_file_location("batchscope_loss", where)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise LossError(
            f"train.loss: importing {where} raised {type(exc).__name__}: {exc}"
        ) from exc
    function = getattr(module, name, None)
    if not callable(function):
        raise LossError(f"train.loss: {where} has no function {name!r}")
    return function


def output_loss(choice: str) -> Callable:
    """``loss(output, target)`` computed from the model's output: the loss named, or for
    ``auto`` and ``model`` (whose own loss needs the labels passed in) cross-entropy."""
    if choice == "mse":
        return mse
    if choice in NAMED:
        return cross_entropy
    return _from_file(choice)


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose ``forward`` the run calls in the end: through torch.compile's wrapper
    (``_orig_mod``) and DDP's or DataParallel's (``module``), in any order. Their own
    ``forward`` takes ``*args, **kwargs`` and says nothing of the labels."""
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, DistributedDataParallel | DataParallel):
            model = model.module
        else:
            return model


def takes_labels(model: torch.nn.Module) -> bool:
    """Whether the forward of the model inside ``model`` (:func:`unwrapped`) takes ``labels``
    (Hugging Face style)."""
    try:
        return "labels" in inspect.signature(unwrapped(model).forward).parameters
    except (TypeError, ValueError):
        return False


def own_loss(output) -> torch.Tensor | None:
    """The loss a model returned with its output (an attribute or a ``loss`` key), if any."""
    if isinstance(output, dict):
        return output.get("loss")
    return getattr(output, "loss", None)


#: ``loss_used`` of a run whose steps took the loss the model returned.
MODEL_OWN = "model"


class ForwardLoss:
    """``loss(x, y)``: a forward pass of ``model`` on ``x`` and its loss against ``y``, by
    ``train.loss`` (``choice``). ``used`` names the loss the last call computed (the result's
    ``loss_used``): ``model`` for the model's own, else ``cross_entropy``, ``mse`` or the
    ``file.py:function``; None before the first call."""

    def __init__(self, model: torch.nn.Module, choice: str):
        self.model, self.choice = model, choice
        self.from_output = output_loss(choice)
        self.output_name = "cross_entropy" if choice in ("auto", "model") else choice
        self.labels = choice in ("auto", "model") and takes_labels(model)
        self.used: str | None = None

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.choice not in ("auto", "model"):
            self.used = self.output_name
            return self.from_output(self.model(x), y)
        output = self.model(x, labels=y) if self.labels else self.model(x)
        own = own_loss(output)
        if own is not None:
            self.used = MODEL_OWN
            return own
        if self.choice == "model":
            raise LossError(
                "train.loss: model, but the model returned no loss"
                + ("" if self.labels else " (its forward takes no labels)")
            )
        self.used = self.output_name
        return self.from_output(output, y)


def forward_loss(model: torch.nn.Module, choice: str) -> ForwardLoss:
    """``loss(x, y)`` of ``model`` by ``train.loss`` (``choice``): :class:`ForwardLoss`."""
    return ForwardLoss(model, choice)
