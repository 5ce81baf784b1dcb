"""Entry point: fetch and verify a dataset (or index an image folder) into a cache folder.

    python -m batchscope.bench.download --dataset fashion_mnist \\
        --root resources/datasets/fashion_mnist \\
        --mirror /usr/share/datasets/fashion-mnist/ --mirror https://example.org/fashion-mnist/

Mirrors are tried in order for each file; what is fetched is verified before it is kept.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from batchscope.bench import fetch
    from batchscope.core import datasets

    p = argparse.ArgumentParser(prog="python -m batchscope.bench.download")
    p.add_argument("--dataset", choices=datasets.NAMES, required=True)
    p.add_argument("--root", required=True, help="cache folder for this dataset")
    p.add_argument("--mirror", action="append", default=[], help="base URL or folder; repeatable")
    p.add_argument("--path", default=None, help="image folder (dataset imagefolder)")
    p.add_argument(
        "--listings", default=None, help="where image folders' listings are kept (imagefolder)"
    )
    args = p.parse_args(argv)
    try:
        fetch.prepare(
            args.dataset, args.root, mirrors=args.mirror, path=args.path, listings=args.listings
        )
    except fetch.DatasetError as exc:
        print(f"batchscope download: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
