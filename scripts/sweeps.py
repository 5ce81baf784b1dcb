"""What the scripts share (not a script): this checkout, the workflow run on it as a child
process, the files its runs leave, printing, and the parts of a bare PyTorch loop.

The scripts run as scripts, so this folder is on ``sys.path`` and ``import sweeps`` finds this
module. Importing it puts this checkout first on ``sys.path``: a script imports this checkout's
batchscope, not the copy an environment's editable install points at. Nothing here imports
batchscope, so the bare loops (which must not) use it too; torch is imported only by the bare
loop's parts, when they are called.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO / "config" / "config.yaml"

sys.path.insert(0, str(REPO))


# ------------------------------------------------------------------ the workflow, run here


def subprocess_env(checkout: Path | None = REPO) -> dict[str, str]:
    """This interpreter's bin first on PATH (as `make` does: the workflow's jobs run `python`)
    and ``checkout`` first on PYTHONPATH, so that a child runs that copy of batchscope; None: no
    PYTHONPATH at all (a child that must not find batchscope there)."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    if checkout is None:
        env.pop("PYTHONPATH", None)
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), env.get("PYTHONPATH")]))
    return env


def load_config(path: Path = DEFAULT_CONFIG) -> dict[str, Any]:
    """A sweep's config file as written (the default sweep unless ``path``): no defaults."""
    import yaml

    return yaml.safe_load(Path(path).read_text()) or {}


def snakemake_command(
    folder: Path,
    cores: int | None,
    configfile: Path | None = None,
    extra: Sequence[str] = (),
    program: str | None = None,
) -> list[str]:
    """The command that runs this checkout's workflow in ``folder`` with ``configfile`` (None:
    the default config) on ``cores`` (None: no --cores, for a dry run or an unlock);
    ``program``: the snakemake to run (None: this environment's)."""
    if program is None:
        program = shutil.which("snakemake", path=subprocess_env()["PATH"]) or "snakemake"
    cmd = [program, "-s", str(REPO / "Snakefile"), "--directory", str(folder)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    if cores is not None:
        cmd += ["--cores", str(cores)]
    return [*cmd, *extra]


def run_sweep(label: str, cores: int, configfile: Path | None = None) -> tuple[Path, float]:
    """Run the workflow in a new temporary folder (kept, and printed) with ``configfile`` (None:
    the default config); (folder, seconds of the whole snakemake command). Exits with the
    stderr's tail when the sweep fails."""
    folder = Path(tempfile.mkdtemp(prefix=f"batchscope-{label}-"))
    cmd = snakemake_command(folder, cores, configfile)
    print(f"running the {label} sweep: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        print("\n".join(done.stderr.strip().splitlines()[-20:]))
        raise SystemExit(f"the {label} sweep failed (exit {done.returncode}); its folder: {folder}")
    print(f"{label} sweep done in {elapsed:.1f} s (the whole snakemake command); folder kept: "
          f"{folder}", flush=True)  # fmt: skip
    return folder, elapsed


def tsv_seconds(path: Path) -> float | None:
    """The ``s`` column (wall seconds) of a Snakemake benchmark TSV; None when the file is
    missing or has no row."""
    try:
        with path.open(newline="") as handle:
            row = next(csv.DictReader(handle, delimiter="\t"))
    except (OSError, StopIteration):
        return None
    return float(row["s"])


# ------------------------------------------------------------------ figures and printing


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 96 - len(text)), flush=True)


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are known (not None); None when none is."""
    known = [v for v in values if v is not None]
    return float(statistics.median(known)) if known else None


def ratio_summary(ratios: Sequence[float], method: str = "inclusive") -> dict[str, float]:
    """Median, IQR (quartiles by ``statistics.quantiles``' ``method``), min and max of
    per-pair ratios; the IQR of one ratio is 0. With two or more, also their geometric mean
    and its 95% t interval (on the logs: a ratio's spread is multiplicative), which says
    whether the pairs settle a goal of a few percent: ``geo_mean``, ``ci_low``, ``ci_high``."""
    med = statistics.median(ratios)
    out = {"median": med, "iqr": 0.0, "min": min(ratios), "max": max(ratios)}
    if len(ratios) > 1:
        from scipy import stats

        p25, _, p75 = statistics.quantiles(ratios, n=4, method=method)
        logs = [math.log(r) for r in ratios]
        mean, se = statistics.fmean(logs), statistics.stdev(logs) / math.sqrt(len(logs))
        half = float(stats.t.ppf(0.975, len(logs) - 1)) * se
        out.update(iqr=p75 - p25, geo_mean=math.exp(mean))
        out.update(ci_low=math.exp(mean - half), ci_high=math.exp(mean + half))
    return out


# ------------------------------------------------------------------ a bare PyTorch loop


def bare_setup(threads: int, deterministic: bool) -> None:
    """Torch's threads, and its deterministic setting as batchscope's seeding sets it."""
    import torch

    torch.set_num_threads(threads)
    if deterministic:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.use_deterministic_algorithms(True, warn_only=True)


def plain_step(model, optimizer, train: bool) -> Callable[[Any, Any], None]:
    """One step of a plain loop: zero_grad, cross-entropy, backward, SGD step (``train``), or
    a forward pass under ``inference_mode``."""
    import torch
    import torch.nn.functional as F

    def step(x, y) -> None:
        if train:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        else:
            with torch.inference_mode():
                model(x)

    return step


def timed_steps(
    loader: Iterable,
    step: Callable[[Any, Any], None],
    warmup: int,
    steps: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """``step(x, y)`` over ``loader``'s batches (again from its start when it ends): ``warmup``
    steps, then ``steps`` measured ones; the seconds of the measured steps on ``clock``, started
    at the end of the last warm-up step (the wait for each measured batch is inside)."""

    def batches():
        while True:
            yield from loader

    stream = batches()
    started = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            started = clock()
        step(*next(stream))
    elapsed = clock() - started
    stream.close()  # ends the loader's iterator (and its workers)
    return elapsed


def bare_result(steps: int, batch_size: int, elapsed: float) -> str:
    """The JSON line a bare loop prints: its samples/s over the measured steps, its threads, and
    whether batchscope was imported (it must not be)."""
    import torch

    return json.dumps(
        {
            "samples_per_s": steps * batch_size / elapsed,
            "measured_s": elapsed,
            "steps": steps,
            "threads": torch.get_num_threads(),
            "batchscope_loaded": any(m.split(".")[0] == "batchscope" for m in sys.modules),
        }
    )
