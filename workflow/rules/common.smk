# Config checking and the helpers the rules use. Nothing here imports torch.
import hashlib
import importlib.util
import json
import shlex

from snakemake.settings.types import DeploymentMethod

from batchscope.core import (
    datasets,
    grid,
    paths,
    prediction,
    results,
    rounds,
    spec,
    verdict,
)
from batchscope.core.config import (
    ConfigError,
    check,
    load_schema,
    resolve_paths,
    with_defaults,
)


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

# Relative paths in the config (the data's here, the model entries' in models.smk): the config
# file's folder first, then the working directory (--directory).
CONFIG_DIRS = [
    os.path.dirname(os.path.abspath(path))
    for path in (
        workflow.overwrite_configfiles
        or [os.path.join(workflow.basedir, "config", "config.yaml")]
    )
] + [os.getcwd()]
config.update(resolve_paths(config, CONFIG_DIRS))

# One line naming the key, before any job starts; then Snakemake's own validate fills defaults.
try:
    check(config, load_schema(SCHEMA))
except ConfigError as error:
    sys.exit(f"batchscope: {error}")
validate(config, SCHEMA)
# validate does not fill defaults behind a `$ref` (the modes' max_steps): the same filling again,
# following them, so the config every spec is built from has every key.
config.update(with_defaults(config, load_schema(SCHEMA)))

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


wildcard_constraints:
    mode="train|infer",
    model="[A-Za-z0-9_]+",
    batch_size=r"[1-9]\d*",
    accumulation_steps=r"[1-9]\d*",
    num_workers=r"\d+",
    devices_tag=paths.DEVICES_TAG,
    seed=r"\d+",
    round=r"[1-9]\d*",
    sequence_length=r"[1-9]\d*",
    dataset="fashion_mnist|cifar10|imagefolder",


# Benchmark jobs must not share a machine's cores with each other: each takes one `bench_slot`,
# and the default profile allows one at a time. The scope is local, so on a cluster every job
# gets its own node's slot and they run in parallel.
resource_scopes:
    bench_slot="local",


DATASET = config["dataset"]["name"]
# token data sweeps sequence_lengths too, and only its paths carry it (docs/results.md)
TOKENS = datasets.is_tokens(DATASET)
RUN = paths.run_pattern(TOKENS)
CEILING = paths.CEILING
PLOTS = [
    "throughput",
    "peak_memory",
    "data_wait",
    "breakdown",
    "loss_curves",
    "val_accuracy",
] + (["memory_tokens"] if TOKENS else [])


AUTO = config["batch_sizes"] == "auto"
MAXBATCH = paths.MAXBATCH


def batch_sizes(mode, model):
    """The configured batch sizes, or, with `batch_sizes: auto`, the grid the largest-batch
    search chose for this mode and model (powers of two up to the limit, plus the limit).
    """
    if not AUTO:
        return config["batch_sizes"]
    with open(checkpoints.max_batch.get(mode=mode, model=model).output[0]) as handle:
        return json.load(handle)["grid"]


def accumulation_steps(mode):
    """Gradient accumulation is a training axis; inference runs take one batch at a time."""
    return config["train"]["accumulation_steps"] if mode == "train" else [1]


def sequence_lengths():
    """The sequence lengths of token data; images have none (one None, not an axis)."""
    return config["sequence_lengths"] if TOKENS else [None]


def grid_points():
    """Every point of the grid: mode x model x sequence length x batch size x accumulation x
    workers x devices (grid.POINT_KEYS)."""
    return [
        grid.GridPoint(
            mode=mode,
            model=model,
            sequence_length=s,
            batch_size=int(b),
            accumulation_steps=int(a),
            num_workers=int(w),
            devices=int(d),
        )
        for mode in config["modes"]
        for model in MODEL_NAMES
        for s in sequence_lengths()
        for b in batch_sizes(mode, model)
        for a in accumulation_steps(mode)
        for w in config["num_workers"]
        for d in config["devices"]
    ]


DESIGN = verdict.Design.from_config(config)
# the most rounds a point can be measured in: measure.rounds, and with the race up to max_rounds
ROUNDS = DESIGN.last_round
ROUND = paths.ROUND


