"""The stability benchmark's parts, run by ``scripts/stability_benchmark.py`` (whose docstring
says what each part measures and prints): the answers and how reruns agree (``answers``), their
text (``text``), a sweep run and read (``sweep``), the three parts (``reruns``, ``race``,
``harness``), side B's bare loop (``bare``) and the command line (``cli``)."""

import sweeps  # noqa: F401 - this checkout first on sys.path, before a part imports batchscope
