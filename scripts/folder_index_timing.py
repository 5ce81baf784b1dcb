"""What a large image folder costs each parse of the workflow (issue 25, point 4: large folders).

For each N, builds a folder of N empty ``.png`` files in ``--classes`` class folders (the parse
lists the files and opens none), writes a tiny sweep's config on it (one model, inference, one
batch size) and times ``snakemake -n`` on it twice from outside, in a fresh working folder: the
first parse lists the folder and keeps its listing (``resources/datasets/listings``); the
second (the median of ``--repeats`` more, the sizes taking turns) reads the kept counts,
stating the folders only. Every job of a sweep parses the Snakefile, so the second figure is
what each job pays. Beside them, in this process, the part of the parse that depends on the
folder: listing it (``datasets.list_image_folder``) and reading the kept counts
(``folder_index``), each the median of ``--repeats``. The folder is left alone for
``folder_index.RACY_WINDOW_NS`` before the first parse (a listing taken just after the folder
changed is not kept). Prints a table; asserts nothing.

    .venv/bin/python scripts/folder_index_timing.py                    # N = 1,000 and 200,000
    .venv/bin/python scripts/folder_index_timing.py --sizes 1000 20000 --classes 10
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweeps import REPO, subprocess_env  # noqa: E402

sys.path.insert(0, str(REPO))
from batchscope.core import datasets, folder_index, paths  # noqa: E402


def make_folder(folder: Path, images: int, classes: int) -> None:
    """``images`` empty .png files spread over ``classes`` class folders."""
    for number in range(classes):
        (folder / f"class{number:04d}").mkdir(parents=True)
    for number in range(images):
        path = folder / f"class{number % classes:04d}" / f"img{number:07d}.png"
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def dry_run_s(workdir: Path, config: Path) -> float:
    """Seconds of one ``snakemake -n`` on ``config`` in ``workdir``, seen from outside."""
    env = subprocess_env()
    snakemake = shutil.which("snakemake", path=env["PATH"]) or "snakemake"
    cmd = [snakemake, "-s", str(REPO / "Snakefile"), "--directory", str(workdir), "-n"]
    cmd += ["--configfile", str(config)]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        print("\n".join(done.stderr.strip().splitlines()[-20:]))
        raise SystemExit(f"snakemake -n failed (exit {done.returncode}) in {workdir}")
    return elapsed


def median_s(repeats: int, action) -> float:
    """The median seconds of ``repeats`` calls of ``action``."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def first_parse(root: Path, images: int, classes: int) -> dict:
    """A new folder of ``images`` files (``root/<n>``) and the first ``snakemake -n`` on it."""
    root = root / str(len(list(root.iterdir())))
    folder = root / "images"
    started = time.perf_counter()
    make_folder(folder, images, classes)
    print(f"N={images}: made the folder in {time.perf_counter() - started:.1f} s", flush=True)
    time.sleep(folder_index.RACY_WINDOW_NS / 1e9 + 0.5)  # the folder left as it is
    workdir = root / "work"
    workdir.mkdir()
    config = workdir / "config.yaml"
    sweep = {
        "dataset": {"name": "imagefolder", "path": str(folder)},
        "models": ["small_cnn"],
        "modes": ["infer"],
        "batch_sizes": [8],
        "num_workers": [0],
    }
    config.write_text(yaml.safe_dump(sweep), encoding="utf-8")
    first = dry_run_s(workdir, config)
    listings = workdir / paths.FOLDER_LISTINGS
    kept = Path(folder_index.cache_path(folder, listings)).is_file()
    return {"N": images, "folder": folder, "workdir": workdir, "config": config,
            "listings": listings, "first": first, "kept": kept, "second": []}  # fmt: skip


def later_figures(rows: list[dict], repeats: int) -> None:
    """The later parses, the sizes taking turns (A B A B: the machine's drift falls on each),
    then in process the listing and the kept counts; medians into each row."""
    for _ in range(repeats):
        for row in rows:
            row["second"].append(dry_run_s(row["workdir"], row["config"]))
    for row in rows:
        folder, listings = row["folder"], row["listings"]
        row["second"] = statistics.median(row["second"])
        row["listing"] = median_s(repeats, functools.partial(datasets.list_image_folder, folder))
        row["kept read"] = median_s(
            repeats, functools.partial(folder_index.image_folder_counts, folder, listings)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 200_000])
    parser.add_argument("--classes", type=int, default=100, help="class folders (100)")
    parser.add_argument("--repeats", type=int, default=5, help="of each later figure (5)")
    parser.add_argument("--keep", action="store_true", help="keep the folders made")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchscope-folder-index-"))
    rows = []
    try:
        rows = [first_parse(root, images, args.classes) for images in args.sizes]
        later_figures(rows, args.repeats)
    finally:
        if args.keep:
            print(f"folders kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"\nsnakemake -n on an image folder of N empty files in {args.classes} class folders")
    print(f"(second parse: median of {args.repeats}; in process: the folder's part of a parse)")
    print(f"{'N':>9}  {'first parse s':>13}  {'second parse s':>14}  {'listing kept':>12}  "
          f"{'in process: listing s':>21}  {'kept counts s':>13}")  # fmt: skip
    for row in rows:
        print(f"{row['N']:>9,}  {row['first']:>13.2f}  {row['second']:>14.2f}  "
              f"{'yes' if row['kept'] else 'no':>12}  {row['listing']:>21.3f}  "
              f"{row['kept read']:>13.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
