"""Each name list the config schema enumerates is the code's list: the schema's enums against
the constants the code branches on, so that a name added on one side only fails here."""

import pytest

from batchscope.core import config, datasets, grid, prediction, rounds, schedules
from batchscope.core import model_entries as models

SCHEMA = config.load_schema(config.SCHEMA_PATH)

#: The schema's enums (by the key they sit under) and the code's list each must equal.
CODE_LISTS = {
    "dataset.name": datasets.NAMES,
    "dataset.decoder": datasets.DECODERS,
    "model_entry.task": models.HF_TASKS,
    "modes[]": grid.MODES,
    "sweep.strategy": rounds.STRATEGIES,
    "train.loss": models.LOSSES,
    "train.lr_scaling": schedules.LR_RULES,
    "train.lr_decay": schedules.DECAYS,
    "train.predict_calibration": prediction.STRATEGIES,
}
#: Enums held elsewhere: the model names (tests/bench/test_models.py), the optimizer and the
#: precision (tests/bench/test_training.py), sweep.launch (tests/bench/test_launch.py); the
#: device (auto and the three torch device types ``measure.resolve_device`` takes) and the image
#: channels (1 or 3) are values, not names.
CHECKED_ELSEWHERE = {
    "model_name",
    "device",
    "train.optimizer",
    "compute.precision",
    "sweep.launch",
    "dataset.channels",
}


def _enums(node, path=""):
    """(where, enum) of every enum in the schema, ``where`` the dotted keys down to it."""
    if isinstance(node, dict):
        if "enum" in node:
            yield path, node["enum"]
        for key, child in node.items():
            if key in ("properties", "$defs"):
                for name, sub in child.items():
                    yield from _enums(sub, f"{path}.{name}" if path else name)
            elif key == "items":
                yield from _enums(child, f"{path}[]")
            elif key in ("anyOf", "oneOf", "allOf"):
                for sub in child:
                    yield from _enums(sub, path)
            elif key == "additionalProperties" and isinstance(child, dict):
                yield from _enums(child, f"{path}.*")
    elif isinstance(node, list):
        for sub in node:
            yield from _enums(sub, path)


FOUND = dict(_enums(SCHEMA))


@pytest.mark.parametrize("where", sorted(CODE_LISTS))
def test_the_schema_enum_is_the_code_list(where):
    assert where in FOUND, f"the schema has no enum at {where}: {sorted(FOUND)}"
    assert list(FOUND[where]) == list(CODE_LISTS[where])


def test_every_enum_of_the_schema_is_held_by_a_test():
    unchecked = set(FOUND) - set(CODE_LISTS) - CHECKED_ELSEWHERE
    assert not unchecked, f"enums with no code list held equal to them: {sorted(unchecked)}"
