"""A malformed config of each kind (YAML syntax, an unknown key, a wrong type, a bad value),
given to a copy of the finished base sweep: Snakemake must stop before any job with one line
naming the mistake, and with the config mended, have nothing to redo."""

from __future__ import annotations

from collections.abc import Callable

from faults.harness import Row, Suite, observe


def _yaml_syntax(text: str, config: dict) -> str:
    return text.replace("models:", "models: [small_cnn", 1)  # a flow list never closed


def _unknown_key(text: str, config: dict) -> dict:
    return {**config, "batch_szes": config["batch_sizes"]}


def _wrong_type(text: str, config: dict) -> dict:
    return {**config, "batch_sizes": "8, 16"}


def _bad_value(text: str, config: dict) -> dict:
    return {**config, "batch_sizes": [0, 16]}


#: case name -> (title, how the config is spoiled: a new text, or a new config to write)
MISTAKES: dict[str, tuple[str, Callable]] = {
    "config-yaml": ("config: YAML syntax error", _yaml_syntax),
    "config-unknown-key": ("config: unknown key (batch_szes)", _unknown_key),
    "config-wrong-type": ("config: wrong type (batch_sizes: '8, 16')", _wrong_type),
    "config-bad-value": ("config: bad value (batch_sizes: [0, 16])", _bad_value),
}


def malformed(suite: Suite, case: str) -> Row:
    title, spoil = MISTAKES[case]
    folder = suite.copy("single", case)
    good = folder.config.read_text()
    spoiled = spoil(good, suite.config("single"))
    if isinstance(spoiled, str):
        folder.config.write_text(spoiled)
    else:
        folder.write_config(spoiled)
    return observe(
        title, folder, lambda: folder.run("--cores", "2"), points=[],
        fix=lambda: folder.config.write_text(good), status="nothing (no job ran)",
    )  # fmt: skip


def _case(name: str) -> Callable[[Suite], Row]:
    return lambda suite: malformed(suite, name)


#: The cases of this family, by the name ``--cases`` takes.
CASES = {name: _case(name) for name in MISTAKES}
