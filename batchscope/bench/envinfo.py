"""Environment capture: what every number was measured with.

:func:`runtime` is cheap (no subprocesses) and is what each benchmark job records; :func:`capture`
adds the slow parts (``pip freeze``, ``conda env export``, git, the GPU driver) once per workflow
run. Both yield the same :func:`fingerprint` on the same machine and software, so each result row
can be matched to the captured environment, and two result folders can be compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Environment variables that change results or their reproducibility.
ENV_VARS = (
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "SLURM_JOB_ID",
)

#: Set per job, not per environment: each job's seed, Snakemake's thread count for the job
#: (it exports the *_NUM_THREADS variables from `threads`), and a cluster's GPU assignment.
#: Recorded, but not fingerprinted.
PER_JOB_ENV_VARS = (
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
)

#: Keys hashed into the fingerprint: software and hardware, not per-job settings or time.
FINGERPRINT_KEYS = (
    "python",
    "platform",
    "cpu_model",
    "cpu_count",
    "packages",
    "torch_cuda",
    "cudnn",
    "blas",
    "device_type",
    "device_name",
    "device_capability",
    "device_total_mem_mb",
    "env_fingerprinted",
)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _blas() -> dict[str, Any]:
    """Which BLAS torch and NumPy were built against (the seed documents' MKL-vs-OpenBLAS story)."""
    import numpy as np
    import torch

    config = torch.__config__.show()
    torch_blas = {
        key.strip(): value.strip()
        for line in config.replace(",", "\n").splitlines()
        if "=" in line
        for key, value in [line.split("=", 1)]
        if key.strip() in ("BLAS_INFO", "LAPACK_INFO", "USE_MKL", "USE_MKLDNN", "USE_OPENMP")
    }
    torch_blas["mkl_available"] = torch.backends.mkl.is_available()
    try:
        deps = np.show_config(mode="dicts")["Build Dependencies"]
        numpy_blas = {k: deps[k].get("name") for k in ("blas", "lapack") if k in deps}
    except Exception:  # numpy's config layout is not a stable API
        numpy_blas = {}
    return {"torch": torch_blas, "numpy": numpy_blas}


def _device(requested: str) -> dict[str, Any]:
    import torch

    from batchscope.bench.measure import resolve_device

    device = resolve_device(requested)
    info: dict[str, Any] = {
        "device_type": device.type,
        "device_name": _cpu_model(),
        "device_capability": None,
        "device_total_mem_mb": None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device_name"] = props.name
        info["device_capability"] = f"{props.major}.{props.minor}"
        info["device_total_mem_mb"] = round(props.total_memory / 2**20)
        info["device_count"] = torch.cuda.device_count()
    elif device.type == "mps":
        info["device_name"] = "Apple MPS"
    return info


def runtime(requested_device: str = "auto") -> dict[str, Any]:
    """The cheap part of the environment, with its fingerprint (no subprocesses)."""
    import torch

    env = {name: os.environ.get(name) for name in ENV_VARS}
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "packages": {name: _version(name) for name in ("torch", "torchvision", "numpy", "pillow")},
        "torch_git_version": torch.version.git_version,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "blas": _blas(),
        "default_threads": {
            "intraop": torch.get_num_threads(),
            "interop": torch.get_num_interop_threads(),
        },
        "env": env,
        "env_fingerprinted": {k: v for k, v in env.items() if k not in PER_JOB_ENV_VARS},
    }
    info.update(_device(requested_device))
    info["fingerprint"] = fingerprint(info)
    return info


def fingerprint(info: dict[str, Any]) -> str:
    """A short, stable hash of the parts of ``info`` that can change a measurement."""
    subset = {key: info.get(key) for key in FINGERPRINT_KEYS}
    blob = json.dumps(subset, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _run(cmd: list[str], cwd: str | os.PathLike | None = None) -> str | None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git(workflow_dir: str | os.PathLike | None) -> dict[str, Any]:
    if workflow_dir is None or shutil.which("git") is None:
        return {"commit": None, "dirty": None}
    commit = _run(["git", "rev-parse", "HEAD"], cwd=workflow_dir)
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=workflow_dir)
    return {
        "commit": commit.strip() if commit else None,
        "dirty": bool(status.strip()) if status is not None else None,
    }


def _driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.strip().splitlines()[0] if out else None


def capture(
    requested_device: str = "auto",
    *,
    workflow_dir: str | os.PathLike | None = None,
    snakemake_version: str | None = None,
) -> dict[str, Any]:
    """The full environment record: :func:`runtime` plus packages, conda, git and driver."""
    import torch

    info = runtime(requested_device)
    freeze = _run([sys.executable, "-m", "pip", "freeze", "--all"])
    conda = _run(["conda", "env", "export"]) if shutil.which("conda") else None
    info.update(
        {
            "pip_freeze": freeze.splitlines() if freeze else None,
            "conda_env_export": conda,
            "gpu_driver": _driver(),
            "torch_config": torch.__config__.show(),
            "torch_parallel_info": torch.__config__.parallel_info(),
            "workflow_git": _git(workflow_dir),
            "snakemake": snakemake_version,
        }
    )
    return info
