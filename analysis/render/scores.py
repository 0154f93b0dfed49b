"""The held-out figures: scores against samples drawn, and pass@k / cons@k against k per difficulty."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.ticker import EngFormatter

from analysis.data.arms import grid_keys, value_text
from analysis.data.checkpoints import BASE, FINAL
from analysis.data.labels import natural_sorted
from analysis.measures.at_k import saturated
from analysis.render.canvas import UNIT_Y, arm_rows, colours_of, figure, legend_below, save, styled

AT_K_COLUMNS = 5  # difficulties side by side in the pass@k / cons@k figure before it wraps
MIN_SPAN = 0.1  # the least y range of a held-out score panel



def heldout_panels(bands: pd.DataFrame, arm: Sequence[str], colours: Mapping[str, str] | None = None
                   ) -> list[tuple[str, list[tuple[str, str, pd.DataFrame]]]]:
    """The held-out figure's panels: (title, [(arm label, colour, rows)]) per (metric, k), and in a two-key
    grid (`grid_keys`) per (metric, k) and level of the second key, each panel holding the arms at that level
    only (what the report compares). `colours`: the report's colour of each arm (`canvas.report_colours`)."""
    metrics = list(dict.fromkeys(zip(bands["metric"], bands["k"])))
    arms = list(arm_rows(bands, arm))
    coloured = [(label, colour, rows) for (label, rows), colour in zip(arms, colours_of(arms, arm, colours))]
    grid = grid_keys(bands, arm)
    if grid is None:
        facets = [("", coloured)]
    else:
        within = grid[1]
        level = [value_text(rows[within].iloc[0]) for _, _, rows in coloured]
        facets = [(f", {within}={value}", [c for c, at in zip(coloured, level) if at == value])
                  for value in dict.fromkeys(level)]
    return [(f"held-out {metric.replace('@k', f'@{k}')}{facet}",
             [(label, colour, rows[(rows["metric"] == metric) & (rows["k"] == k)].sort_values("samples"))
              for label, colour, rows in shown])
            for metric, k in metrics for facet, shown in facets]


@styled
def heldout(bands: pd.DataFrame, path: Path, arm: Sequence[str], colours: Mapping[str, str] | None = None) -> Path:
    """Held-out scores against samples drawn, one panel per (metric, k) (and in a grid, per level of its
    second key: `heldout_panels`): per arm the mean over seeds at each checkpoint (points joined by
    lines), the band from the lowest to the highest seed; `colours`: the report's colour of each arm."""
    panels = heldout_panels(bands, arm, colours)
    labels = list(dict.fromkeys(label for _, arms in panels for label, _, _ in arms))
    facets = len(panels) // len(set(zip(bands["metric"], bands["k"])))
    fig, axes = figure(len(panels), legend=labels, columns=facets if facets > 1 else 3)  # a grid: a row per metric
    entries: dict[str, Artist] = {}
    for ax, (title, arms) in zip(axes, panels):
        for label, colour, r in arms:
            entries[label], = ax.plot(r["samples"], r["mean"], "o-", color=colour, markersize=3)
            ax.fill_between(r["samples"], r["low"], r["high"], color=colour, alpha=0.2, linewidth=0)
        low, high = ax.get_ylim()
        if high - low < MIN_SPAN:  # autoscaled, a flat line's noise would fill the panel and read as a trend
            # a score lies in [0, 1]: no negative ticks (their wider labels would push the axis title off)
            bottom = min(max((low + high) / 2 - MIN_SPAN / 2, -0.005), 1.005 - MIN_SPAN)
            ax.set_ylim(bottom, bottom + MIN_SPAN)
        ax.set(xlabel="samples drawn", ylabel="mean over prompts", title=title)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
    legend_below(fig, entries)
    return save(fig, path)


def _steps_label(checkpoint: str, steps: str) -> str:
    """ "final (steps 80, 83)", "final (step 100)", "base (step 0)"."""
    unique = list(dict.fromkeys(s.strip() for s in str(steps).split(",")))
    return f"{checkpoint} (step{'s' if len(unique) > 1 else ''} {', '.join(unique)})"


