"""What the end-to-end tests share: running the workflow in a temporary directory, a config
file, the dry run's job table and a run's finished jobs, the results' mtimes, the tiny sweep, a
module of scripts/."""

import collections
import importlib
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.factories import NO_RACE, ONE_ROUND

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")
needs_fmnist = pytest.mark.skipif(
    not DEBIAN_FMNIST.is_dir(), reason="needs Debian's dataset-fashion-mnist package"
)


def snakemake(workdir: Path, *args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    """Run the workflow in ``workdir`` with this interpreter's environment first on PATH."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile")]
    cmd += ["--directory", str(workdir), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def write_config(workdir: Path, **config) -> Path:
    """The sweep's config file. The machines the tests run on run other work beside them (CI
    does): the foreign-load check is off unless a test sets it, so that a verdict these tests
    read does not depend on that (the check itself: tests/report/test_foreign_load.py)."""
    config = {**config, "sweep": {"foreign_cpu_limit_frac": 1.0, **config.get("sweep", {})}}
    path = workdir / "my config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def job_counts(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    lines = dry_run_output.split("Job stats:")[1].splitlines()
    counts = {}
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def finished_jobs(output: str) -> dict[str, int]:
    """The jobs a run finished (its ``Finished jobid: N (Rule: X)`` lines) as {rule: count}."""
    return dict(
        collections.Counter(re.findall(r"^Finished jobid: \d+ \(Rule: (\w+)\)", output, re.M))
    )


def run_mtimes(workdir: Path) -> dict[str, int]:
    """Every result under ``results/runs`` of ``workdir`` (path from there -> mtime in ns)."""
    runs = workdir / "results" / "runs"
    return {p.relative_to(runs).as_posix(): p.stat().st_mtime_ns for p in runs.rglob("*.json")}


def is_png(path: Path) -> bool:
    head = path.read_bytes()[:24]
    width, height = struct.unpack(">II", head[16:24])
    return head[:8] == b"\x89PNG\r\n\x1a\n" and width > 300 and height > 200


TINY = {
    "dataset": {"name": "fashion_mnist", "mirrors": [str(DEBIAN_FMNIST) + "/"]},
    "models": ["small_cnn"],
    "modes": ["train", "infer"],
    "batch_sizes": [7, 50],
    "num_workers": [0, 1],
    "seeds": [0],
    "measure": {"warmup_steps": 2, "diagnostic_steps": 3, **ONE_ROUND},
    "sweep": NO_RACE,
    "train": {"max_steps": 8, "lr": 0.02},
    "infer": {"max_steps": 8},
}


def scripts_module(name: str):
    """A module of scripts/ (``sweeps``, ``stability.answers``), imported as the scripts import
    each other: with scripts/ on ``sys.path``."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)
