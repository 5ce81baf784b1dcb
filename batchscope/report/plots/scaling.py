"""How throughput scales with devices (the ``devices`` axis): ``results/plots/scaling.png``.

Per mode × model (× accumulation steps), two panels side by side: the throughput of the whole
run (samples/s over every device; the median over a point's ok runs) and the scaling
efficiency, throughput(N) / (N × throughput(1)), against the devices, one line per batch size
(per device) × workers, with the ideal (N × the one-device throughput; 1) dashed. Drawn from
``summary_by_point.csv`` only when the sweep has more than one devices value::

    python -m batchscope.report.plots.scaling --by-point results/summary_by_point.csv \\
        --output results/plots/scaling.png
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from batchscope.report.figures import placeholder_figure, save_png, subplots
from batchscope.report.summary import result_files

#: One pair of panels per distinct value of these.
GROUP_KEYS = ["mode", "model", "dataset", "accumulation_steps"]
NO_SCALING = "one devices value in this sweep: nothing to scale"


def scaling_figure(by_point: pd.DataFrame) -> Figure:
    """Throughput and scaling efficiency against devices (see the module's docstring)."""
    points = result_files.with_grid_defaults(by_point)
    points = points[pd.to_numeric(points["samples_per_s_median"]).notna()]
    if points.empty or points["devices"].nunique() < 2:
        return placeholder_figure(NO_SCALING, "Scaling with devices")
    groups = list(points.groupby(GROUP_KEYS, sort=True, dropna=False))
    fig, axes = subplots(2 * len(groups), max_cols=2)
    for index, (key, rows) in enumerate(groups):
        mode, model, dataset, accumulation = key
        title = f"{mode} / {model} ({dataset})"
        if accumulation != 1:
            title += f", {int(accumulation)} accumulation steps"
        speed, efficiency = axes[2 * index], axes[2 * index + 1]
        for (batch, workers), line in rows.groupby(["batch_size", "num_workers"], sort=True):
            line = line.sort_values("devices")
            label = f"batch {int(batch)}/device, {int(workers)} workers"
            drawn = speed.plot(
                line["devices"], line["samples_per_s_median"], marker="o", label=label
            )[0]
            one = line.loc[line["devices"] == 1, "samples_per_s_median"]
            if len(one):
                ideal = line["devices"] * float(one.iloc[0])
                speed.plot(line["devices"], ideal, linestyle="--", color=drawn.get_color())
            known = line[pd.to_numeric(line["scaling_efficiency"]).notna()]
            efficiency.plot(
                known["devices"], known["scaling_efficiency"], marker="o", label=label,
                color=drawn.get_color(),
            )  # fmt: skip
        ticks = sorted(int(d) for d in rows["devices"].unique())
        speed.set(title=f"{title}\nthroughput", xlabel="devices", ylabel="samples/s")
        efficiency.set(
            title=f"{title}\nscaling efficiency", xlabel="devices",
            ylabel="throughput / (devices x one device's)",
        )  # fmt: skip
        efficiency.axhline(1.0, linestyle="--", color="grey", linewidth=1)
        for ax in (speed, efficiency):
            ax.set_xticks(ticks)
        speed.legend(fontsize="small", title="dashed: ideal", title_fontsize="small")
    return fig


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchscope.report.plots.scaling", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--by-point", required=True, help="summary_by_point CSV")
    parser.add_argument("--output", required=True, help="the PNG")
    args = parser.parse_args(argv)
    fig = scaling_figure(pd.read_csv(args.by_point))
    save_png(fig, args.output)
    plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
