"""The learning-from-ties figure: each arm's all-correct and all-wrong shares of the groups it drew,
over training against samples drawn."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.render.canvas import (
    MANY_ARMS,
    REFERENCE,
    REFERENCE_NOTE,
    UNIT_Y,
    arm_rows,
    colours_of,
    figure,
    legend_below,
    panel_title,
    report_order,
    save,
    share_block,
    small_multiples,
    styled,
)

KINDS = {"all_correct": "all-correct groups", "all_wrong": "all-wrong groups"}


@styled
def unanimous_over_training(shares: pd.DataFrame, path: Path, by: Sequence[str],
                            colours: Mapping[str, str] | None = None) -> Path:
    """The all-correct and all-wrong shares over training (`unanimous_figure`), written to `path`."""
    return save(unanimous_figure(shares, by, colours), path)


@styled
def unanimous_figure(shares: pd.DataFrame, by: Sequence[str], colours: Mapping[str, str] | None = None) -> Figure:
    """Two panels (all-correct, all-wrong share of drawn groups), a line per arm through the middle of each
    window of samples drawn; bands: the seeds' 95% t interval. `colours`: the report's colour of each arm. Past
    MANY_ARMS arms, a block of small panels per share, a panel per arm over the reference arm (the report's first)
    in grey, one scale across a block."""
    arms = report_order(list(arm_rows(shares, by)), by, colours)
    colour = colours_of(arms, by, colours)
    entries: dict[str, Artist] = {label: Line2D([], [], color=c, marker="o") for (label, _), c in zip(arms, colour)}
    many = len(arms) > MANY_ARMS
    if many:
        fig, blocks = small_multiples([len(arms)] * len(KINDS), legend=list(entries), legend_title=SMALL_TITLE)
    else:
        fig, axes = figure(len(KINDS), width=4.6, height=3.4, columns=2, legend=list(entries))
        blocks = [[ax] * len(arms) for ax in axes]  # every arm on the share's one panel
    for (kind, title), panels in zip(KINDS.items(), blocks):
        middle = [(rows["samples_from"] + rows["samples_to"]).to_numpy(float) / 2 for _, rows in arms]
        for i, ((label, rows), c, x, ax) in enumerate(zip(arms, colour, middle, panels)):
            if many and i:
                ax.plot(middle[0], arms[0][1][f"{kind}_share"], **REFERENCE)
            ax.plot(x, rows[f"{kind}_share"], marker="o", color=c, linewidth=1.4, markersize=4 if not many else 3)
            ax.fill_between(x, rows[f"{kind}_low"], rows[f"{kind}_high"], color=c, alpha=0.12 if not many else 0.2,
                            linewidth=0)
            ax.set_ylim(*UNIT_Y)
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.grid(alpha=0.3)
            if many:
                ax.set_title(panel_title(label, reference=i == 0), fontsize="small")
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        if many:
            share_block(panels, f"{title.removesuffix(' groups')} share", "samples drawn")
        else:
            panels[0].set(title=title, xlabel="samples drawn", ylabel="share of drawn groups")
    legend_below(fig, entries, title=SMALL_TITLE if many else None)
    return fig


SMALL_TITLE = f"bands: the seeds' 95% t interval; {REFERENCE_NOTE}"
