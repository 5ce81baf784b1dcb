# Stage 2: the environment every number is measured in (versions, device, BLAS, threads, git).


rule capture_environment:
    output:
        "results/env/environment.json",
    log:
        "logs/capture_environment.log",
    benchmark:
        "benchmarks/capture_environment.tsv"
    conda:
        "../envs/torch.yaml"
    params:
        device=config["device"],
        workflow_dir=workflow.basedir,
        snakemake_version=snakemake.__version__,
        launch=config["sweep"]["launch"],
    shell:
        "python -m batchscope.bench.launch --launch {params.launch} batchscope.bench.capture"
        " --device {params.device} --workflow-dir {params.workflow_dir:q}"
        " --snakemake-version {params.snakemake_version} --output {output:q} > {log:q} 2>&1"
