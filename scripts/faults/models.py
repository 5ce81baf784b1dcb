"""Faults in the user's model: a factory file that does not import, and a checkpoint whose
weights do not fit the model it builds. Each adds the user's model beside ``small_cnn`` in a
copy of the base sweep (whose results must all survive), then mends it for the rerun."""

from __future__ import annotations

from faults.harness import Folder, Row, Suite, observe

#: The user's model, for Fashion-MNIST (one channel, ten classes).
MYNET = """from torch import nn


def build(width=6, in_ch=1, classes=10):
    return nn.Sequential(
        nn.Conv2d(in_ch, width, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(width, classes),
    )
"""
#: The same file with a syntax error in it.
BROKEN = MYNET.replace("def build(width=6, in_ch=1, classes=10):", "def build(width=6, in_ch=1:")
#: Where the model faults are met: the user adds their model to a finished sweep.
ADDED = "the user's model added to a finished small_cnn sweep"
#: The set-up jobs a model added runs: its check, and the checkpoint over every model's.
ADDED_SETUP = ["model_check", "models_checked"]
ENTRY = {"name": "mynet", "factory": "models/mynet.py:build", "kwargs": {"width": 6}}


def save_checkpoint(folder: Folder, width: int) -> None:
    """``ckpt/mynet.pt``: the state dict of the model ``build(width=width)``."""
    import torch

    namespace: dict = {}
    exec(MYNET, namespace)
    (folder.path / "ckpt").mkdir(exist_ok=True)
    torch.save(namespace["build"](width=width).state_dict(), folder.path / "ckpt" / "mynet.pt")


def _with_mynet(suite: Suite, case: str, entry: dict, source: str) -> tuple[Folder, list[str]]:
    """A copy of the base whose config adds ``entry`` and whose ``models/mynet.py`` is
    ``source``; the results mynet's points will have."""
    folder = suite.copy("single", case)
    (folder.path / "models").mkdir()
    (folder.path / "models" / "mynet.py").write_text(source)
    config = suite.config("single")
    config["models"] = [*config["models"], entry]
    folder.write_config(config)
    points = [
        folder.point(mode, batch, model="mynet")
        for mode in config["modes"]
        for batch in config["batch_sizes"]
    ]
    return folder, points


def broken_model_file(suite: Suite) -> Row:
    folder, points = _with_mynet(suite, "broken-model", ENTRY, BROKEN)

    def fix() -> None:
        (folder.path / "models" / "mynet.py").write_text(MYNET)

    return observe(
        "a model file that does not import (syntax error)", folder,
        lambda: folder.run("--cores", "2"), points=points, fix=fix, setup_touched=ADDED_SETUP,
        how=ADDED,
    )  # fmt: skip


def checkpoint_mismatch(suite: Suite) -> Row:
    entry = {**ENTRY, "weights": "ckpt/mynet.pt"}
    folder, points = _with_mynet(suite, "bad-checkpoint", entry, MYNET)
    save_checkpoint(folder, width=5)  # the model is built with width 6

    return observe(
        "a checkpoint that does not fit the model", folder,
        lambda: folder.run("--cores", "2"), points=points,
        fix=lambda: save_checkpoint(folder, width=6), setup_touched=ADDED_SETUP, how=ADDED,
    )  # fmt: skip


#: The cases of this family, by the name ``--cases`` takes.
CASES = {"broken-model": broken_model_file, "bad-checkpoint": checkpoint_mismatch}