def points_in_round(round_):
    """The points measured in a round: all in the first; then those the previous round's
    decision kept (the race), read once that checkpoint has run; none once a round had none.
    """
    if round_ == 1:
        return grid_points()
    if not points_in_round(round_ - 1):
        return []
    if PARTIAL and not os.path.exists(ROUND.format(round=round_ - 1)):
        return []  # a partial report does not wait for rounds that could not run
    with open(checkpoints.round_done.get(round=round_ - 1).output[0]) as handle:
        return [grid.GridPoint(*point) for point in json.load(handle)["next_round"]]


def run_stem(point, seed, round_):
    return paths.run_stem({**grid.as_dict(point), "seed": seed, "round": round_})


def grid_stems():
    """One path stem per run: each point x seed, in every round it is measured in."""
    return [
        run_stem(point, seed, round_)
        for round_ in range(1, ROUNDS + 1)
        for point in points_in_round(round_)
        for seed in config["seeds"]
    ]


def wildcard_point(wildcards):
    return grid.GridPoint(
        mode=wildcards.mode,
        model=wildcards.model,
        sequence_length=int(wildcards.sequence_length) if TOKENS else None,
        batch_size=int(wildcards.batch_size),
        accumulation_steps=int(wildcards.accumulation_steps),
        num_workers=int(wildcards.num_workers),
        devices=paths.devices_of(wildcards.devices_tag),
    )


def bench_priority(wildcards):
    """Earlier rounds first; within a round, the jobs in an order shuffled with
    sweep.order_seed, anew each round (batchscope.core.rounds)."""
    jobs = [(point, seed) for point in grid_points() for seed in config["seeds"]]
    job = (wildcard_point(wildcards), int(wildcards.seed))
    return rounds.priority(
        job, jobs, config["sweep"]["order_seed"], int(wildcards.round), ROUNDS
    )


def round_barrier(wildcards):
    """A run of round r > 1 starts only after round r - 1 of every point still measured."""
    round_ = int(wildcards.round)
    return [] if round_ == 1 else [ancient(ROUND.format(round=round_ - 1))]


def round_inputs(wildcards):
    """What the decision after a round reads: every run so far (the race compares a group's
    points on all of them, eliminated points' included)."""
    round_ = int(wildcards.round)
    return [
        f"{run_stem(point, seed, r)}.json"
        for r in range(1, round_ + 1)
        for point in points_in_round(r)
        for seed in config["seeds"]
    ]


def previous_round(wildcards):
    round_ = int(wildcards.round)
    return [] if round_ == 1 else [ROUND.format(round=round_ - 1)]


def round_files(wildcards=None):
    """The decisions after the rounds up to the race's first look (what eliminated each point,
    and when): every point goes on until then (a point whose runs all failed to measure is its
    own result), so they are known before any run."""
    files = [
        ROUND.format(round=r) for r in range(1, min(ROUNDS, DESIGN.first_look + 1))
    ]
    return [f for f in files if not PARTIAL or os.path.exists(f)]


def later_round_files(wildcards=None):
    """The decisions after the later rounds that measured points, but the last possible one:
    known once the decisions before them are (a separate input, so that round_files are known
    before the sweep starts)."""
    later = range(DESIGN.first_look + 1, ROUNDS)
    files = [ROUND.format(round=r) for r in later if points_in_round(r)]
    return [f for f in files if not PARTIAL or os.path.exists(f)]


# The race's settings as the rounds and answer commands take them (batchscope.core.verdict.Design)
DESIGN_OPTIONS = (
    f"--strategy {DESIGN.strategy} --level {DESIGN.level} --margin {DESIGN.margin}"
    f" --rounds {DESIGN.first_look} --max-rounds {DESIGN.max_rounds}"
)


def race_options(wildcards):
    """DESIGN_OPTIONS and the race's budget (sweep.budget_s), for the decision after a round."""
    budget = config["sweep"]["budget_s"]
    return DESIGN_OPTIONS + ("" if budget is None else f" --budget-s {budget}")


def ceiling_wanted():
    # token data is made or tokenized in memory: no input pipeline to compare with
    return config["measure"]["ceiling"] and DATASET != "synthetic" and not TOKENS


