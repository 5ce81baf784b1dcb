# Stage 0: the models. Every entry of `models` is resolved before any job (paths found, weights
# hashed: batchscope.core.model_entries), then checked once by a job that builds it, loads its weights
# and runs one sample through it. Every benchmark job waits for every model's check (through
# models_checked), so a mistake in any entry stops the sweep before its first measurement.
from batchscope.core import model_check_spec

# The entries were resolved with the config (common.smk: batchscope.core.workflow_config); their
# names are MODEL_NAMES.
MODEL_CHECK = paths.MODEL_CHECK


rule model_check:
    input:
        spec=paths.spec_of(MODEL_CHECK),
    output:
        MODEL_CHECK,
    log:
        paths.log_of(MODEL_CHECK),
    benchmark:
        paths.log_of(MODEL_CHECK, "benchmarks")
    conda:
        "../envs/torch.yaml"
    params:
        launch=config["sweep"]["launch"],
    shell:
        # a failure's one line reaches the terminal with the log (show-failed-logs)
        "python -m batchscope.bench.launch --launch {params.launch} batchscope.bench.model_check"
        " {input.spec:q} --output {output:q} > {log:q} 2>&1"


# Every model checked, which every measurement waits for (grid.smk: set_up). A checkpoint, so
# that a model added to a finished sweep runs only its own jobs (set_up says how).
checkpoint models_checked:
    input:
        expand(MODEL_CHECK, model=MODEL_NAMES),
    output:
        paths.MODELS_CHECKED,
    log:
        paths.log_of(paths.MODELS_CHECKED),
    localrule: True
    run:
        write_spec(output[0], log[0], json.dumps(sorted(MODEL_NAMES)))


rule model_check_spec:
    output:
        paths.spec_of(MODEL_CHECK),
    log:
        paths.log_of(paths.spec_of(MODEL_CHECK)),
    localrule: True
    params:
        spec=lambda wildcards: model_check_spec.check_spec_text(config, wildcards.model),
    run:
        write_spec(output[0], log[0], params.spec)
