# Stage 5: comparison plots and the recommendation, each captioned for the HTML report
# (`snakemake --report results/report.html`; the path is taken in the --directory).

REPORT = "results/report.html"


# The HTML report is not a job's output: `--report` writes it from the results as they are.
# A run that does any job changes what it would show, so the old one is removed before the
# first job, with one line saying how to make it again; a dry run, a run with nothing to do
# and `--report` itself leave it.
onstart:
    if os.path.exists(REPORT):
        os.remove(REPORT)
        print(
            f"batchscope: removed {REPORT}, made from the results this run replaces; write"
            " it again with this command's --directory and --configfile and"
            f" `--report {REPORT}`",
            file=sys.stderr,
        )


rule plots:
    input:
        summary="results/summary.csv",
        curves="results/curves.csv",
        # with `batch_sizes: auto`, the largest-batch searches: the memory figure marks them
        maxbatch=maxbatch_results,
        # the pick, its tie set and the race's eliminations: the throughput figure marks them
        answer="results/recommendation.json",
        rounds=round_files,
        later_rounds=later_round_files,
    output:
        # every figure of batchscope.core.outputs (token data adds memory_tokens), captioned
        **{
            figure.name: report(
                figure.path,
                caption=figure.caption,
                category=figure.category,
                labels={"figure": figure.label},
            )
            for figure in outputs.plots(TOKENS)
        },
    log:
        "logs/plots.log",
    benchmark:
        "benchmarks/plots.tsv"
    conda:
        "../envs/report.yaml"
    params:
        outdir=plot_dir,
    shell:
        "python -m batchscope.report.plots.build --summary {input.summary:q} --curves {input.curves:q}"
        " --outdir {params.outdir:q} --maxbatch {input.maxbatch:q} --answer {input.answer:q}"
        " --rounds {input.rounds:q} {input.later_rounds:q} > {log:q} 2>&1"


# With several `devices` values: throughput and scaling efficiency against the devices.
rule scaling_plot:
    input:
        by_point="results/summary_by_point.csv",
    output:
        report(
            outputs.SCALING.path,
            caption=outputs.SCALING.caption,
            category=outputs.SCALING.category,
            labels={"figure": outputs.SCALING.label},
        ),
    log:
        "logs/scaling_plot.log",
    benchmark:
        "benchmarks/scaling_plot.tsv"
    conda:
        "../envs/report.yaml"
    shell:
        "python -m batchscope.report.plots.scaling --by-point {input.by_point:q}"
        " --output {output:q} > {log:q} 2>&1"


# The answer, machine-readable: per mode x model x accumulation, the pick, the tie set and the
# verdict from the runs' throughputs across rounds. Everything that states the answer reads it.
rule answer:
    input:
        summary="results/summary.csv",
        by_point="results/summary_by_point.csv",
    output:
        "results/recommendation.json",
    log:
        "logs/answer.log",
    benchmark:
        "benchmarks/answer.tsv"
    conda:
        "../envs/report.yaml"
    params:
        design=DESIGN_OPTIONS,
        foreign_cpu_limit=config["sweep"]["foreign_cpu_limit_frac"],
        energy_eta=config["recommend"]["energy_eta"],
    shell:
        "python -m batchscope.report.recommend.answer --summary {input.summary:q}"
        " --by-point {input.by_point:q} {params.design}"
        " --foreign-cpu-limit {params.foreign_cpu_limit} --energy-eta {params.energy_eta}"
        " --output {output:q} > {log:q} 2>&1"


rule recommend:
    input:
        summary="results/summary.csv",
        answer="results/recommendation.json",
        env="results/env/environment.json",
        # the convergence report's findings, for sweeps that train towards a target (else none)
        convergence=[p for p in convergence_outputs() if p.endswith(".json")],
    output:
        markdown="results/recommendation.md",
        html=report(
            "results/recommendation.html",
            caption="../report/recommendation.rst",
            category="Recommendation",
            labels={"document": "recommendation"},
        ),
        energy=report(
            outputs.ENERGY.path,
            caption=outputs.ENERGY.caption,
            category=outputs.ENERGY.category,
            labels={"figure": outputs.ENERGY.label},
        ),
    log:
        "logs/recommend.log",
    benchmark:
        "benchmarks/recommend.tsv"
    conda:
        "../envs/report.yaml"
    params:
        convergence=lambda wildcards, input: (
            ["--convergence", *input.convergence] if input.convergence else []
        ),
    shell:
        "python -m batchscope.report.recommend.build --summary {input.summary:q} --env {input.env:q}"
        " --answer {input.answer:q} --markdown {output.markdown:q} --html {output.html:q} {params.convergence:q}"
        " --energy-plot {output.energy:q}"
        " > {log:q} 2>&1"
