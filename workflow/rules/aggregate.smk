# Stage 4: every grid point's result into one tidy table (and the per-step curves beside it).


rule aggregate:
    input:
        results=grid_results,
        steps=grid_steps,
        env="results/env/environment.json",
    output:
        summary=report(
            "results/summary.csv",
            caption="../report/summary.rst",
            category="Data",
            labels={"table": "summary"},
        ),
        curves="results/curves.csv",
    log:
        "logs/aggregate.log",
    benchmark:
        "benchmarks/aggregate.tsv"
    conda:
        "../envs/report.yaml"
    shell:
        "python -m batchscope.aggregate --results {input.results:q} --env {input.env:q}"
        " --summary {output.summary:q} --curves {output.curves:q} > {log:q} 2>&1"
