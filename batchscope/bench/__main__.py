"""``python -m batchscope.bench SPEC.json``: run one grid point (see ``batchscope.bench.job``)."""

from batchscope.bench.job import exit_without_teardown, main

if __name__ == "__main__":
    exit_without_teardown(main())
