# Stage 1: the dataset, fetched once into resources/ and verified (or an image folder indexed).


rule download_dataset:
    output:
        directory(paths.DATASET_DIR),
    log:
        "logs/download/{dataset}.log",
    benchmark:
        "benchmarks/download/{dataset}.tsv"
    conda:
        "../envs/torch.yaml"
    params:
        options=download_options,
    shell:
        "python -m batchscope.bench.download --dataset {wildcards.dataset} --root {output:q}"
        " {params.options} > {log:q} 2>&1"


# dataset: python: the factory's file is found now, in the config file's folder first, then the
# working directory (as a model factory's: CONFIG_DIRS), and made absolute, so that every spec
# built from the config hashes the same file (an edit to it reruns the jobs).
if DATASET == "python":
    try:
        config["dataset"]["factory"] = spec.python_dataset_spec(
            config["dataset"], CONFIG_DIRS
        ).factory
    except model_entries.ModelEntryError as error:
        sys.exit(f"batchscope: {error}")
