# The grid: its points, the rounds they are measured in, the race's decisions, and the files
# each stage reads and writes (included by common.smk).


DATASET = config["dataset"]["name"]
# token data sweeps sequence_lengths too, and only its paths carry it (docs/results.md)
TOKENS = datasets.is_tokens(DATASET)
RUN = paths.run_pattern(TOKENS)
CEILING = paths.CEILING


AUTO = config["batch_sizes"] == "auto"
MAXBATCH = paths.MAXBATCH


def set_up(result, data=True):
    """What a measuring job waits for: every model checked (models.smk: models_checked) and,
    with `data`, the dataset; for the job whose output is `result` (a pattern).

    Ancient, so that a check or a fetch run again reruns only the jobs whose own spec changed.
    Snakemake still reruns a job whose input another job of the same run remade, ancient or
    not: a model added to a finished sweep, or the dataset's cache fetched again, would redo
    every finished measurement. A job whose result is there therefore reaches both through
    their checkpoints: it waits while they run, then is looked at again and found up to date.
    A job still to run lists them plainly, so that a dry run shows it.
    """

    def inputs(wildcards):
        dataset = dataset_dir() if data else []
        if os.path.exists(result.format(**dict(wildcards.items()))):
            checkpoints.models_checked.get()
            if dataset:
                checkpoints.download_dataset.get(dataset=DATASET)
        return {"models": ancient(paths.MODELS_CHECKED), "data": ancient(dataset)}

    return inputs


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
    """One path stem per run: each point x seed, in every round it is measured in; and
    train.predict's short runs in the rounds past the sweep's own (``short_rounds``)."""
    return [
        run_stem(point, seed, round_)
        for round_ in range(1, ROUNDS + 1)
        for point in points_in_round(round_)
        for seed in config["seeds"]
    ] + [
        run_stem(point, seed, round_)
        for point in grid_points()
        for round_ in short_rounds(point)
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
        job, jobs, config["sweep"]["order_seed"], int(wildcards.round), LAST_ROUND
    )


def round_barrier(wildcards):
    """A run of round r > 1 starts only after round r - 1 of every point still measured; a
    short run's further rounds (past the sweep's last) wait for no decision: their priority
    puts them after every earlier round."""
    round_ = int(wildcards.round)
    return (
        []
        if round_ == 1 or round_ > ROUNDS
        else [ancient(ROUND.format(round=round_ - 1))]
    )


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
    scaling = [outputs.SCALING.path] if len(config["devices"]) > 1 else []
    return [figure.path for figure in outputs.plots(TOKENS)] + scaling


CONVERGENCE = [figure.path for figure in outputs.CONVERGENCE_FIGURES] + [
    outputs.CONVERGENCE_MARKDOWN,
    outputs.CONVERGENCE_HTML,
    outputs.CONVERGENCE_FINDINGS,
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


#: train.predict: short runs at every batch size, and full-length runs at the calibration ones
#: (core.prediction)
PREDICT = "train" in config["modes"] and bool(config["train"].get("predict"))
PREDICTION = [
    "results/convergence/prediction.csv",
    "results/convergence/convergence_prediction.png",
]


#: the rounds train.predict's short runs are measured in: train.predict_rounds when more than
#: the sweep's own (the config check allows that only under sweep.strategy full)
SHORT_ROUNDS = max(ROUNDS, config["train"]["predict_rounds"]) if PREDICT else ROUNDS
#: the calibration sizes run full length in the sweep's rounds, then short in the rounds after,
#: at least one: every batch size's time per update comes from short runs alike
LAST_ROUND = max(SHORT_ROUNDS, ROUNDS + 1) if PREDICT else ROUNDS


def predicted(point):
    """Whether train.predict covers a point: its training points."""
    return PREDICT and point.mode == "train"


def is_calibration(point):
    """Whether a training point is at one of train.predict's calibration sizes
    (train.predict_calibration) of its mode and model, which also run to the target."""
    if not predicted(point):
        return False
    effective = {
        int(b) * int(a)
        for b in batch_sizes(point.mode, point.model)
        for a in accumulation_steps(point.mode)
    }
    here = int(point.batch_size) * int(point.accumulation_steps)
    strategy = config["train"]["predict_calibration"]
    return here in prediction.calibration_sizes(sorted(effective), strategy)


def is_short(point, round_):
    """Whether a training point's run in round ``round_`` is one of train.predict's short runs:
    every batch size's in every round but the calibration sizes' in the sweep's own."""
    return predicted(point) and (round_ > ROUNDS or not is_calibration(point))


def short_rounds(point):
    """The rounds past the sweep's own in which a point runs short (none without
    train.predict): up to SHORT_ROUNDS, the calibration sizes' up to LAST_ROUND."""
    if not predicted(point):
        return range(0)
    return range(
        ROUNDS + 1, (LAST_ROUND if is_calibration(point) else SHORT_ROUNDS) + 1
    )


def short_run(wildcards):
    """Whether a job is one of train.predict's short runs."""
    return is_short(wildcard_point(wildcards), int(wildcards.round))


def all_cores(wildcards):
    """Benchmarks run alone, so they get every core Snakemake was given (as torch threads).
    A function, so that commands that run no job (--unlock, --report) need no --cores.
    """
    return workflow.cores
