"""The rule files keep to their own: the config is completed in one place (common.smk, through
batchscope.core.workflow_config) and no other rule file edits it; a name one stage's rule file
defines is used by no other, so what files share goes through common.smk and the files it
includes (issue 24: MODEL_NAMES was defined in models.smk and used in common.smk's grid)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "workflow" / "rules"

#: An assignment into the config, or a call that changes it.
CONFIG_EDIT = re.compile(
    r"\bconfig(\s*\[[^\]]+\])+\s*=(?!=)|\bconfig\.(update|setdefault|pop|clear|__setitem__)\("
)
TOP_NAME = re.compile(r"^(?:def\s+([A-Za-z_]\w*)\s*\(|([A-Za-z_]\w*)\s*=(?!=))", re.M)


def _common() -> set[Path]:
    """common.smk and the files it includes."""
    text = (RULES / "common.smk").read_text(encoding="utf-8")
    return {RULES / "common.smk"} | {
        RULES / name for name in re.findall(r'^include:\s*"([^"]+)"', text, re.M)
    }


def _stage_files() -> list[Path]:
    return sorted(set(RULES.glob("*.smk")) - _common())


def _defined(text: str) -> set[str]:
    return {a or b for a, b in TOP_NAME.findall(text)}


def _edits(text: str) -> list[str]:
    return [m.group(0) for m in CONFIG_EDIT.finditer(text)]


def test_only_common_completes_the_config():
    edits = {
        path.name: found
        for path in [REPO / "Snakefile", *_stage_files()]
        if (found := _edits(path.read_text(encoding="utf-8")))
    }
    assert not edits, f"config edited outside common.smk: {edits}"


def test_a_stage_files_names_stay_in_it():
    files = {path: path.read_text(encoding="utf-8") for path in RULES.glob("*.smk")}
    files[REPO / "Snakefile"] = (REPO / "Snakefile").read_text(encoding="utf-8")
    leaks = []
    for path in _stage_files():
        for name in _defined(files[path]):
            for other, text in files.items():
                if other != path and re.search(rf"(?<![\w.]){re.escape(name)}\b", text):
                    leaks.append(f"{name} ({path.name}) used in {other.name}")
    assert not leaks, f"names shared between rule files outside common.smk: {leaks}"


def test_the_checks_find_what_they_look_for():
    assert _edits('config["models"] = [1]\nconfig["train"]["loss"] = x\n') == [
        'config["models"] =',
        'config["train"]["loss"] =',
    ]
    assert _edits("config.update(x)\nif config['a'] == 1:\n    pass\n") == ["config.update("]
    assert _defined("MODEL_NAMES = [1]\ndef plot_files():\n    x = 1\n") == {
        "MODEL_NAMES",
        "plot_files",
    }
