# Stage 3: one benchmark job per mode x model x batch size x workers x seed.


rule bench:
    input:
        # ancient: re-verifying the dataset must not re-run finished benchmarks
        data=ancient(dataset_dir()),
    output:
        result=f"{RUN}.json",
        steps=f"{RUN}.steps.csv",
    log:
        f"logs/bench/{RUN.removeprefix('results/runs/')}.log",
    benchmark:
        f"benchmarks/bench/{RUN.removeprefix('results/runs/')}.tsv"
    conda:
        "../envs/torch.yaml"
    threads: workflow.cores
    resources:
        bench_slot=1,
    params:
        options=bench_options,
    shell:
        "PYTHONHASHSEED={wildcards.seed} python -m batchscope.bench"
        " --mode {wildcards.mode} --model {wildcards.model}"
        " --batch-size {wildcards.batch_size} --num-workers {wildcards.num_workers}"
        " --seed {wildcards.seed} --threads {threads} {params.options}"
        " --output {output.result:q} --steps {output.steps:q} > {log:q} 2>&1"
