# batchscope: which batch size and how many DataLoader workers, for training and inference.
# The DAG: download -> environment capture -> one benchmark job per grid point -> aggregate ->
# plots, recommendation, report. The rules only wire files; the work is in the batchscope package.
import os
import sys

from snakemake.utils import min_version, validate

min_version("9.0")

# The Snakefile checks the config with the batchscope package of this checkout (common.smk);
# the jobs import it from here too, whichever environment runs them (shell.prefix there).
sys.path.insert(0, workflow.basedir)


# The default sweep, unless the user gives their own with --configfile (which then replaces it;
# keys it leaves out take the schema's defaults). --config key=value edits either.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/env.smk"
include: "workflow/rules/bench.smk"
include: "workflow/rules/aggregate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/convergence.smk"


rule all:
    default_target: True
    input:
        "results/summary.csv",
        "results/recommendation.json",
        "results/recommendation.md",
        "results/recommendation.html",
        plot_files(),
        convergence_outputs(),
