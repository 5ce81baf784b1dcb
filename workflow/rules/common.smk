# Config checking and the helpers the rules use. Nothing here imports torch.
import json
import shlex

from batchscope.core.config import ConfigError, check, load_schema

SCHEMA = os.path.join(workflow.basedir, "workflow", "schemas", "config.schema.yaml")

# One line naming the key, before any job starts; then Snakemake's own validate fills defaults.
try:
    check(config, load_schema(SCHEMA))
except ConfigError as error:
    sys.exit(f"batchscope: {error}")
validate(config, SCHEMA)

# Jobs run `python -m batchscope.<stage>` from this checkout, in the project's venv or a rule's
# conda env alike. (Braces are doubled twice: once for this f-string, once for Snakemake.)
shell.prefix(
    "set -euo pipefail; "
    f"export PYTHONPATH={shlex.quote(workflow.basedir)}${{{{PYTHONPATH:+:$PYTHONPATH}}}}; "
)


wildcard_constraints:
    mode="train|infer",
    model="[A-Za-z0-9_]+",
    batch_size=r"[1-9]\d*",
    accumulation_steps=r"[1-9]\d*",
    num_workers=r"\d+",
    seed=r"\d+",
    dataset="fashion_mnist|cifar10|imagefolder",


# Benchmark jobs must not share a machine's cores with each other: each takes one `bench_slot`,
# and the default profile allows one at a time. The scope is local, so on a cluster every job
# gets its own node's slot and they run in parallel.
resource_scopes:
    bench_slot="local",


DATASET = config["dataset"]["name"]
RUN = "results/runs/{mode}/{model}/bs{batch_size}_acc{accumulation_steps}_nw{num_workers}_seed{seed}"
PLOTS = [
    "throughput",
    "peak_memory",
    "data_wait",
    "breakdown",
    "loss_curves",
    "val_accuracy",
]


AUTO = config["batch_sizes"] == "auto"
MAXBATCH = "results/maxbatch/{mode}/{model}.json"


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


def grid_stems():
    """One path stem per grid point: mode x model x batch size x accumulation x workers x seed."""
    return [
        stem
        for mode in config["modes"]
        for model in config["models"]
        for stem in expand(
            RUN,
            mode=mode,
            model=model,
            batch_size=batch_sizes(mode, model),
            accumulation_steps=accumulation_steps(mode),
            num_workers=config["num_workers"],
            seed=config["seeds"],
        )
    ]


CEILING = "results/ceiling/{mode}/{model}/bs{batch_size}"
# Shape of each dataset's images and its classes: the synthetic twin a ceiling run computes on.
DATASET_SHAPES = {
    "fashion_mnist": {"channels": 1, "image_size": 28, "num_classes": 10},
    "cifar10": {"channels": 3, "image_size": 32, "num_classes": 10},
    "imagefolder": {"channels": 3, "image_size": 64, "num_classes": 10},
}


def ceiling_wanted():
    return config["measure"]["ceiling"] and DATASET != "synthetic"


def ceiling_results(wildcards=None):
    """One compute-only run per mode x model x batch size: the same model on synthetic tensors
    of the same shape, no workers, the first seed. Its throughput is the ceiling the input
    pipeline keeps the real-data runs below."""
    if not ceiling_wanted():
        return []
    return [
        f"{stem}.json"
        for mode in config["modes"]
        for model in config["models"]
        for stem in expand(
            CEILING, mode=mode, model=model, batch_size=batch_sizes(mode, model)
        )
    ]


def ceiling_options(wildcards):
    shape = dict(DATASET_SHAPES[DATASET])
    if config["dataset"].get("image_size"):
        shape["image_size"] = config["dataset"]["image_size"]
    samples = SPLIT_SAMPLES.get(DATASET, {}).get(wildcards.mode, 10000)
    synthetic = {**shape, "num_samples": samples}
    measure = config["measure"]
    args = [
        "--dataset", "synthetic",
        "--dataset-options", json.dumps({"synthetic": synthetic}, sort_keys=True),
        "--device", config["device"],
        "--precision", config["compute"]["precision"],
        "--channels-last" if config["compute"]["channels_last"] else "--no-channels-last",
        "--compile" if config["compute"]["compile"] else "--no-compile",
        "--deterministic" if config["deterministic"] else "--no-deterministic",
        "--num-workers", 0,
        "--seed", config["seeds"][0],
        "--no-validate",
        "--warmup-steps", measure["warmup_steps"],
        "--repeats", measure["repeats"],
        "--min-steps", measure["min_steps"],
        "--min-seconds", measure["min_seconds"],
    ]  # fmt: skip
    if config[wildcards.mode].get("max_steps") is not None:
        args += ["--max-steps", config[wildcards.mode]["max_steps"]]
    if wildcards.mode == "train":
        train = config["train"]
        args += ["--epochs", train["epochs"], "--optimizer", train["optimizer"]]
        args += ["--lr", train["lr"], "--momentum", train["momentum"]]
        args += ["--weight-decay", train["weight_decay"]]
    return shlex.join(str(a) for a in args)


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
    return expand(MAXBATCH, mode=config["modes"], model=config["models"])


def plot_files():
    return [f"results/plots/{name}.png" for name in PLOTS]


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
    """The convergence report, for sweeps that train towards a target."""
    train = config["train"]
    has_target = (
        train.get("target_accuracy") is not None or train.get("target_loss") is not None
    )
    return CONVERGENCE if "train" in config["modes"] and has_target else []


def all_cores(wildcards):
    """Benchmarks run alone, so they get every core Snakemake was given (as torch threads).
    A function, so that commands that run no job (--unlock, --report) need no --cores.
    """
    return workflow.cores


def plot_dir(wildcards, output):
    return os.path.dirname(output[0])


