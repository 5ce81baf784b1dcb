# Stage 6, for sweeps that train towards a target (train.target_accuracy or target_loss): steps,
# samples and seconds to the target vs batch size across seeds, the gradient noise scale, the
# knee of the curve, and the batch size with the lowest time to target. Rule all asks for it
# through convergence_outputs() (common.smk), which is empty for other sweeps.


rule convergence_report:
    input:
        summary="results/summary.csv",
        curves="results/curves.csv",
        prediction=lambda wildcards: PREDICTION[0] if PREDICT else [],
    output:
        # every figure of batchscope.core.outputs.CONVERGENCE_FIGURES, captioned
        **{
            figure.name: report(
                figure.path,
                caption=figure.caption,
                category=figure.category,
                labels={"figure": figure.label},
            )
            for figure in outputs.CONVERGENCE_FIGURES
        },
        markdown=outputs.CONVERGENCE_MARKDOWN,
        html=report(
            outputs.CONVERGENCE_HTML,
            caption="../report/convergence_document.rst",
            category="Convergence",
            labels={"document": "convergence report"},
        ),
        # the same findings, machine-readable: the recommendation's time-to-target part
        findings=outputs.CONVERGENCE_FINDINGS,
    log:
        "logs/convergence_report.log",
    benchmark:
        "benchmarks/convergence_report.tsv"
    conda:
        "../envs/report.yaml"
    params:
        outdir=plot_dir,
        prediction=lambda wildcards, input: (
            f"--prediction {shlex.quote(input.prediction)}" if PREDICT else ""
        ),
    shell:
        "python -m batchscope.report.convergence.build --summary {input.summary:q}"
        " --curves {input.curves:q} --outdir {params.outdir:q} {params.prediction}"
        " > {log:q} 2>&1"


# train.predict: steps and seconds to the target at every batch size, from short runs at every
# batch size and full-length runs at the calibration size(s) (train.predict_calibration,
# batchscope.core.prediction)
rule convergence_prediction:
    input:
        summary="results/summary.csv",
        curves="results/curves.csv",
    output:
        table="results/convergence/prediction.csv",
        figure=report(
            "results/convergence/convergence_prediction.png",
            caption="../report/convergence_prediction.rst",
            category="Convergence",
            labels={"figure": "predicted vs measured time to target"},
        ),
    log:
        "logs/convergence_prediction.log",
    benchmark:
        "benchmarks/convergence_prediction.tsv"
    conda:
        "../envs/report.yaml"
    params:
        steps=config["train"]["predict_steps"],
        decay=config["train"]["lr_decay"],
        calibration=config["train"]["predict_calibration"],
    shell:
        "python -m batchscope.report.convergence.prediction_table --summary {input.summary:q}"
        " --curves {input.curves:q} --output {output.table:q} --figure {output.figure:q}"
        " --predict-steps {params.steps} --calibration {params.calibration}"
        " --lr-decay {params.decay} > {log:q} 2>&1"
