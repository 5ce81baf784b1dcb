"""Seeding, as the seed documents ask: Python, NumPy, torch (CPU and CUDA), cuDNN, DataLoader.

``PYTHONHASHSEED`` only takes effect when set before the interpreter starts, so the workflow sets
it in the job's environment; :func:`seed_everything` records whether it matches.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, *, deterministic: bool, compile: bool = False) -> dict:
    """Seed every generator a run touches and return what was set, for the result file.

    ``deterministic`` selects cuDNN's deterministic kernels and turns off its autotuner
    (``cudnn.benchmark``): bit-for-bit repeatable runs at some cost in speed on a GPU.
    ``compile`` says whether the run uses ``torch.compile`` (see :func:`deterministic_kernels`).
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        # cuBLAS needs a fixed workspace for deterministic GEMMs (CUDA >= 10.2).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        deterministic_kernels(compile=compile)
    return {
        "seed": seed,
        "deterministic": deterministic,
        "pythonhashseed": os.environ.get("PYTHONHASHSEED"),
    }


def deterministic_kernels(*, compile: bool) -> None:
    """``torch.use_deterministic_algorithms(True, warn_only=True)``, without the compiler where
    nothing is compiled, and without filling new memory.

    That call also sets ``torch._inductor.config.deterministic``, which imports the compiler
    (``torch._inductor``, then ``torch._dynamo``: about a second per process here) to set a
    flag only compiled code reads. A run that compiles nothing sets the kernels' flag alone,
    with the call that function makes for it; one that compiles, or a torch without that call,
    goes through the function itself.
    """
    set_kernels = getattr(torch._C, "_set_deterministic_algorithms", None)
    if compile or set_kernels is None:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        set_kernels(True, warn_only=True)
    # With deterministic algorithms torch also fills every new tensor before use, so that code
    # that reads memory it never wrote reads the same values each time. Correct kernels never
    # do, so the results stay bit-for-bit the same without it, and the fill cost 3-6% of a
    # training step on the CPU here: a loop the user runs does not pay it.
    utils = getattr(torch.utils, "deterministic", None)
    if utils is not None and hasattr(utils, "fill_uninitialized_memory"):
        utils.fill_uninitialized_memory = False


def loader_generator(seed: int) -> torch.Generator:
    """The generator a DataLoader shuffles with and derives its workers' base seed from."""
    return torch.Generator().manual_seed(seed)


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed Python and NumPy in each worker from torch's per-worker seed.

    torch seeds itself in each worker from the loader's generator; Python's ``random`` and NumPy
    are not, so without this, augmentations using them repeat across workers.
    """
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    np.random.seed(worker_seed)
