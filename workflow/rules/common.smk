# Config checking and the helpers the rules use. Nothing here imports torch.
import json
import shlex

from batchscope.config import ConfigError, check, load_schema

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
    num_workers=r"\d+",
    seed=r"\d+",
    dataset="fashion_mnist|cifar10|imagefolder",


# Benchmark jobs must not share a machine's cores with each other: each takes one `bench_slot`,
# and the default profile allows one at a time. The scope is local, so on a cluster every job
# gets its own node's slot and they run in parallel.
resource_scopes:
    bench_slot="local",


DATASET = config["dataset"]["name"]
RUN = "results/runs/{mode}/{model}/bs{batch_size}_nw{num_workers}_seed{seed}"
PLOTS = ["throughput", "peak_memory", "data_wait", "loss_curves", "val_accuracy"]


def grid_stems():
    """One path stem per grid point: mode x model x batch size x workers x seed."""
    return expand(
        RUN,
        mode=config["modes"],
        model=config["models"],
        batch_size=config["batch_sizes"],
        num_workers=config["num_workers"],
        seed=config["seeds"],
    )


def grid_results():
    return [f"{stem}.json" for stem in grid_stems()]


def grid_steps():
    return [f"{stem}.steps.csv" for stem in grid_stems()]


def plot_files():
    return [f"results/plots/{name}.png" for name in PLOTS]


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


def bench_options(wildcards):
    """Everything a benchmark job takes from the config, as command-line options."""
    train, loader = config["train"], config["loader"]
    mode_cfg = config[wildcards.mode]
    args = [
        "--dataset", DATASET,
        "--dataset-options", dataset_options(),
        "--device", config["device"],
        "--warmup-steps", config["measure"]["warmup_steps"],
        "--repeats", config["measure"]["repeats"],
        "--min-steps", config["measure"]["min_steps"],
        "--min-seconds", config["measure"]["min_seconds"],
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
    if mode_cfg.get("max_steps") is not None:
        args += ["--max-steps", mode_cfg["max_steps"]]
    if wildcards.mode == "train":
        args += [
            "--epochs", train["epochs"],
            "--optimizer", train["optimizer"],
            "--lr", train["lr"],
            "--momentum", train["momentum"],
            "--weight-decay", train["weight_decay"],
            "--val-batch-size", train["val_batch_size"],
        ]  # fmt: skip
    if config["measure"]["peak_tflops"] is not None:
        args += ["--peak-tflops", config["measure"]["peak_tflops"]]
    if config.get("cpu_memory_budget_mb") is not None:
        args += ["--cpu-memory-budget-mb", config["cpu_memory_budget_mb"]]
    return shlex.join(str(a) for a in args)
