# Stage 3: one benchmark job per mode x model x batch size x accumulation x workers x seed.
# Each job reads its whole run spec from one JSON file (batchscope.core.spec), written by a
# spec rule below whose params are the spec's text: change a setting and only the jobs whose
# spec it changes run again.


rule bench:
    input:
        # the dataset, and every model built and run once (grid.smk)
        unpack(set_up(f"{RUN}.json")),
        spec=paths.spec_of(RUN),
        # round r waits for the decision after round r - 1 (which points go on)
        barrier=round_barrier,
    output:
        result=f"{RUN}.json",
        steps=f"{RUN}.steps.csv",
    log:
        paths.log_of(RUN),
    benchmark:
        paths.log_of(RUN, "benchmarks")
    wildcard_constraints:
        devices_tag="(?:)",  # nothing: one device
    priority: bench_priority
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
    params:
        launch=config["sweep"]["launch"],
    shell:
        "PYTHONHASHSEED={wildcards.seed} python -m batchscope.bench.launch --launch {params.launch}"
        " --fork-group round{wildcards.round} batchscope.bench {input.spec:q} --threads {threads}"
        " --output {output.result:q} --steps {output.steps:q} > {log:q} 2>&1"


# A grid point on N > 1 devices (`devices`): N processes started by torchrun, one per device
# (DDP), rank 0 writing the result. On SLURM the rule's resources ask for the N devices on one
# node, or whole nodes for a run larger than one (`slurm.gpus_per_node`), and the job runs the
# command itself (`mpi`), so that it starts torchrun once per node (srun) rather than once per
# task. A rank that fails ends the job with a line naming it (batchscope.bench.torchrun_failure);
# a rank out of memory writes the point's oom result, which the job keeps.
rule bench_ddp:
    input:
        unpack(set_up(f"{RUN}.json")),
        spec=paths.spec_of(RUN),
        barrier=round_barrier,
    output:
        result=f"{RUN}.json",
        steps=f"{RUN}.steps.csv",
    log:
        paths.log_of(RUN),
    benchmark:
        paths.log_of(RUN, "benchmarks")
    wildcard_constraints:
        devices_tag=r"_dev\d+",
    priority: bench_priority
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
        mpi="torchrun",
        nodes=ddp_nodes,
        tasks=ddp_tasks,
        tasks_per_gpu=ddp_tasks_per_gpu,
        gpu=ddp_gpus,
        gres=ddp_gres,
        cpus_per_task=ddp_cpus_per_task,
    params:
        launcher=ddp_launcher,
        devices=ddp_devices,
    shell:
        "PYTHONHASHSEED={wildcards.seed} {params.launcher} -m batchscope.bench {input.spec:q}"
        " --threads {threads} --output {output.result:q} --steps {output.steps:q} > {log:q} 2>&1"
        " || python -m batchscope.bench.torchrun_failure {log:q} --devices {params.devices}"
        " --result {output.result:q}"


# The compute-only ceiling of each mode x model x batch size: synthetic tensors, no workers.
rule ceiling:
    input:
        unpack(set_up(f"{CEILING}.json", data=False)),
        spec=paths.spec_of(CEILING),
    output:
        result=f"{CEILING}.json",
        steps=f"{CEILING}.steps.csv",
    log:
        paths.log_of(CEILING),
    benchmark:
        paths.log_of(CEILING, "benchmarks")
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
    params:
        launch=config["sweep"]["launch"],
    shell:
        "python -m batchscope.bench.launch --launch {params.launch} batchscope.bench"
        " {input.spec:q} --threads {threads} --output {output.result:q}"
        " --steps {output.steps:q} > {log:q} 2>&1"


# `batch_sizes: auto`: the largest batch that fits, per mode and model, found by trials that each
# run in a fresh process; its grid (powers of two up to the limit, plus the limit) is the sweep's.
checkpoint max_batch:
    input:
        unpack(set_up(MAXBATCH)),
        spec=paths.spec_of(MAXBATCH),
    output:
        search=MAXBATCH,
        trials=directory("results/maxbatch/{mode}/{model}.trials"),
    log:
        paths.log_of(MAXBATCH),
    benchmark:
        paths.log_of(MAXBATCH, "benchmarks")
    conda:
        "../envs/torch.yaml"
    threads: all_cores
    resources:
        bench_slot=1,
    shell:
        "python -m batchscope.bench.maxbatch {input.spec:q} --threads {threads}"
        " --trials-dir {output.trials:q} --output {output.search:q} > {log:q} 2>&1"


# After each round but the last: which points the next round measures. With `sweep.strategy:
# race`, from the first look (measure.rounds) on, points shown slower than their group's best
# leave and settled groups stop, within sweep.max_rounds and sweep.budget_s; with `full`, every
# point runs measure.rounds rounds.
# A checkpoint, so that the next round's jobs are the ones it kept; a barrier, so that no run
# of round r + 1 starts before every run of round r has finished. Light: it runs where Snakemake
# runs (on a cluster too), so the next round is not held up by a queue.
checkpoint round_done:
    input:
        results=round_inputs,
        previous=previous_round,
    output:
        ROUND,
    log:
        "logs/rounds/round{round}.log",
    benchmark:
        "benchmarks/rounds/round{round}.tsv"
    localrule: True
    conda:
        "../envs/report.yaml"
    params:
        design=race_options,
        order_seed=config["sweep"]["order_seed"],
        foreign_cpu_limit=config["sweep"]["foreign_cpu_limit_frac"],
    shell:
        "python -m batchscope.report.summary.round_decision --round {wildcards.round} {params.design}"
        " --order-seed {params.order_seed} --foreign-cpu-limit {params.foreign_cpu_limit}"
        " --previous {input.previous:q} --results {input.results:q} --output {output:q}"
        " > {log:q} 2>&1"


# The specs: written by the workflow's own process (no job environment needed).
rule run_spec:
    output:
        paths.spec_of(RUN),
    log:
        paths.log_of(paths.spec_of(RUN)),
    localrule: True
    params:
        spec=bench_spec_text,
    run:
        write_spec(output[0], log[0], params.spec)


rule ceiling_spec:
    output:
        paths.spec_of(CEILING),
    log:
        paths.log_of(paths.spec_of(CEILING)),
    localrule: True
    params:
        spec=ceiling_spec_text,
    run:
        write_spec(output[0], log[0], params.spec)


rule search_spec:
    output:
        paths.spec_of(MAXBATCH),
    log:
        paths.log_of(paths.spec_of(MAXBATCH)),
    localrule: True
    params:
        spec=search_spec_text,
    run:
        write_spec(output[0], log[0], params.spec)
