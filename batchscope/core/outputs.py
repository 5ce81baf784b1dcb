"""The sweep's figures in one table: each one's name, report category and label.

The rules declare their outputs from it (``report()`` entries, with the caption
``workflow/report/<name>.rst``), and the figure writers name their files from it, so a figure
is added in one place: a row here, its caption file, and the function that draws it: the plots
rule's (:func:`plots`), the scaling plot's (:data:`SCALING`), the recommend rule's
(:data:`ENERGY`) and the convergence report's (:data:`CONVERGENCE_FIGURES`, with its documents).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where the sweep's figures go.
PLOT_DIR = "results/plots"
#: Where the convergence report goes (its figures, documents and findings).
CONVERGENCE_DIR = "results/convergence"


@dataclass(frozen=True)
class Figure:
    """One figure of the report: ``<folder>/<name>.png``, captioned by ``<name>.rst``."""

    name: str
    category: str
    label: str
    folder: str = PLOT_DIR

    @property
    def file(self) -> str:
        """The file's name, which the figure writers save it as (in ``folder``)."""
        return f"{self.name}.png"

    @property
    def path(self) -> str:
        """The path a rule declares, relative to the working directory."""
        return f"{self.folder}/{self.file}"

    @property
    def caption(self) -> str:
        """The caption's path as a rule file gives it (relative to workflow/rules/)."""
        return f"../report/{self.name}.rst"


#: The plots rule's figures, every sweep's.
PLOTS = (
    Figure("throughput", "Throughput", "samples/s vs batch size"),
    Figure("peak_memory", "Memory", "peak memory vs batch size"),
    Figure("data_wait", "Input pipeline", "data wait share"),
    Figure("breakdown", "Input pipeline", "step time breakdown"),
    Figure("loss_curves", "Training", "loss curves"),
    Figure("val_accuracy", "Training", "validation accuracy"),
)
#: ... and a sweep over token data's: peak memory vs batch x sequence length.
TOKEN_PLOTS = (Figure("memory_tokens", "Memory", "peak memory vs tokens per step"),)


#: The scaling plot rule's, for a sweep over several ``devices`` values.
SCALING = Figure("scaling", "Throughput", "scaling with devices")
#: The recommend rule's: energy per sample against throughput (where no run measured energy,
#: a figure that says why).
ENERGY = Figure("energy", "Energy", "energy per sample vs throughput")


#: The convergence report's, for sweeps that train towards a target.
CONVERGENCE_FIGURES = tuple(
    Figure(name, "Convergence", label, CONVERGENCE_DIR)
    for name, label in (
        ("convergence_steps", "steps to target vs batch size"),
        ("convergence_loss_samples", "loss vs samples seen"),
        ("convergence_loss_time", "loss vs seconds"),
        ("convergence_noise_scale", "B_simple over training"),
    )
)
#: ... and its documents: Markdown, HTML and the findings (machine-readable).
CONVERGENCE_MARKDOWN = f"{CONVERGENCE_DIR}/convergence.md"
CONVERGENCE_HTML = f"{CONVERGENCE_DIR}/convergence.html"
CONVERGENCE_FINDINGS = f"{CONVERGENCE_DIR}/convergence.json"

#: Every figure, whichever rule writes it.
FIGURES = (*PLOTS, *TOKEN_PLOTS, SCALING, ENERGY, *CONVERGENCE_FIGURES)


def plots(tokens: bool) -> tuple[Figure, ...]:
    """The figures the plots rule writes for a sweep over token data or images."""
    return (TOKEN_PLOTS if tokens else ()) + PLOTS
