"""The three floors: the torch-free core and reporting floor never import torch, and neither
does the Snakefile's own process (it only wires files and writes specs)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_IMPORT_ALL = """
import importlib, pkgutil, sys
import batchscope.{floor} as floor
for info in pkgutil.walk_packages(floor.__path__, f"batchscope.{floor}."):
    importlib.import_module(info.name)
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


# ------------------------------------------------------------------ sizes and private names
# Issue 10: no module over ~600 lines, no function over ~80, no private name used across
# modules; issue 24: scripts/ too. Each test names every offender, so a merge that breaks a
# limit says where.

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
PACKAGE = REPO / "batchscope"
#: The scripts run with scripts/ on sys.path: they import each other as top-level modules
#: (``sweeps``, ``stability.answers``).
SCRIPTS = REPO / "scripts"


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py")) + sorted(SCRIPTS.rglob("*.py"))


def _dotted(path: Path) -> str:
    """The name ``path`` is imported by: ``batchscope.core.stats``, or ``stability.answers``
    for a module of scripts/."""
    root = SCRIPTS if path.is_relative_to(SCRIPTS) else REPO
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(qualified name, lines from ``def`` to its last line) of every function or method of
    ``source`` longer than ``limit`` lines, nested ones included."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                lines = child.end_lineno - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and lines > limit:
                    found.append((name, lines))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def _is_package_module(dotted: str) -> bool:
    """Is ``dotted`` a module (or package) of this repository: ``batchscope.x.y``, or one the
    scripts import (``sweeps``, ``stability.answers``)?"""
    for root in (REPO, SCRIPTS):
        path = root.joinpath(*dotted.split("."))
        if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
            return True
    return False


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses(source: str, module: str = "batchscope.example") -> list[str]:
    """Where ``source`` (the module named ``module``) takes a private name from another module
    of the repository: ``from batchscope.x import _name``, or ``x._name`` /
    ``batchscope.x._name`` on a module it imported (the scripts' modules alike)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> the repository's module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if _is_package_module(top):
                    modules[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not _is_package_module(node.module.split(".")[0]) or node.module == module:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"from {node.module} import {alias.name}")
                elif _is_package_module(f"{node.module}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in modules:
            continue
        dotted = [modules[value.id], *reversed(chain)]
        # the attributes after the last one that names a module
        owner = dotted[0]
        for part in dotted[1:]:
            if not _is_package_module(f"{owner}.{part}"):
                if _private(part) and owner != module:
                    found.append(f"{owner}.{part}")
                break
            owner = f"{owner}.{part}"
    return sorted(set(found))


def test_no_module_is_over_600_lines():
    long = {
        _name(p): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_no_function_is_over_80_lines():
    long = [
        f"{_name(p)}::{name} ({n} lines)"
        for p in _modules()
        for name, n in _long_functions(p.read_text(encoding="utf-8"), MAX_FUNCTION_LINES)
    ]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_private_name_is_used_across_modules():
    used = [
        f"{_name(p)}: {use}"
        for p in _modules()
        for use in _private_uses(p.read_text(encoding="utf-8"), _dotted(p))
    ]
    assert not used, f"private names used outside their module (make them public): {used}"


#: Every command of scripts/: each of its files but the shared module, and the subcommands
#: that run a benchmark's side B.
_COMMANDS = [
    *((p.name,) for p in sorted(SCRIPTS.glob("*.py")) if p.name != "sweeps.py"),
    ("stability_benchmark.py", "bare-loop"),
    ("bare_loop_ratio.py", "bare"),
]

#: In one fresh process (torch imported once): every module of scripts/, imported as the
#: scripts import each other (scripts/ on sys.path), then each command run as ``__main__``
#: with ``--help``; prints {command: [exit status, the start of its output]}.
_IMPORT_THEN_HELP = """
import contextlib, importlib, io, json, runpy, sys
scripts, names, commands = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.path.insert(0, scripts)
for name in names:
    importlib.import_module(name)
