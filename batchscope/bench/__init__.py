"""The benchmark process (torch): one process measures one grid point.

This ``__init__`` imports nothing, so ``python -m batchscope.bench.<stage>`` pays only for what
that stage uses.
"""
