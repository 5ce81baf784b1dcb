# What each job is given: its folders, its options, and its spec, written whole as one JSON file
# (included by common.smk).


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
    if DATASET == "imagefolder":  # the listing the config check kept, read again
        args += ["--listings", paths.FOLDER_LISTINGS]
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