def dataset_dir():
    """The prepared dataset folder, or nothing for synthetic data (made in each job)."""
    return [] if DATASET == "synthetic" else f"resources/datasets/{DATASET}"


def download_options(wildcards):
    cfg = config["dataset"]
    args = []
    for mirror in cfg.get("mirrors", []):
        args += ["--mirror", mirror]
    if cfg.get("path"):
        args += ["--path", os.path.abspath(cfg["path"])]
    return shlex.join(args)


def dataset_options():
    """Image size and synthetic sizes, as the JSON the benchmark job reads."""
    cfg = config["dataset"]
    options = {"image_size": cfg.get("image_size")}
    if DATASET == "synthetic":
        options["synthetic"] = {
            "channels": cfg["channels"],
            "image_size": cfg.get("image_size") or 32,
            "num_classes": cfg["num_classes"],
            "num_samples": cfg["num_samples"],
        }
    return json.dumps(options, sort_keys=True)


def workload_options(mode):
    """What a job needs to build the same workload as the sweep: data, model settings, loader."""
    train, loader = config["train"], config["loader"]
    args = [
        "--dataset", DATASET,
        "--dataset-options", dataset_options(),
        "--device", config["device"],
        "--precision", config["compute"]["precision"],
        "--channels-last" if config["compute"]["channels_last"] else "--no-channels-last",
        "--compile" if config["compute"]["compile"] else "--no-compile",
        "--prefetch-factor", loader["prefetch_factor"],
        "--pin-memory" if loader["pin_memory"] else "--no-pin-memory",
        "--non-blocking" if loader["non_blocking"] else "--no-non-blocking",
        "--persistent-workers" if loader["persistent_workers"] else "--no-persistent-workers",
        "--deterministic" if config["deterministic"] else "--no-deterministic",
    ]  # fmt: skip
    if DATASET != "synthetic":
        args += ["--data-root", f"resources/datasets/{DATASET}"]
    if mode == "train":
        args += [
            "--optimizer", train["optimizer"],
            "--lr", train["lr"],
            "--momentum", train["momentum"],
            "--weight-decay", train["weight_decay"],
        ]  # fmt: skip
    return args


def bench_options(wildcards):
    """Everything a benchmark job takes from the config, as command-line options."""
    measure = config["measure"]
    args = workload_options(wildcards.mode) + [
        "--warmup-steps", measure["warmup_steps"],
        "--repeats", measure["repeats"],
        "--min-steps", measure["min_steps"],
        "--min-seconds", measure["min_seconds"],
    ]  # fmt: skip
    if config[wildcards.mode].get("max_steps") is not None:
        args += ["--max-steps", config[wildcards.mode]["max_steps"]]
    if wildcards.mode == "train":
        args += convergence_options()
    if measure["peak_tflops"] is not None:
        args += ["--peak-tflops", measure["peak_tflops"]]
    if config.get("cpu_memory_budget_mb") is not None:
        args += ["--cpu-memory-budget-mb", config["cpu_memory_budget_mb"]]
    return shlex.join(str(a) for a in args)


def convergence_options():
    """Training length, learning-rate rule, validation during training, noise scale."""
    train = config["train"]
    args = [
        "--epochs", train["epochs"],
        "--val-batch-size", train["val_batch_size"],
        "--lr-scaling", train["lr_scaling"],
        "--lr-warmup-steps", train["lr_warmup_steps"],
        "--lr-decay", train["lr_decay"],
    ]  # fmt: skip
    optional = {
        "--base-batch-size": train.get("base_batch_size"),
        "--eval-every-samples": train.get("eval_every_samples"),
        "--lr-warmup-epochs": train.get("lr_warmup_epochs"),
        "--target-accuracy": train.get("target_accuracy"),
        "--target-loss": train.get("target_loss"),
        "--noise-every-steps": train.get("noise_scale_every_steps"),
        "--eval-samples": train.get("eval_samples"),
    }
    for flag, value in optional.items():
        if value is not None:
            args += [flag, value]
    if train.get("stop_at_target"):
        args.append("--stop-at-target")
    return args


# Samples in the split each mode reads, where known before any job runs.
SPLIT_SAMPLES = {
    "fashion_mnist": {"train": 60000, "infer": 10000},
    "cifar10": {"train": 50000, "infer": 10000},
}


def maxbatch_cap(mode):
    """The search's cap: the configured one, and no batch so large that the sweep's own run of
    that size would have no step left to measure after its warm-up."""
    cap = config["maxbatch"]["cap"]
    if DATASET == "synthetic":
        samples = config["dataset"]["num_samples"]
    else:
        samples = SPLIT_SAMPLES.get(DATASET, {}).get(mode)
    if samples is not None:
        cap = min(cap, samples // (config["measure"]["warmup_steps"] + 1))
    return max(cap, 1)


def maxbatch_options(wildcards):
    """The largest-batch search: each trial is the sweep's workload, one small run apiece."""
    search = config["maxbatch"]
    args = workload_options(wildcards.mode) + [
        "--margin", search["margin"],
        "--cap", maxbatch_cap(wildcards.mode),
        "--start", search["start"],
        "--tolerance", search["tolerance"],
        "--num-workers", max(config["num_workers"]),
    ]  # fmt: skip
    if wildcards.mode == "train":  # the sweep validates after training: so must a trial
        args += ["--val-batch-size", config["train"]["val_batch_size"]]
    if search["capacity_mb"] is not None:
        args += ["--capacity-mb", search["capacity_mb"]]
    if config.get("cpu_memory_budget_mb") is not None:
        args += ["--cpu-memory-budget-mb", config["cpu_memory_budget_mb"]]
    return shlex.join(str(a) for a in args)
