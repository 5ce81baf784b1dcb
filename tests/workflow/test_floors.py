"""The three floors: the torch-free core and reporting floor never import torch, and neither
does the Snakefile's own process (it only wires files and writes specs)."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_IMPORT_ALL = """
import importlib, pkgutil, sys
import batchscope.{floor} as floor
for info in pkgutil.iter_modules(floor.__path__):
    importlib.import_module(f"batchscope.{floor}." + info.name)
print(sorted(m for m in ("torch", "torchvision") if m in sys.modules))
"""


@pytest.mark.parametrize("floor", ["core", "report"])
def test_a_torch_free_floor_imports_without_torch(floor):
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL.replace("{floor}", floor)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_module_lives_on_a_floor():
    top = sorted(p.name for p in (REPO / "batchscope").glob("*.py"))
    assert top == ["__init__.py", "__main__.py"]
    floors = sorted(
        p.name for p in (REPO / "batchscope").iterdir() if p.is_dir() and p.name[0] != "_"
    )
    assert floors == ["bench", "core", "report"]


_SNAKEMAKE_THEN_MODULES = """
import atexit, sys
atexit.register(lambda: print("TORCH_IMPORTED", "torch" in sys.modules))
from snakemake.cli import main
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""


def test_the_workflow_process_never_imports_torch(tmp_path):
    cmd = [sys.executable, "-c", _SNAKEMAKE_THEN_MODULES, "-s", str(REPO / "Snakefile")]
    cmd += ["--directory", str(tmp_path), "-n", "--cores", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TORCH_IMPORTED False" in done.stdout
