# Stage 3: one benchmark job per mode x model x batch size x accumulation x workers x seed.


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
    threads: all_cores
    resources:
        bench_slot=1,
    params:
        options=bench_options,
    shell:
        "PYTHONHASHSEED={wildcards.seed} python -m batchscope.bench"
        " --mode {wildcards.mode} --model {wildcards.model}"
        " --batch-size {wildcards.batch_size} --num-workers {wildcards.num_workers}"
        " --accumulation-steps {wildcards.accumulation_steps}"
        " --seed {wildcards.seed} --threads {threads} {params.options}"
        " --output {output.result:q} --steps {output.steps:q} > {log:q} 2>&1"


# The compute-only ceiling of each mode x model x batch size: synthetic tensors, no workers.
rule ceiling:
    output:
        result=f"{CEILING}.json",
        steps=f"{CEILING}.steps.csv",
    log:
        f"logs/ceiling/{CEILING.removeprefix('results/ceiling/')}.log",
    benchmark:
        f"benchmarks/ceiling/{CEILING.removeprefix('results/ceiling/')}.tsv"
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
    params:
        options=ceiling_options,
    shell:
        "python -m batchscope.bench --mode {wildcards.mode} --model {wildcards.model}"
        " --batch-size {wildcards.batch_size} --threads {threads} {params.options}"
        " --output {output.result:q} --steps {output.steps:q} > {log:q} 2>&1"


# `batch_sizes: auto`: the largest batch that fits, per mode and model, found by trials that each
# run in a fresh process; its grid (powers of two up to the limit, plus the limit) is the sweep's.
checkpoint max_batch:
    input:
        data=ancient(dataset_dir()),
    output:
        search=MAXBATCH,
        trials=directory("results/maxbatch/{mode}/{model}.trials"),
    log:
        "logs/maxbatch/{mode}/{model}.log",
    benchmark:
        "benchmarks/maxbatch/{mode}/{model}.tsv"
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
    params:
        options=maxbatch_options,
    shell:
        "python -m batchscope.bench.maxbatch --mode {wildcards.mode} --model {wildcards.model}"
        " --seed 0 --threads {threads} {params.options} --trials-dir {output.trials:q}"
        " --output {output.search:q} > {log:q} 2>&1"
