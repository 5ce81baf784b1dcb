"""batchscope: measure which batch size and DataLoader worker count to use for a PyTorch model.

The package knows nothing of Snakemake: the workflow's rules call its stage entry points
(``python -m batchscope.<stage>``) with plain arguments.
"""

__version__ = "0.1.0"