def _same_curves(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two arms' at-k rows hold the same means and intervals at every difficulty, metric and k."""
    keys, values = ["difficulty", "metric", "k"], ["mean", "ci_low", "ci_high"]
    a, b = (frame.astype({"difficulty": str}).set_index(keys)[values].sort_index() for frame in (a, b))
    return a.index.equals(b.index) and np.allclose(a.to_numpy(), b.to_numpy(),
                                                   rtol=0, atol=1e-9)  # summed in another order


@styled
def at_k(curves: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None,
         colours: Mapping[str, str] | None = None) -> Path:
    """pass@k (top row) and cons@k (bottom row) against k, one column of panels per difficulty and one
    for all prompts pooled ("all"); a colour per arm (`colours`: the report's), dashed at base and solid at
    final, with their intervals (one black base line when every arm's base is the same). More than
    AT_K_COLUMNS difficulties wrap onto further pairs of rows."""
    shown = curves[curves["checkpoint"].isin([BASE, FINAL])]
    flat = set(saturated(shown))
    levels = natural_sorted(d for d in shown["difficulty"].astype(str).unique() if d != "all" and d not in flat)
    levels += ["all"] if (shown["difficulty"] == "all").any() else []
    arms = list(arm_rows(shown, by))
    base = [rows[rows["checkpoint"] == BASE] for _, rows in arms]
    base = [b for b in base if len(b)]
    # every arm's base the same numbers (one base model, one eval seed): one black line, not one hidden under another
    shared = len(base) > 1 and all(_same_curves(base[0], b) for b in base[1:])
    lines = []  # (label, colour, checkpoint, rows)
    if shared:
        lines.append((f"every arm, {_steps_label(BASE, '0')}", "k", BASE, base[0]))
    for (label, rows), colour in zip(arms, colours_of(arms, by, colours)):
        for checkpoint in (FINAL,) if shared else (BASE, FINAL):
            part = rows[rows["checkpoint"] == checkpoint]
            if len(part):
                lines.append((f"{label}, {_steps_label(checkpoint, part['steps'].iloc[0])}", colour, checkpoint,
                              part))
    columns = min(len(levels), AT_K_COLUMNS)
    bands = math.ceil(len(levels) / columns)
    past = [(2 * (j // columns) + row) * columns + j % columns  # the panels past the last difficulty: blank
            for j in range(len(levels), bands * columns) for row in (0, 1)]
    fig, axes = figure(2 * bands * columns, width=3.0, height=2.6, columns=columns, legend=[s for s, *_ in lines],
                       top=0.7, empty=past)  # two-line titles
    ks = sorted(shown["k"].unique())
    entries: dict[str, Artist] = {}
    # each line's rows of every (difficulty, metric) panel, in k order: split once, not filtered per panel
    panels = [{key: rows.sort_values("k") for key, rows in part.groupby(
        [part["difficulty"].astype(str), part["metric"]], observed=True, sort=False)} for *_, part in lines]
    for j, level in enumerate(levels):
        band, col = divmod(j, columns)
        for row, metric in enumerate(("pass@k", "cons@k")):
            ax = axes[(2 * band + row) * columns + col]
            for (label, colour, checkpoint, _), cells in zip(lines, panels):
                r = cells.get((level, metric))
                if r is None:
                    continue
                final = checkpoint == FINAL
                entries[label], = ax.plot(r["k"], r["mean"], color=colour, linestyle="-" if final else "--",
                                          marker="o" if final else "s", markersize=4 if final else 3,
                                          markerfacecolor=colour if final else "none")
                if final:  # the base band would only blur the finals' (the differences are in the forest plot)
                    ax.fill_between(r["k"], r["ci_low"], r["ci_high"], color=colour, alpha=0.12, linewidth=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, labels=[str(k) for k in ks])
            ax.minorticks_off()
            ax.set_ylim(*UNIT_Y)
            ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
            ax.grid(alpha=0.3)
            name = (names or {}).get(level)
            where = "all prompts" if level == "all" else f"difficulty {level}" + (f" ({name})" if name else "")
            if row == 0:
                ax.set_title(where.replace(" (", "\n("))
            if col == 0:
                ax.set_ylabel(metric)
            else:
                ax.tick_params(labelleft=False)
            if row == 1:
                ax.set_xlabel("k")
    legend_below(fig, entries)
    return save(fig, path)

