"""FLOPs per sample, by PyTorch's formulas (``torch.utils.flop_counter.flop_registry``).

Two ways to the same figure:

- ``device="meta"``: ``torch.utils.flop_counter.FlopCounterMode`` on the meta device: no memory,
  no kernels, whatever the model's size. Its first operator imports ``torch._dynamo`` (its
  dispatch mode is wrapped by ``torch._disable_dynamo``), and the meta device's Python kernels
  import sympy and, through torch's reference implementations, ``torch._dynamo`` again: about a
  second per process here, which a process that has loaded torchvision (which imports
  ``torch._dynamo`` itself) or an optimizer (likewise) pays anyway.
- ``device="cpu"``: a CPU copy of the model run for real on two samples, counted by
  :class:`FlopCount`, which imports neither: for a model as small as the small CNN, a few
  milliseconds instead of that second.

:class:`FlopCount` sums the same formulas over the same operators as ``FlopCounterMode``, minus
its per-module breakdown. ``FlopCounterMode`` splits an operator that has no formula into the
operators it is made of; ``FlopCount`` does so where the split is C++ (nothing to import), leaves
``native_batch_norm`` whole (its Python split only chooses a batch-norm kernel, none of which
has a formula), and stops at any other operator with a Python split or a higher-order operator
(control flow, Triton kernels): such a model is counted again, by ``FlopCounterMode`` on the
meta device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from batchscope.bench.models import logits_of

#: Samples counted: batch norm in training mode needs more than one per channel.
_BATCH = 2

#: Metadata queries ``FlopCounterMode`` leaves to the tensor (no FLOPs, nothing to split).
_METADATA_OPS = frozenset(
    [
        getattr(torch.ops.aten, name).default
        for name in (
            "sym_is_contiguous",
            "is_contiguous",
            "is_strides_like_format",
            "is_non_overlapping_and_dense",
            "size",
            "sym_size",
            "stride",
            "sym_stride",
            "storage_offset",
            "sym_storage_offset",
            "numel",
            "sym_numel",
            "dim",
        )
        if hasattr(torch.ops.aten, name)
    ]
    + [torch.ops.aten.is_contiguous.memory_format, torch.ops.prim.layout.default]
)

#: Operators whose Python split (``py_kernels[CompositeImplicitAutograd]``) has no formula in it.
_UNSPLIT = frozenset([torch.ops.aten.native_batch_norm.default])


class _Unsupported(Exception):
    """An operator :class:`FlopCount` leaves to ``FlopCounterMode``."""


def is_convolution(op) -> bool:
    """Is ``op`` (an operator or its overload packet) a convolution, forward or backward?

    On a GPU these run in cuDNN and the rest of the counted FLOPs (``mm``, ``addmm``, ``bmm``,
    attention) in cuBLAS: fp32 work in the two may run in different math modes (TF32 or not).
    """
    return "convolution" in str(getattr(op, "_overloadpacket", op))


@dataclass(frozen=True)
class Flops:
    """FLOPs one sample costs, and the part of them that is convolutions."""

    per_sample: float
    conv_per_sample: float

    @property
    def conv_share(self) -> float:
        """The convolutions' share of the FLOPs (0 when nothing was counted)."""
        return self.conv_per_sample / self.per_sample if self.per_sample else 0.0


class FlopCount(TorchDispatchMode):
    """Sums ``flop_registry``'s formulas over the operators run inside it, in ``total``
    (``conv``: the part of it that convolutions do)."""

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # The base class wraps __torch_dispatch__ in torch._disable_dynamo, which imports
        # torch._dynamo on the first call; it matters only inside compiled code, never here.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.conv = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs if kwargs else {}
        if func in _METADATA_OPS:
            return NotImplemented
        if isinstance(func, torch._ops.HigherOrderOperator):
            raise _Unsupported(str(func))
        # FlopCounterMode's test: the registry is keyed by overload packet, so every operator
        # that can be split into others is
        if func not in flop_registry and func is not torch.ops.prim.device.default:
            if torch._C.DispatchKey.CompositeImplicitAutograd in func.py_kernels:
                if func not in _UNSPLIT:
                    raise _Unsupported(str(func))
            else:
                with self:
                    split = func.decompose(*args, **kwargs)
                    if split is not NotImplemented:
                        return split
        out = func(*args, **kwargs)
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            flops = formula(*args, **kwargs, out_val=out)
            self.total += flops
            if is_convolution(func):
                self.conv += flops
        return out


def flops_per_sample(
    build: Callable[[], torch.nn.Module],
    input_shape: tuple[int, ...],
    *,
    train: bool,
    device: str = "meta",
    dtype: torch.dtype = torch.float32,
) -> float:
    """FLOPs one sample costs: forward (infer) or forward + backward (train); see
    :func:`count_flops`."""
    return count_flops(build, input_shape, train=train, device=device, dtype=dtype).per_sample


def count_flops(
    build: Callable[[], torch.nn.Module],
    input_shape: tuple[int, ...],
    *,
    train: bool,
    device: str = "meta",
    dtype: torch.dtype = torch.float32,
) -> Flops:
    """FLOPs one sample costs: forward (infer) or forward + backward (train), and how many of
    them convolutions do.

    ``build`` makes a fresh model; the real model's state (batch-norm statistics) is untouched,
    and so is the global RNG: a CPU copy draws its initial weights from a forked one.
    ``device`` is ``"meta"`` or ``"cpu"`` (see the module's docstring); both give the figure
    ``FlopCounterMode`` gives. ``dtype``: the input's (``torch.long`` for token ids, which
    are all 0: any id costs the same).
    """
    if device == "cpu":
        counter = FlopCount()
        try:
            with torch.random.fork_rng(devices=[]):
                _run_once(build, input_shape, train, counter, "cpu", dtype)
            return Flops(counter.total / _BATCH, counter.conv / _BATCH)
        except _Unsupported:
            pass
    elif device != "meta":
        raise ValueError(f"FLOPs are counted on the meta device or a CPU copy, not {device!r}")
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    _run_once(build, input_shape, train, counter, "meta", dtype)
    by_op = counter.get_flop_counts().get("Global", {})
    conv = sum(flops for op, flops in by_op.items() if is_convolution(op))
    return Flops(counter.get_total_flops() / _BATCH, conv / _BATCH)


def _run_once(
    build, input_shape: tuple[int, ...], train: bool, mode, device: str, dtype: torch.dtype
) -> None:
    """A fresh model's forward (and, in training, backward) pass on ``_BATCH`` samples on
    ``device``, under ``mode``."""
    with torch.device(device):
        model = build()
        x = torch.zeros(_BATCH, *input_shape, dtype=dtype)
    model.train(train)
    with mode:
        if train:
            logits_of(model(x)).sum().backward()
        else:
            model(x)
