# Config checking and the helpers the rules use. Nothing here imports torch.
import hashlib
import importlib.util
import json
import shlex

from snakemake.settings.types import DeploymentMethod

from batchscope.core import (
    datasets,
    grid,
    model_entries,
    outputs,
    paths,
    prediction,
    results,
    rounds,
    spec,
    verdict,
    workflow_config,
)
from batchscope.core.config import ConfigError


def job_path_prefix(interpreter):
    """`export PATH=...;` putting the folder of ``interpreter`` first, so that a job's `python`
    is this one; exits with one line when that `python` is another or cannot import torch.
    """
    folder = os.path.dirname(interpreter)
    python = os.path.join(folder, "python")
    if not os.path.exists(python) or os.path.realpath(python) != os.path.realpath(
        interpreter
    ):
        sys.exit(
            f"batchscope: jobs run `python`, and {folder} has no `python` that is {interpreter}:"
            " run snakemake from a virtual environment (make run), or add --use-conda"
        )
    if importlib.util.find_spec("torch") is None:
        sys.exit(
            f"batchscope: {interpreter} cannot import torch, which the benchmark jobs need:"
            " run the snakemake of the project's venv (make run), or add --use-conda"
        )
    return f"export PATH={shlex.quote(folder)}:$PATH; "


SCHEMA = os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")

# Relative paths in the config (the data's, the model entries', a loss or dataset file): the
# config file's folder first, then the working directory (--directory).
CONFIG_DIRS = [
    os.path.dirname(os.path.abspath(path))
    for path in (
        workflow.overwrite_configfiles
        or [os.path.join(workflow.basedir, "config", "config.yaml")]
    )
] + [os.getcwd()]

# The config in one place (batchscope.core.workflow_config), before any job starts: --config
# values read as YAML (Snakemake leaves `[16,64]` as ["16", "64"]), paths found, one line naming
# the key (an image folder's listing is kept in resources/ while the folder is unchanged: every
# job parses this file, and must not list a million images again); Snakemake's own validate;
# then every default filled and every model entry, loss file and dataset factory resolved to
# absolute, hashed paths. No rule file edits the config after this.
try:
    _checked = workflow_config.checked(
        config,
        workflow.config_settings.config,
        CONFIG_DIRS,
        schema_path=SCHEMA,
        folder_listings=paths.FOLDER_LISTINGS,
    )
    validate(_checked, SCHEMA)
    _completed = workflow_config.completed(_checked, CONFIG_DIRS, schema_path=SCHEMA)
except (ConfigError, model_entries.ModelEntryError) as error:
    sys.exit(f"batchscope: {error}")
config.clear()
config.update(_completed)
MODEL_NAMES = workflow_config.model_names(config)

# Jobs run `python -m batchscope.<stage>` from this checkout: with --use-conda the rule's env's
# python; otherwise the interpreter this workflow runs in, whatever PATH says (a venv's
# snakemake started without activating the venv still runs its jobs in the venv).
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
JOB_PATH = "" if USE_CONDA else job_path_prefix(sys.executable)

# (Braces are doubled twice: once for this f-string, once for Snakemake.)
shell.prefix(
    "set -euo pipefail; "
    f"export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
    + JOB_PATH
)


# The run keys' from the grid's declaration (batchscope.core.grid.WILDCARDS).
wildcard_constraints:
    **grid.WILDCARDS,
    devices_tag=paths.DEVICES_TAG,
    dataset="fashion_mnist|cifar10|imagefolder",


# Benchmark jobs must not share a machine's cores with each other: each takes one `bench_slot`,
# and the default profile allows one at a time. The scope is local, so on a cluster every job
# gets its own node's slot and they run in parallel.
resource_scopes:
    bench_slot="local",


# The rest of the helpers, by job: the grid and its rounds and outputs; the resources of runs on
# several devices (SLURM, torchrun); what each job is given (its spec, folders, options).
include: "grid.smk"
include: "cluster.smk"
include: "specs.smk"
