"""The learning-from-ties figure: each arm's all-correct and all-wrong shares of the groups it drew,
over training against samples drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter

from analysis.render.canvas import UNIT_Y, arm_rows, colours_of, figure, legend_below, save, styled

KINDS = {"all_correct": "all-correct groups", "all_wrong": "all-wrong groups"}


@styled
def unanimous_over_training(shares: pd.DataFrame, path: Path, by: Sequence[str],
                            colours: Mapping[str, str] | None = None) -> Path:
    """Two panels (all-correct, all-wrong share of drawn groups), a line per arm through the middle of each
    window of samples drawn; bands: the seeds' 95% t interval. `colours`: the report's colour of each arm."""
    arms = list(arm_rows(shares, by))
    colour = colours_of(arms, by, colours)
    entries: dict[str, Artist] = {label: Line2D([], [], color=c, marker="o") for (label, _), c in zip(arms, colour)}
    fig, axes = figure(len(KINDS), width=4.6, height=3.4, columns=2, legend=list(entries))
    for ax, (kind, title) in zip(axes, KINDS.items()):
        for (_, rows), c in zip(arms, colour):
            x = (rows["samples_from"] + rows["samples_to"]).to_numpy(float) / 2
            ax.plot(x, rows[f"{kind}_share"], marker="o", color=c, linewidth=1.4, markersize=4)
            ax.fill_between(x, rows[f"{kind}_low"], rows[f"{kind}_high"], color=c, alpha=0.12, linewidth=0)
        ax.set(title=title, xlabel="samples drawn", ylabel="share of drawn groups", ylim=UNIT_Y)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
    legend_below(fig, entries)
    return save(fig, path)
