"""Every file the package and the rules write (results, specs, dataset indexes, round decisions,
the summary, the recommendation, figures) goes through core's atomic writers
(``batchscope.core.results.write_text`` / ``write_bytes`` / ``write_json`` / ``write_csv``:
a temporary file in the same folder, then ``os.replace``), so no fault leaves half a file that
a rerun would take for finished. Read from the code: a plain write added anywhere fails here,
naming the file and line. (What the writers do on a fault: tests/core/test_atomic_writes.py.)"""

import ast
import re
from pathlib import Path

from snakemake.parser import parse

REPO = Path(__file__).resolve().parents[2]

#: Where a plain write is the right one, and why.
ALLOWED = {
    ("batchscope/core/results.py", "_atomic"): "the atomic writer itself",
    ("batchscope/bench/fetch.py", "_fetch"): "into the staging folder, moved in whole when good",
    ("batchscope/bench/fetch.py", "_gunzip"): "into the staging folder, moved in whole when good",
    ("batchscope/bench/torchrun_failure.py", "main"): "appends its one line to the job's log",
    ("batchscope/bench/warm.py", "main"): "opens its (empty) lock file to hold the lock",
}

_WRITE_MODE = re.compile(r"[wax+]")
_PANDAS_WRITERS = {"to_csv", "to_json", "to_parquet", "to_pickle", "to_excel", "to_feather"}
_COPIES = {"copy", "copy2", "copyfile", "copytree", "move"}
#: a shell command writing a rule's output itself (`> {output}`, `tee {output.x}`)
_SHELL_TO_OUTPUT = re.compile(r"(>>?|\btee(\s+-a)?)\s*['\"]?\{output")


def _mode(call: ast.Call, position: int) -> ast.expr | None:
    given = [k.value for k in call.keywords if k.arg == "mode"]
    return given[0] if given else (call.args[position] if len(call.args) > position else None)


def _plain_write(call: ast.Call, buffers: set[str]) -> str | None:
    """What ``call`` writes to a file by itself, or None when it writes none."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
    if name in ("write_text", "write_bytes") and owner and owner != "results":
        return f"{owner}.{name}"
    if name == "open" or (name == "fdopen" and owner == "os"):
        mode = _mode(call, 1)
        path = call.args[0] if call.args else None
        if isinstance(path, ast.Constant) and str(path.value).startswith("/proc/"):
            return None  # a kernel interface, not a file
        if mode is not None and not (
            isinstance(mode, ast.Constant) and not _WRITE_MODE.search(str(mode.value))
        ):
            return f"{ast.unparse(func)}(..., {ast.unparse(mode)})"
    if name in ("dump", "safe_dump") and (
        len(call.args) > 1 or any(k.arg == "stream" for k in call.keywords)
    ):
        return f"{ast.unparse(func)}(..., file)"
    if name in _PANDAS_WRITERS and (
        call.args or any(k.arg.startswith("path") for k in call.keywords if k.arg)
    ):
        return f"{ast.unparse(func)}(path)"
    if name == "save" or (owner == "shutil" and name in _COPIES):
        return ast.unparse(func)
    if name == "savefig" and not (
        call.args and isinstance(call.args[0], ast.Name) and call.args[0].id in buffers
    ):
        return f"{ast.unparse(func)} to a file"
    return None


def plain_writes(tree: ast.AST) -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) of each plain write in ``tree``, and of each shell
    command that redirects into its rule's output."""
    found = []

    def visit(node: ast.AST, function: str, buffers: set[str]) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
            buffers = {
                target.id
                for sub in ast.walk(node)
                if isinstance(sub, ast.Assign)
                and isinstance(sub.value, ast.Call)
                and ast.unparse(sub.value.func).endswith("BytesIO")
                for target in sub.targets
                if isinstance(target, ast.Name)
            }
        what = None
        if isinstance(node, ast.Call):
            what = _plain_write(node, buffers)
        elif isinstance(node, ast.Constant) and _SHELL_TO_OUTPUT.search(str(node.value)):
            what = f"a shell command writes its output: {node.value.strip()!r}"
        if what:
            found.append((function, node.lineno, what))
        for child in ast.iter_child_nodes(node):
            visit(child, function, buffers)

    visit(tree, "", set())
    return found


class _Source:
    """What Snakemake's parser reads a Snakefile through (a path, opened from disk)."""

    def __init__(self, path: Path):
        self.path = path
        self.sourcecache = self

    def get_path_or_uri(self, secret_free: bool = False) -> str:
        return str(self.path)

    def open(self, source: "_Source"):
        return open(source.path, encoding="utf-8")


def _tree(path: Path, lines: dict[int, int]) -> ast.AST:
    """The module's syntax tree; a Snakefile's as Snakemake compiles it to Python (``lines``
    then maps the compiled lines to the Snakefile's)."""
    if path.suffix == ".py":
        return ast.parse(path.read_text(encoding="utf-8"))
    source = _Source(path)
    code, _ = parse(source, source, lines)
    return ast.parse(code)


def _written_files() -> list[Path]:
    rules = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    return [*sorted((REPO / "batchscope").rglob("*.py")), *rules]


def test_every_file_the_package_and_the_rules_write_is_written_atomically():
    # (module, what) -> its first line: Snakemake compiles a rule's shell command in twice
    found: dict[tuple[str, str], int] = {}
    allowed = set()
    for path in _written_files():
        module, lines = path.relative_to(REPO).as_posix(), {}
        for function, line, what in plain_writes(_tree(path, lines)):
            if (module, function) in ALLOWED:
                allowed.add((module, function))
            else:
                found.setdefault((module, what), lines.get(line, line))
    listed = [f"{module}:{line}: {what}" for (module, what), line in found.items()]
    assert listed == [], "write these with batchscope.core.results (atomic):\n" + "\n".join(listed)
    assert allowed == set(ALLOWED), "ALLOWED names a function that no longer writes"


def test_the_rules_are_read_and_their_writers_found():
    """The Snakefiles are parsed (not skipped): the spec writer's call is in the tree."""
    specs = ast.unparse(_tree(REPO / "workflow" / "rules" / "specs.smk", {}))
    assert "results.write_text(path, text)" in specs


BYPASSES = [
    'Path("results/x.json").write_text(text)',
    "out.write_bytes(data)",
    'with open(path, "w") as handle:\n    handle.write(text)',
    "with path.open(mode='a') as handle:\n    pass",
    "json.dump(result, handle)",
    "yaml.safe_dump(config, stream=handle)",
    "frame.to_csv(path, index=False)",
    "frame.to_json(path_or_buf=path)",
    "torch.save(state, path)",
    "shutil.copyfile(source, dest)",
    "fig.savefig(path)",
    "shell = 'python -m x > {output:q}'",
]
KEPT = [
    "results.write_text(path, text)",
    "write_json(path, data)",
    "open(path, encoding='utf-8').read()",
    "gzip.open(file, 'rb')",
    "open('/proc/self/clear_refs', 'w')",
    "json.dumps(result)",
    "text = frame.to_csv(index=False)",
    "spec.to_json()",
    "def f():\n    buffer = io.BytesIO()\n    fig.savefig(buffer, format='png')",
    "shell = 'python -m x --output {output:q} > {log:q} 2>&1'",
]


def test_the_check_finds_a_plain_write_and_passes_the_atomic_ones():
    for code in BYPASSES:
        assert plain_writes(ast.parse(code)), code
    for code in KEPT:
        assert plain_writes(ast.parse(code)) == [], code