out = {}
for command in commands:
    sys.argv = [f"{scripts}/{command[0]}", *command[1:], "--help"]
    text, status = io.StringIO(), None
    try:
        with contextlib.redirect_stdout(text):
            runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as stop:
        status = stop.code
    out[" ".join(command)] = [status, text.getvalue()[:300]]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def scripts_help() -> dict[str, list]:
    names = [_dotted(p) for p in sorted(SCRIPTS.rglob("*.py"))]
    assert {"sweeps", "stability.cli", "overhead.cli"} <= set(names)
    cmd = [sys.executable, "-c", _IMPORT_THEN_HELP, str(SCRIPTS), json.dumps(names)]
    cmd.append(json.dumps(_COMMANDS))
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr  # every module imported
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("command", _COMMANDS, ids=" ".join)
def test_every_script_imports_and_answers_help(scripts_help, command):
    status, text = scripts_help[" ".join(command)]
    assert status == 0
    assert text.startswith(f"usage: {' '.join(command)} "), text


def test_the_checks_find_what_they_look_for():
    """The checks above are not vacuous: each finds a planted offender, and only it."""
    body = "\n".join(f"        x = {i}" for i in range(80))
    source = f"def short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n"
    assert _long_functions(source, 80) == [("C.long", 81)]
    planted = (
        "import batchscope.core.stats\n"
        "import batchscope.core.stats as st\n"
        "from batchscope.report import plots, aggregate as agg\n"
        "from batchscope.report.plots import _subplots, figure\n"
        "from batchscope.bench.loop import _to_host\n"
        "def f():\n"
        "    plots._subplots(); agg.main(); st._finite([]); figure._x\n"
        "    batchscope.core.stats._finite([]); plots.__name__\n"
    )
    assert _private_uses(planted) == [
        "batchscope.core.stats._finite",
        "batchscope.report.plots._subplots",
        "from batchscope.bench.loop import _to_host",
        "from batchscope.report.plots import _subplots",
    ]
    own = "from batchscope.core import stats\nstats.mean_ci([])\n"
    assert _private_uses(own + "stats._finite([])\n", "batchscope.core.stats") == []
    scripts = (
        "import sweeps\nimport stability.answers as sa\nfrom stability import text\n"
        "from sweeps import _x, heading\nimport json\n"
        "sweeps._y; sa._point; text.fmt_s; json._default_decoder; heading._z\n"
    )
    assert _private_uses(scripts, "overhead.cli") == [
        "from sweeps import _x",
        "stability.answers._point",
        "sweeps._y",
    ]
    assert _dotted(SCRIPTS / "stability" / "__init__.py") == "stability"
    assert _dotted(PACKAGE / "core" / "stats.py") == "batchscope.core.stats"


#: What the tests of a floor may not import: the tests mirror the floors they test.
_TESTS_MAY_NOT_IMPORT = {
    "core": ("torch", "torchvision", "batchscope.bench", "batchscope.report"),
    "report": ("torch", "torchvision", "batchscope.bench"),
}


def _imported(source: str) -> set[str]:
    """Every module a source imports, at any depth (``from a import b`` also as ``a.b``)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return out


def _forbidden(source: str, floor: str) -> list[str]:
    banned = _TESTS_MAY_NOT_IMPORT[floor]
    return sorted(
        m for m in _imported(source) if any(m == b or m.startswith(b + ".") for b in banned)
    )


@pytest.mark.parametrize("floor", sorted(_TESTS_MAY_NOT_IMPORT))
def test_the_tests_of_a_torch_free_floor_import_nothing_above_it(floor):
    found = {
        path.name: bad
        for path in sorted((REPO / "tests" / floor).glob("*.py"))
        if (bad := _forbidden(path.read_text(encoding="utf-8"), floor))
    }
    assert not found, f"tests/{floor}/ imports what its floor does not: {found}"
    planted = "def f():\n    import torch.nn\n    from batchscope import bench\n"
    assert _forbidden(planted, floor) == ["batchscope.bench", "torch.nn"]


def test_no_module_name_stands_on_two_floors():
    """A module's name says which floor's job it does: ``core/models.py`` beside
    ``bench/models.py`` made a reader open both to learn which resolves an entry and which
    builds the model. (Within one floor, rooms may share a name: ``build.py`` in each.)"""
    names: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        floor = path.relative_to(PACKAGE).parts[0]
        if path.name not in ("__init__.py", "__main__.py") and floor in ("core", "bench", "report"):
            names.setdefault(path.name, set()).add(floor)
    shared = {name: sorted(floors) for name, floors in names.items() if len(floors) > 1}
    assert not shared, f"module names on two floors (rename one for its job): {shared}"