def ceiling_results(wildcards=None):
    """One compute-only run per mode x model x batch size: the same model on synthetic tensors
    of the same shape, no workers, the first seed. Its throughput is the ceiling the input
    pipeline keeps the real-data runs below."""
    if not ceiling_wanted():
        return []
    return [
        f"{stem}.json"
        for mode in config["modes"]
        for model in MODEL_NAMES
        for stem in expand(
            CEILING, mode=mode, model=model, batch_size=batch_sizes(mode, model)
        )
    ]


def grid_results(wildcards=None):
    return [f"{stem}.json" for stem in grid_stems()]


def grid_steps(wildcards=None):
    return [f"{stem}.steps.csv" for stem in grid_stems()]


PARTIAL = config["partial"]


def finished_only(paths):
    """With `partial`, only the files that exist: a report of what finished."""
    return [path for path in paths if os.path.exists(path)] if PARTIAL else paths


def aggregate_results(wildcards):
    return finished_only(grid_results())


def aggregate_steps(wildcards):
    return finished_only(grid_steps())


def maxbatch_results(wildcards=None):
    if not AUTO:
        return []
    return expand(MAXBATCH, mode=config["modes"], model=MODEL_NAMES)


def plot_files():
    """The figures; with more than one `devices` value, the scaling with devices too."""
    scaling = ["scaling"] if len(config["devices"]) > 1 else []
    return [f"results/plots/{name}.png" for name in [*PLOTS, *scaling]]


CONVERGENCE = [
    f"results/convergence/{name}"
    for name in (
        "convergence_steps.png",
        "convergence_loss_samples.png",
        "convergence_loss_time.png",
        "convergence_noise_scale.png",
        "convergence.md",
        "convergence.html",
        "convergence.json",
    )
]


def convergence_outputs():
    """The convergence report, for sweeps that train towards a target (and the prediction,
    with train.predict)."""
    train = config["train"]
    has_target = (
        train.get("target_accuracy") is not None or train.get("target_loss") is not None
    )
    if "train" not in config["modes"] or not has_target:
        return []
    return CONVERGENCE + (PREDICTION if PREDICT else [])


#: train.predict: short runs at every batch size but the calibration ones (core.prediction)
PREDICT = "train" in config["modes"] and bool(config["train"].get("predict"))
PREDICTION = [
    "results/convergence/prediction.csv",
    "results/convergence/convergence_prediction.png",
]


def short_run(wildcards):
    """Whether a training run is one of train.predict's short runs: every effective batch size
    but the calibration ones (train.predict_calibration) of its mode and model."""
    if not PREDICT or wildcards.mode != "train":
        return False
    effective = {
        int(b) * int(a)
        for b in batch_sizes(wildcards.mode, wildcards.model)
        for a in accumulation_steps(wildcards.mode)
    }
    here = int(wildcards.batch_size) * int(wildcards.accumulation_steps)
    strategy = config["train"]["predict_calibration"]
    return here not in prediction.calibration_sizes(sorted(effective), strategy)


def all_cores(wildcards):
    """Benchmarks run alone, so they get every core Snakemake was given (as torch threads).
    A function, so that commands that run no job (--unlock, --report) need no --cores.
    """
    return workflow.cores


# --- runs on several devices (`devices`; rule bench_ddp) ---
# One node holds `slurm.gpus_per_node` devices: a run of N <= that is one torchrun on one node
# (one SLURM task per device, N GPUs unless the device is the CPU); a larger run takes
# N / gpus_per_node whole nodes, one torchrun (one task) per node, joined by a c10d rendezvous
# on the first node. The rule's `mpi` resource makes the SLURM executor run the job's command
# as it is, without wrapping it in `srun -n1`.
GPUS_PER_NODE = config["slurm"]["gpus_per_node"]
DDP_PORT = 29500  # the c10d rendezvous port on a multi-node run's first node


def ddp_devices(wildcards):
    return paths.devices_of(wildcards.devices_tag)


