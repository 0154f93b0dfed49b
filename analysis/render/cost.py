"""The cost figure: held-out pass@1 against each resource spent (updates, samples, generated tokens, FLOPs), one
panel a resource, each arm's mean over seeds at each checkpoint; the resource-to-target targets as dashed lines."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.data.arms import short_label
from analysis.data.resources import RESOURCES
from analysis.render.canvas import arm_colours, figure, legend_below, save, styled

MARKERS = ("o", "s", "^", "D", "v", "P", "X")


@styled
def cost(curves: pd.DataFrame, path: Path, goals: Mapping[str, float], colours: Mapping[str, str] | None = None
         ) -> Path:
    """`curves`: `cost.arm_curves` (arm, checkpoint, pass1 and each resource); a panel for each resource some
    arm recorded; `goals`: the targets (name -> pass@1), drawn as dashed lines; `colours`: the report's."""
    trained = curves[curves["checkpoint"] != "base"]
    shown = [r for r in RESOURCES if np.isfinite(trained[r].to_numpy(float)).any()]
    arms = list(dict.fromkeys(curves["arm"]))
    colours = dict(colours or arm_colours(arms))
    named = {a: a if short_label(a).replace(".", "", 1).isdigit() else short_label(a) for a in arms}  # "4": say what
    labels = list(named.values())
    fig, axes = figure(len(shown), width=4.0, height=3.2, columns=4, legend=labels)
    entries: dict[str, Artist] = {}
    for ax, resource in zip(axes, shown):
        for i, label in enumerate(arms):  # markers apart: arms equal in one resource draw one over the other
            r = curves[curves["arm"] == label].dropna(subset=[resource])
            entries[named[label]], = ax.plot(r[resource], r["pass1"], linestyle="-", marker=MARKERS[i % len(MARKERS)],
                                             markersize=4, color=colours.get(label, "#7f7f7f"), linewidth=1.2,
                                             markerfacecolor="none" if i % 2 else None)
        for value in goals.values():
            ax.axhline(value, color="#555555", linestyle="--", linewidth=0.8)
        ax.set(xlabel=RESOURCES[resource][1], title=f"against {RESOURCES[resource][1]}")
        if ax is axes[0]:  # one y label for the row: every panel has the same y
            ax.set_ylabel("held-out pass@1")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 5, 10]))  # no 0.025 steps: narrow labels
        ax.grid(alpha=0.3)
    legend_below(fig, entries)
    return save(fig, path)
