"""Conda envs, checked without conda: they parse, pin exactly, match pyproject.toml, and provide
every third-party module the code of each rule imports."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV_FILES = sorted((ROOT / "workflow" / "envs").glob("*.yaml")) + [ROOT / "environment.yml"]
# import name -> distribution name, where they differ
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "pynvml": "nvidia-ml-py"}


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [
        d for ds in project["optional-dependencies"].values() for d in ds
    ]
    pins = {}
    for dep in deps:
        name, _, version = dep.partition("==")
        assert version, f"pyproject.toml: {dep} is not pinned with =="
        pins[name.lower()] = version
    return pins


def _env_packages(path: Path) -> dict[str, str]:
    """name -> exact version of every conda and pip dependency of an env file."""
    env = yaml.safe_load(path.read_text())
    packages = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for pip_dep in dep["pip"]:
                match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.+-]*)", pip_dep)
                assert match, f"{path.name}: pip dependency {pip_dep!r} is not pinned with =="
                packages[match[1].lower()] = match[2]
        else:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)=([0-9][0-9A-Za-z.]*)", dep)
            assert match, f"{path.name}: conda dependency {dep!r} is not pinned with ="
            packages[match[1].lower()] = match[2]
    return packages


@pytest.mark.parametrize("path", ENV_FILES, ids=lambda p: p.name)
def test_env_is_pinned_on_conda_forge_and_agrees_with_pyproject(path):
    env = yaml.safe_load(path.read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"]
    packages = _env_packages(path)
    assert packages["python"] == "3.11"
    pins = _pyproject_pins()
    for name, version in packages.items():
        if name in pins:
            assert version == pins[name], f"{path.name}: {name} {version} vs pyproject {pins[name]}"


def _rules() -> list[tuple[str, str, str]]:
    """(rule name, conda env file, batchscope module it runs) for every rule and checkpoint
    with a command."""
    found = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=(?:rule|checkpoint) )", smk.read_text()):
            name = re.match(r"(?:rule|checkpoint) (\w+):", block)
            module = re.search(r"python -m (batchscope[\w.]+)", block)
            if name and module:
                env = re.search(r'conda:\s*\n\s*"\.\./envs/([\w.]+)"', block)
                assert env, f"rule {name[1]} has no conda env"
                found.append((name[1], env[1], module[1]))
    return found


def _module_file(module: str) -> Path | None:
    """The source of a batchscope module, or of a package's ``__main__`` (``python -m``)."""
    base = ROOT / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__main__.py"):
        if candidate.exists():
            return candidate
    return None


def _third_party_imports(module: str, seen: set[str] | None = None) -> set[str]:
    """Top-level third-party modules imported by ``module`` and the batchscope modules it uses."""
    seen = seen if seen is not None else set()
    if module in seen:
        return set()
    seen.add(module)
    source = _module_file(module).read_text()
    out = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module.startswith("batchscope"):
                names += [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            top = name.split(".")[0]
            if name.startswith("batchscope."):
                if _module_file(name) is not None:
                    out |= _third_party_imports(name, seen)
            elif top not in sys.stdlib_module_names and top not in ("__future__", "batchscope"):
                out.add(top)
    return out


def test_every_rule_runs_a_batchscope_stage_in_a_conda_env():
    rules = {name for name, _, _ in _rules()}
    assert {"download_dataset", "capture_environment", "bench", "aggregate"} <= rules
    assert {"max_batch", "round_done"} <= rules  # checkpoints are read too


@pytest.mark.parametrize(("rule", "env", "module"), _rules(), ids=lambda v: str(v))
def test_rule_env_provides_what_its_code_imports(rule, env, module):
    packages = _env_packages(ROOT / "workflow" / "envs" / env)
    for name in sorted(_third_party_imports(module)):
        dist = DISTRIBUTION.get(name, name).lower()
        assert dist in packages, f"rule {rule} runs {module}, which imports {name}; {env} lacks it"


def test_benchmark_jobs_do_not_import_plotting_libraries():
    imported = _third_party_imports("batchscope.bench")
    assert not imported & {"matplotlib", "seaborn", "pandas"}
    assert {"torch", "torchvision"} <= imported
