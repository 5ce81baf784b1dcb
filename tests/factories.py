"""Factories tests share: run specs built the way the workflow builds them, from a config whose
missing keys take the schema's defaults."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from batchscope.core import config as config_module
from batchscope.core import spec as spec_module

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = config_module.load_schema(ROOT / "workflow" / "schemas" / "config.schema.yaml")

#: A tiny synthetic sweep: what a unit test measures unless it says otherwise.
BASE_CONFIG = {
    "dataset": {
        "name": "synthetic",
        "channels": 1,
        "image_size": 12,
        "num_classes": 4,
        "num_samples": 96,
    },
    "models": ["small_cnn"],
    "modes": ["train", "infer"],
    "batch_sizes": [8],
    "num_workers": [0],
    "seeds": [0],
    "device": "cpu",
    # step-based windows: unit tests measure a handful of steps, not seconds
    "measure": {"warmup_steps": 2, "ceiling": False, "min_seconds": 0},
}


def _merge(base: dict, changes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def sweep_config(**changes: Any) -> dict:
    """``BASE_CONFIG`` with ``changes`` merged in (sections key by key), checked and with the
    schema's defaults filled, as the workflow has it after ``validate``."""
    config = _merge(BASE_CONFIG, changes)
    config_module.check(config, SCHEMA)
    return config_module.with_defaults(config, SCHEMA)


def make_spec(
    mode: str = "train",
    *,
    kind: str = "bench",
    model: str = "small_cnn",
    batch_size: int = 8,
    accumulation_steps: int = 1,
    num_workers: int = 0,
    seed: int = 0,
    **config_changes: Any,
) -> spec_module.RunSpec:
    """The run spec of one grid point of ``sweep_config(**config_changes)``."""
    return spec_module.build(
        sweep_config(**config_changes),
        kind=kind,
        mode=mode,
        model=model,
        batch_size=batch_size,
        accumulation_steps=accumulation_steps,
        num_workers=num_workers,
        seed=seed,
    )


def settings(mode: str = "train", **values: Any) -> dict:
    """Config changes from flat setting names (``lr=0.01, warmup_steps=2, max_steps=6``), each
    put in the config section whose spec section has that field (``max_steps``: the mode's)."""
    sections = {
        "train": spec_module.TrainSpec,
        "measure": spec_module.MeasureSpec,
        "compute": spec_module.ComputeSpec,
        "loader": spec_module.LoaderSpec,
    }
    changes: dict[str, dict] = {}
    for name, value in values.items():
        if name == "max_steps":
            section = mode
        else:
            found = [s for s, cls in sections.items() if name in cls.__dataclass_fields__]
            if not found:
                raise KeyError(f"no config section has a setting {name!r}")
            section = found[0]
        changes.setdefault(section, {})[name] = value
    return changes


#: What an end-to-end test's sweep measures unless rounds are its subject: one round, windows
#: of a few steps rather than seconds (the default sweep measures 3 rounds of 1 s windows).
ONE_ROUND = {"rounds": 1, "min_seconds": 0}
