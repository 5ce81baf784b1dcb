# Stage 1: the dataset, fetched once into resources/ and verified (or an image folder indexed).
# A checkpoint, so that fetching it again reruns no finished measurement (grid.smk: set_up).


checkpoint download_dataset:
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
        launch=config["sweep"]["launch"],
    shell:
        "python -m batchscope.bench.launch --launch {params.launch} batchscope.bench.download"
        " --dataset {wildcards.dataset} --root {output:q} {params.options} > {log:q} 2>&1"
