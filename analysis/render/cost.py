"""The cost figure: held-out pass@1 against each resource spent (updates, samples, generated tokens, FLOPs), one
panel a resource, each arm's mean over seeds at each checkpoint; the resource-to-target targets as dashed lines."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.data.arms import short_label
from analysis.data.resources import RESOURCES
from analysis.render.canvas import (
    MANY_ARMS,
    MAX_WIDTH,
    REFERENCE,
    REFERENCE_NOTE,
    arm_colours,
    figure,
    legend_below,
    panel_title,
    save,
    share_block,
    small_multiples,
    styled,
)

MARKERS = ("o", "s", "^", "D", "v", "P", "X")


@styled
def cost(curves: pd.DataFrame, path: Path, goals: Mapping[str, float], colours: Mapping[str, str] | None = None
         ) -> Path:
    """Held-out pass@1 against each resource (`cost_figure`), written to `path`."""
    return save(cost_figure(curves, goals, colours), path)


@styled
def cost_figure(curves: pd.DataFrame, goals: Mapping[str, float], colours: Mapping[str, str] | None = None
                ) -> Figure:
    """`curves`: `cost.arm_curves` (arm, checkpoint, pass1 and each resource); a panel for each resource some
    arm recorded; `goals`: the targets (name -> pass@1), drawn as dashed lines; `colours`: the report's. Past
    MANY_ARMS arms, a block of small panels per resource, a panel per arm over the reference arm (the report's
    first) in grey (`_cost_small_multiples`)."""
    trained = curves[curves["checkpoint"] != "base"]
    shown = [r for r in RESOURCES if np.isfinite(trained[r].to_numpy(float)).any()]
    arms = list(dict.fromkeys(curves["arm"]))
    if colours is not None:  # the report's order of arms: its first is the reference of the small panels
        order = {label: i for i, label in enumerate(colours)}
        arms.sort(key=lambda a: order.get(a, len(order)))
    colours = dict(colours or arm_colours(arms))
    named = {a: a if short_label(a).replace(".", "", 1).isdigit() else short_label(a) for a in arms}  # "4": say what
    if len(arms) > MANY_ARMS:
        return _cost_small_multiples(curves, shown, arms, colours, goals, named)
    labels = list(named.values())
    # four resources side by side within MAX_WIDTH: narrower panels rather than a second row
    fig, axes = figure(len(shown), width=min(4.0, MAX_WIDTH / max(len(shown), 1)), height=3.2, columns=4,
                       legend=labels)
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
    return fig


def _cost_small_multiples(curves: pd.DataFrame, shown: list[str], arms: list[str], colours: Mapping[str, str],
                          goals: Mapping[str, float], named: Mapping[str, str]) -> Figure:
    """A block of small panels per resource, a panel per arm (the reference first, alone in its colour) over the
    reference in grey, dashed; the targets dotted; one scale across a block."""
    fig, blocks = small_multiples([len(arms)] * len(shown), legend=[*named.values(), TARGET_LABEL],
                                  legend_title=REFERENCE_NOTE)
    entries: dict[str, Artist] = {}
    for resource, panels in zip(shown, blocks):
        reference = curves[curves["arm"] == arms[0]].dropna(subset=[resource])
        for i, (label, ax) in enumerate(zip(arms, panels)):
            if i:
                ax.plot(reference[resource], reference["pass1"], **REFERENCE)
            r = curves[curves["arm"] == label].dropna(subset=[resource])
            entries[named[label]], = ax.plot(r[resource], r["pass1"], "o-", markersize=3, linewidth=1.4,
                                             color=colours.get(label, "#7f7f7f"))
            for value in goals.values():
                entries[TARGET_LABEL] = ax.axhline(value, color="#555555", linestyle=":", linewidth=0.9)
            ax.set_title(panel_title(label, reference=i == 0), fontsize="small")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.grid(alpha=0.3)
        share_block(panels, "held-out pass@1", RESOURCES[resource][1])
    legend_below(fig, {key: entries[key] for key in [*named.values(), TARGET_LABEL] if key in entries},
                 title=REFERENCE_NOTE)
    return fig


TARGET_LABEL = "targets (resource to target)"
