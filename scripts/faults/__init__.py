"""The fault suite's cases (``scripts/fault_suite.py``), one module per family.

``harness``: the sweeps the cases start from and what every case measures (the one line the
user sees, the status recorded, finished results lost, what a plain rerun redoes); ``jobs``:
faults that hit a running benchmark job or the Snakemake process; ``ddp``: a rank of a
two-process run; ``data``: the image folder and the dataset's download; ``models``: the user's
model file and checkpoint; ``configs``: a malformed config of each kind.
"""

from faults import configs, data, ddp, jobs, models

#: Every case: its name on the command line -> the function that runs it (a ``harness.Row``).
CASES = {**jobs.CASES, **ddp.CASES, **data.CASES, **models.CASES, **configs.CASES}
