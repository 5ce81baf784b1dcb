# Stage 4: every grid point's result into tidy tables: one row per grid point, one per point
# with its seeds pooled, and the per-step curves beside them.
#
# `--results` always names the whole grid. With `partial: true` in the config, a grid point
# whose result is not there (its job failed under --keep-going, or never ran) becomes a row
# with status `failed` (its bench log exists; the log's last line is the error) or `missing`,
# so the table, plots and report show what finished and list what did not.


rule aggregate:
    input:
        results=aggregate_results,
        steps=aggregate_steps,
        ceilings=ceiling_results,
        # what the race decided after each round (eliminated_at_round)
        rounds=round_files,
        later_rounds=later_round_files,
        env="results/env/environment.json",
    output:
        summary=report(
            "results/summary.csv",
            caption="../report/summary.rst",
            category="Data",
            labels={"table": "summary"},
        ),
        by_point=report(
            "results/summary_by_point.csv",
            caption="../report/summary_by_point.rst",
            category="Data",
            labels={"table": "summary by point"},
        ),
        curves="results/curves.csv",
    log:
        "logs/aggregate.log",
    benchmark:
        "benchmarks/aggregate.tsv"
    conda:
        "../envs/report.yaml"
    params:
        results=grid_results,
        foreign_cpu_limit=config["sweep"]["foreign_cpu_limit_frac"],
        # bench.smk writes the log of results/runs/X.json to logs/bench/X.log
        partial=(
            f"--allow-missing --log-dir {paths.BENCH_LOG_DIR} --dataset {DATASET}"
            if config.get("partial")
            else ""
        ),
    shell:
        "python -m batchscope.report.summary.aggregate --results {params.results:q} {params.partial}"
        " --env {input.env:q} --summary {output.summary:q} --by-point {output.by_point:q}"
        " --curves {output.curves:q} --ceilings {input.ceilings:q} --rounds {input.rounds:q} {input.later_rounds:q}"
        " --foreign-cpu-limit {params.foreign_cpu_limit} > {log:q} 2>&1"
