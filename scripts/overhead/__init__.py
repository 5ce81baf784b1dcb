"""The overhead benchmark's parts, run by ``scripts/overhead_benchmark.py`` (whose docstring says
what each measures): runner vs a bare loop (``abloop``), the fixed cost per job (``fixedcost``),
a sweep's wall time vs its jobs' work (``sweepwork``), ``batch_sizes: auto`` (``autosearch``)
and the command line with its table of goals (``cli``). The goals of issue 3 are here."""

import sweeps  # noqa: F401 - this checkout first on sys.path, before a part imports batchscope

RATIO_GOAL = 0.97
FIXED_COST_GOAL = 1.3  # x PyTorch's floor, python -c "import torch"
SWEEP_GOAL = 1.3
SEARCH_TOLERANCE = 0.05
SEARCH_EXTRA_TRIALS = 4
#: Plotting libraries: no bench process may load them.
PLOTTING = ("matplotlib", "seaborn", "pandas")
