"""Entry point: record the environment this workflow run measures in, as one JSON.

python -m batchscope.bench.capture --device auto --workflow-dir . \\
    --output results/env/environment.json
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from batchscope.bench import envinfo
    from batchscope.core import results

    p = argparse.ArgumentParser(prog="python -m batchscope.bench.capture")
    p.add_argument("--device", default="auto")
    p.add_argument("--workflow-dir", default=None, help="git checkout of the workflow")
    p.add_argument("--snakemake-version", default=None)
    p.add_argument("--output", required=True)
    args = p.parse_args(argv)
    info = envinfo.capture(
        args.device, workflow_dir=args.workflow_dir, snakemake_version=args.snakemake_version
    )
    results.write_json(args.output, info)
    print(
        f"batchscope capture: fingerprint {info['fingerprint']} torch {info['packages']['torch']}"
        f" on {info['device_type']} ({info['device_name']})",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