def ddp_nodes(wildcards):
    return max(1, -(-ddp_devices(wildcards) // GPUS_PER_NODE))


def ddp_tasks(wildcards):
    """One task per device on one node; one per node (its torchrun) across nodes."""
    nodes = ddp_nodes(wildcards)
    return ddp_devices(wildcards) if nodes == 1 else nodes


def ddp_gpus(wildcards):
    """The GPUs of a one-node job (none for CPU runs); across nodes see ddp_gres."""
    cpu = config["device"] == "cpu"
    return 0 if cpu or ddp_nodes(wildcards) > 1 else ddp_devices(wildcards)


def ddp_gres(wildcards):
    """Across nodes, every node's GPUs (a gres is per node); nothing otherwise."""
    cpu = config["device"] == "cpu"
    return "" if cpu or ddp_nodes(wildcards) == 1 else f"gpu:{GPUS_PER_NODE}"


def ddp_tasks_per_gpu(wildcards):
    """One task per GPU on one node; across nodes a task (a torchrun) drives a node's GPUs,
    and 0 leaves SLURM's --ntasks-per-gpu out."""
    return 1 if ddp_nodes(wildcards) == 1 else 0


def ddp_cpus_per_task(wildcards, threads):
    """Each rank's share of the job's threads plus its DataLoader workers, per task (per
    node's torchrun across nodes)."""
    devices = ddp_devices(wildcards)
    per_rank = max(1, threads // min(devices, GPUS_PER_NODE)) + int(
        wildcards.num_workers
    )
    return per_rank if ddp_nodes(wildcards) == 1 else per_rank * GPUS_PER_NODE


def ddp_launcher(wildcards):
    """torchrun: standalone on one node; across nodes, started once per node by srun."""
    devices, nodes = ddp_devices(wildcards), ddp_nodes(wildcards)
    torchrun = "python -m torch.distributed.run"
    if nodes == 1:
        return f"{torchrun} --standalone --nproc-per-node {devices}"
    need = f"batchscope: a run on {devices} devices spans {nodes} nodes: run it through SLURM"
    head = '$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
    return (
        f"srun --ntasks-per-node=1 --nodes={nodes} --kill-on-bad-exit=1 {torchrun}"
        f" --nnodes {nodes} --nproc-per-node {GPUS_PER_NODE}"
        f' --rdzv-id "${{SLURM_JOB_ID:?{need}}}" --rdzv-backend c10d'
        f" --rdzv-endpoint {head}:{DDP_PORT}"
    )


def plot_dir(wildcards, output):
    return os.path.dirname(output[0])


def dataset_dir():
    """The prepared dataset folder, or nothing for synthetic data (made in each job) and the
    user's own Datasets (built by each job from their factory) and token data."""
    if DATASET in ("synthetic", "python") or TOKENS:
        return []
    return paths.DATASET_DIR.format(dataset=DATASET)


def download_options(wildcards):
    cfg = config["dataset"]
    args = []
    for mirror in cfg.get("mirrors", []):
        args += ["--mirror", mirror]
    if cfg.get("path"):
        args += ["--path", os.path.abspath(cfg["path"])]
    return shlex.join(args)


# --- run specs: each job reads its settings whole from one JSON file (batchscope.core.spec) ---
# The spec's text is the rule's `params`, so a changed setting reruns the spec rule and with it
# the jobs that read it; a setting no job uses changes nothing.


def write_spec(path, log, text):
    """Write a job's spec, and its hash to the rule's log."""
    results.write_text(path, text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    results.write_text(log, f"batchscope: wrote {path} (sha256 {digest})\n")


def bench_spec_text(wildcards):
    """The spec of one grid point's benchmark job."""
    return spec.build(
        config,
        mode=wildcards.mode,
        model=wildcards.model,
        batch_size=wildcards.batch_size,
        accumulation_steps=wildcards.accumulation_steps,
        num_workers=wildcards.num_workers,
        seed=wildcards.seed,
        round=wildcards.round,
        short=short_run(wildcards),
        devices=paths.devices_of(wildcards.devices_tag),
        sequence_length=wildcards.sequence_length if TOKENS else None,
    ).to_json()


def ceiling_spec_text(wildcards):
    """The spec of a compute-only ceiling run: no workers, the first seed."""
    return spec.build(
        config,
        kind="ceiling",
        mode=wildcards.mode,
        model=wildcards.model,
        batch_size=wildcards.batch_size,
        num_workers=0,
        seed=config["seeds"][0],
    ).to_json()


def search_spec_text(wildcards):
    """The spec of a largest-batch search: the trial's workload and the search's settings."""
    return spec.build_search(
        config, mode=wildcards.mode, model=wildcards.model
    ).to_json()
