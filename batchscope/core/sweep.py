"""``python -m batchscope sweep``: the common sweep from a few arguments, without a config file.

:func:`sweep_config` turns the arguments into the config they mean (checked like any other, so
a bad argument is one line before anything runs); the command prints it, saves it, and
:func:`run` hands it to the workflow through Snakemake's Python API, with the settings the
``snakemake`` command takes from ``profiles/default`` beside the Snakefile: the same DAG as
``snakemake -s <repo>/Snakefile --configfile <saved config>``.

No torch; Snakemake is imported only by :func:`run`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from batchscope.core import config as config_module
from batchscope.core import datasets

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"
PROFILE = REPO / "profiles" / "default" / "config.yaml"

MODES = {"train": ["train"], "infer": ["infer"], "both": ["train", "infer"]}


class SweepArgumentError(ValueError):
    """An argument the sweep cannot run with; the message is one line naming it."""


def int_list(text: str, option: str, minimum: int) -> list[int]:
    """``"8,16,32"`` -> ``[8, 16, 32]``; anything else is a :class:`SweepArgumentError`."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise SweepArgumentError(
            f"{option} {text!r}: expected whole numbers separated by commas, e.g. 8,16,32"
        ) from None
    if any(v < minimum for v in values):
        raise SweepArgumentError(f"{option} {text!r}: every value must be at least {minimum}")
    if len(set(values)) != len(values):
        raise SweepArgumentError(f"{option} {text!r}: a value is repeated")
    return values


def dataset_section(data: str, image_size: int | None) -> dict[str, Any]:
    """``--data``: a dataset the catalogue knows by name, else a folder of class subfolders."""
    if data in datasets.NAMES and data != "imagefolder":
        section: dict[str, Any] = {"name": data}
    elif os.path.isdir(data):
        section = {"name": "imagefolder", "path": os.path.abspath(data)}
    else:
        known = ", ".join(n for n in datasets.NAMES if n != "imagefolder")
        raise SweepArgumentError(
            f"--data {data!r}: not a folder of class subfolders of images, nor one of {known}"
        )
    if image_size is not None:
        section["image_size"] = image_size
    return section


def sweep_config(
    *,
    models: Sequence[str],
    data: str,
    batch_sizes: str,
    workers: str | None = None,
    mode: str | None = None,
    image_size: int | None = None,
) -> dict[str, Any]:
    """The config the arguments mean, checked against the schema and the data; an argument
    left out (None) leaves its key out, for the schema's default."""
    if mode is not None and mode not in MODES:
        raise SweepArgumentError(f"--mode {mode!r}: expected one of {', '.join(MODES)}")
    config = {
        "dataset": dataset_section(data, image_size),
        "models": list(models),
        "batch_sizes": (
            "auto" if batch_sizes == "auto" else int_list(batch_sizes, "--batch-sizes", 1)
        ),
    }
    if mode is not None:
        config["modes"] = MODES[mode]
    if workers is not None:
        config["num_workers"] = int_list(workers, "--workers", 0)
    try:
        config_module.check(config, config_module.load_schema(config_module.SCHEMA_PATH))
    except config_module.ConfigError as exc:
        raise SweepArgumentError(str(exc)) from None
    return config


def config_text(config: Mapping[str, Any], command: str) -> str:
    """The config as YAML, headed by the command that wrote it."""
    head = f"# written by: {command}\n# keys left out take their defaults (config/README.md)\n"
    return head + yaml.safe_dump(dict(config), sort_keys=False)


#: The default profile's on/off settings, by the keyword the API's settings take them as.
PROFILE_FLAGS = {
    "rerun-incomplete": "rerun_incomplete",
    "keep-going": "keep_going",
    "printshellcmds": "printshellcmds",
    "show-failed-logs": "show_failed_logs",
    "force-use-threads": "use_threads",
}


def profile_settings(path: Path = PROFILE) -> dict[str, Any]:
    """The default profile's settings, as the API's keyword values; a key this function does
    not know is an error, so that the API's run never silently differs from the command's."""
    profile = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    unknown = sorted(set(profile) - {"resources", *PROFILE_FLAGS})
    if unknown:
        raise SweepArgumentError(f"{path}: setting {unknown[0]!r} is not passed to the API")
    resources = {}
    for item in profile.get("resources", []):
        name, _, value = item.partition("=")
        resources[name] = int(value)
    flags = {keyword: bool(profile.get(key)) for key, keyword in PROFILE_FLAGS.items()}
    return {"resources": resources, **flags}


def run(configfile: Path, directory: Path, cores: int, *, dry_run: bool = False) -> bool:
    """Run (or, with ``dry_run``, plan) the workflow on ``configfile`` in ``directory``
    through Snakemake's API; True when it succeeded."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
    )

    profile = profile_settings()
    output = OutputSettings(
        dryrun=dry_run,
        stdout=dry_run,
        printshellcmds=profile["printshellcmds"],
        show_failed_logs=profile["show_failed_logs"],
    )
    with SnakemakeApi(output) as api:
        try:
            workflow = api.workflow(
                resource_settings=ResourceSettings(cores=cores, resources=profile["resources"]),
                config_settings=ConfigSettings(configfiles=[Path(configfile).absolute()]),
                snakefile=SNAKEFILE,
                workdir=Path(directory).absolute(),
            )
            dag = workflow.dag(DAGSettings(force_incomplete=profile["rerun_incomplete"]))
            dag.execute_workflow(
                executor="local",
                pseudo_executor="dryrun" if dry_run else None,
                execution_settings=ExecutionSettings(
                    keep_going=profile["keep_going"],
                    use_threads=profile["use_threads"],
                    standalone=True,
                ),
            )
        except Exception as exc:  # noqa: BLE001 - Snakemake's own report, as its command's
            api.print_exception(exc)
            return False
    return True
