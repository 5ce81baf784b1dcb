"""What the benchmark scripts share: running the workflow as a child process on this checkout.

Imported by ``overhead_benchmark.py`` and ``prediction_benchmark.py`` (run as scripts, so this
folder is on ``sys.path``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def subprocess_env() -> dict[str, str]:
    """This checkout first on PYTHONPATH, this interpreter's bin first on PATH (as `make`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_sweep(label: str, cores: int, configfile: Path | None = None) -> tuple[Path, float]:
    """Run the workflow in a new temporary folder (kept, and printed) with ``configfile`` (None:
    the default config); (folder, seconds of the whole snakemake command). Exits with the
    stderr's tail when the sweep fails."""
    folder = Path(tempfile.mkdtemp(prefix=f"batchscope-{label}-"))
    env = subprocess_env()
    snakemake = shutil.which("snakemake", path=env["PATH"]) or "snakemake"
    cmd = [snakemake, "-s", str(REPO / "Snakefile"), "--directory", str(folder)]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    cmd += ["--cores", str(cores)]
    print(f"running the {label} sweep: {' '.join(cmd)}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        print("\n".join(done.stderr.strip().splitlines()[-20:]))
        raise SystemExit(f"the {label} sweep failed (exit {done.returncode}); its folder: {folder}")
    print(f"{label} sweep done in {elapsed:.1f} s (the whole snakemake command); folder kept: "
          f"{folder}", flush=True)  # fmt: skip
    return folder, elapsed
