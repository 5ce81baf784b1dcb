"""The sweep's figures in one table: each one's name, report category and label.

The rules declare their outputs from it (``report()`` entries, with the caption
``workflow/report/<name>.rst``), and the figure writers name their files from it, so a figure
is added in one place: a row here, its caption file, and the function that draws it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Where the plots rule writes its figures.
PLOT_DIR = "results/plots"


@dataclass(frozen=True)
class Figure:
    """One figure of the report: ``<PLOT_DIR>/<name>.png``, captioned by ``<name>.rst``."""

    name: str
    category: str
    label: str

    @property
    def file(self) -> str:
        return f"{self.name}.png"

    @property
    def path(self) -> str:
        return f"{PLOT_DIR}/{self.file}"

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


def plots(tokens: bool) -> tuple[Figure, ...]:
    """The figures the plots rule writes for a sweep over token data or images."""
    return (TOKEN_PLOTS if tokens else ()) + PLOTS
