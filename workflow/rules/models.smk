# Stage 0: the models. Every entry of `models` is resolved before any job (paths found, weights
# hashed: batchscope.core.model_entries), then checked once by a job that builds it, loads its weights
# and runs one sample through it. Every benchmark job waits for every model's check, so a
# mistake in any entry stops the sweep before its first measurement.
from batchscope.core import model_check_spec, model_entries

# Relative paths in an entry: CONFIG_DIRS (common.smk), the config file's folder first.

try:
    MODEL_SPECS = model_entries.parse_all(config["models"], CONFIG_DIRS)
    # a train.loss of file.py:function is looked up the same way
    config["train"]["loss"] = model_entries.resolve_loss(
        config["train"]["loss"], CONFIG_DIRS
    )
except model_entries.ModelEntryError as error:
    sys.exit(f"batchscope: {error}")
# The entries with their paths absolute: every spec built from the config finds the same files.
config["models"] = [model_entries.as_entry(entry) for entry in MODEL_SPECS]
MODEL_NAMES = [entry.name for entry in MODEL_SPECS]
MODEL_CHECK = paths.MODEL_CHECK


# Every model's check, which every benchmark job waits for. Ancient: a check run again (its
# entry changed) reruns only the jobs whose own spec changed with it.
MODEL_CHECKS = ancient(expand(MODEL_CHECK, model=MODEL_NAMES))


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
    shell:
        # a failure's one line reaches the terminal with the log (show-failed-logs)
        "python -m batchscope.bench.model_check {input.spec:q} --output {output:q} > {log:q} 2>&1"


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
