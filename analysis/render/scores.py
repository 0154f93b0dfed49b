"""The held-out figures: scores against samples drawn, and pass@k / cons@k against k per difficulty."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.data.arms import grid_keys, value_text
from analysis.data.checkpoints import BASE, FINAL
from analysis.data.labels import natural_sorted
from analysis.measures.at_k import saturated
from analysis.render.canvas import (
    MANY_ARMS,
    REFERENCE,
    REFERENCE_NOTE,
    UNIT_Y,
    arm_rows,
    colours_of,
    figure,
    fit_columns,
    legend_below,
    panel_title,
    report_order,
    save,
    share_block,
    small_multiples,
    styled,
)

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
    """Held-out scores against samples drawn (`heldout_figure`), written to `path`."""
    return save(heldout_figure(bands, arm, colours), path)


@styled
def heldout_figure(bands: pd.DataFrame, arm: Sequence[str], colours: Mapping[str, str] | None = None) -> Figure:
    """Held-out scores against samples drawn, one panel per (metric, k) (and in a grid, per level of its
    second key: `heldout_panels`): per arm the mean over seeds at each checkpoint (points joined by
    lines), the band from the lowest to the highest seed; `colours`: the report's colour of each arm. Past
    MANY_ARMS arms in a panel, their bands would merge into one mass: each arm gets a small panel of its own
    instead (`_heldout_small_multiples`)."""
    panels = heldout_panels(bands, arm, colours)
    if max((len(arms) for _, arms in panels), default=0) > MANY_ARMS:
        rank = {label: i for i, (label, _) in enumerate(report_order(list(arm_rows(bands, arm)), arm, colours))}
        return _heldout_small_multiples([(title, sorted(arms, key=lambda a: rank[a[0]])) for title, arms in panels])
    labels = list(dict.fromkeys(label for _, arms in panels for label, _, _ in arms))
    facets = len(panels) // len(set(zip(bands["metric"], bands["k"])))
    fig, axes = figure(len(panels), legend=labels, columns=facets if facets > 1 else 3)  # a grid: a row per metric
    entries: dict[str, Artist] = {}
    for ax, (title, arms) in zip(axes, panels):
        for label, colour, r in arms:
            entries[label] = _mean_and_band(ax, r, colour)
        _least_span(ax)
        ax.set(xlabel="samples drawn", ylabel="mean over prompts", title=title)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
    legend_below(fig, entries)
    return fig


def _heldout_small_multiples(panels: list[tuple[str, list[tuple[str, str, pd.DataFrame]]]]) -> Figure:
    """A block of small panels per (metric, k): the reference arm (a block's first: the report puts a declared
    baseline first) alone in its colour, then every other arm in its colour over the reference in grey, on one
    scale across the block."""
    labels = list(dict.fromkeys(label for _, arms in panels for label, _, _ in arms))
    fig, blocks = small_multiples([len(arms) for _, arms in panels], legend=labels, legend_title=SMALL_TITLE)
    entries: dict[str, Artist] = {}
    for (title, arms), axes in zip(panels, blocks):
        _, _, reference = arms[0]
        for i, ((label, colour, rows), ax) in enumerate(zip(arms, axes)):
            if i:
                ax.plot(reference["samples"], reference["mean"], **REFERENCE)
                ax.fill_between(reference["samples"], reference["low"], reference["high"], color=REFERENCE["color"],
                                alpha=0.15, linewidth=0)
            entries[label] = _mean_and_band(ax, rows, colour)
            ax.set_title(panel_title(label, reference=i == 0), fontsize="small")
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
            ax.grid(alpha=0.3)
        share_block(axes, title.removeprefix("held-out "), "samples drawn")
        for ax in axes:
            _least_span(ax)
    legend_below(fig, entries, title=SMALL_TITLE)
    return fig


SMALL_TITLE = f"mean over seeds, band: lowest to highest seed; {REFERENCE_NOTE}"


def _mean_and_band(ax: Axes, rows: pd.DataFrame, colour: str) -> Artist:
    """An arm's mean over seeds at each checkpoint (points joined by lines) and its lowest-to-highest band."""
    line, = ax.plot(rows["samples"], rows["mean"], "o-", color=colour, markersize=3)
    ax.fill_between(rows["samples"], rows["low"], rows["high"], color=colour, alpha=0.2, linewidth=0)
    return line


def _least_span(ax: Axes) -> None:
    """At least MIN_SPAN of y: autoscaled, a flat line's noise would fill the panel and read as a trend."""
    low, high = ax.get_ylim()
    if high - low < MIN_SPAN:
        # a score lies in [0, 1]: no negative ticks (their wider labels would push the axis title off)
        bottom = min(max((low + high) / 2 - MIN_SPAN / 2, -0.005), 1.005 - MIN_SPAN)
        ax.set_ylim(bottom, bottom + MIN_SPAN)


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
    """pass@k and cons@k against k per difficulty (`at_k_figure`), written to `path`."""
    return save(at_k_figure(curves, by, names, colours), path)


@styled
def at_k_figure(curves: pd.DataFrame, by: Sequence[str], names: dict[str, str] | None = None,
                colours: Mapping[str, str] | None = None) -> Figure:
    """pass@k (top row) and cons@k (bottom row) against k, one column of panels per difficulty and one
    for all prompts pooled ("all"); a colour per arm (`colours`: the report's), dashed at base and solid at
    final, with their intervals (one black base line when every arm's base is the same). More than
    AT_K_COLUMNS difficulties wrap onto further pairs of rows. Past MANY_ARMS arms, a row of small panels per
    arm instead (`_at_k_small_multiples`)."""
    shown = curves[curves["checkpoint"].isin([BASE, FINAL])]
    flat = set(saturated(shown))
    levels = natural_sorted(d for d in shown["difficulty"].astype(str).unique() if d != "all" and d not in flat)
    levels += ["all"] if (shown["difficulty"] == "all").any() else []
    arms = report_order(list(arm_rows(shown, by)), by, colours)
    base = [rows[rows["checkpoint"] == BASE] for _, rows in arms]
    base = [b for b in base if len(b)]
    # every arm's base the same numbers (one base model, one eval seed): one black line, not one hidden under another
    shared = len(base) > 1 and all(_same_curves(base[0], b) for b in base[1:])
    if len(arms) > MANY_ARMS:
        return _at_k_small_multiples(arms, colours_of(arms, by, colours), levels, shared, names)
    lines = []  # (label, colour, checkpoint, rows)
    if shared:
        lines.append((f"every arm, {_steps_label(BASE, '0')}", "k", BASE, base[0]))
    for (label, rows), colour in zip(arms, colours_of(arms, by, colours)):
        for checkpoint in (FINAL,) if shared else (BASE, FINAL):
            part = rows[rows["checkpoint"] == checkpoint]
            if len(part):
                lines.append((f"{label}, {_steps_label(checkpoint, part['steps'].iloc[0])}", colour, checkpoint,
                              part))
    columns = min(len(levels), fit_columns(AT_K_WIDTH, AT_K_COLUMNS))
    bands = math.ceil(len(levels) / columns)
    past = [(2 * (j // columns) + row) * columns + j % columns  # the panels past the last difficulty: blank
            for j in range(len(levels), bands * columns) for row in (0, 1)]
    fig, axes = figure(2 * bands * columns, width=AT_K_WIDTH, height=2.6, columns=columns,
                       legend=[s for s, *_ in lines], top=0.7, empty=past)  # two-line titles
    ks = sorted(shown["k"].unique())
    entries: dict[str, Artist] = {}
    panels = _by_panel([part for *_, part in lines])
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
            _k_axes(ax, ks)
            if row == 0:
                ax.set_title(_where(level, names).replace(" (", "\n("))
            if col == 0:
                ax.set_ylabel(metric)
            else:
                ax.tick_params(labelleft=False)
            if row == 1:
                ax.set_xlabel("k")
    legend_below(fig, entries)
    return fig


AT_K_WIDTH = 2.6  # inches a difficulty's panel takes: five side by side within MAX_WIDTH
METRIC_MARKERS = {"pass@k": {"marker": "o"}, "cons@k": {"marker": "s", "markerfacecolor": "white"}}


def _at_k_small_multiples(arms: list[tuple[str, pd.DataFrame]], colours: list[str], levels: list[str], shared: bool,
                          names: dict[str, str] | None) -> Figure:
    """A row of small panels per arm, a panel per difficulty, pass@k and cons@k (markers apart) of its final
    checkpoint; the reference arm (the first: the report puts a declared baseline first) in the first row with its
    base, and its finals grey and dashed in every other row."""
    finals = [rows[rows["checkpoint"] == FINAL] for _, rows in arms]
    reference_base = arms[0][1][arms[0][1]["checkpoint"] == BASE]
    base_label = (f"every arm, {_steps_label(BASE, '0')}" if shared else
                  f"{arms[0][0]}, {_steps_label(BASE, reference_base['steps'].iloc[0])}" if len(reference_base)
                  else None)
    labels = [f"{label}, {_steps_label(FINAL, part['steps'].iloc[0])}" if len(part) else label
              for (label, _), part in zip(arms, finals)]
    keys = ["pass@k", "cons@k", REFERENCE_LABEL, *([base_label] if base_label else [])]
    columns = min(len(levels), fit_columns(AT_K_WIDTH, AT_K_COLUMNS))
    bands = math.ceil(len(levels) / columns)
    blank = [(a * bands + j // columns) * columns + j % columns
             for a in range(len(arms)) for j in range(len(levels), bands * columns)]
    title = "final checkpoints, bands: 95% intervals" + (
        "; " + ", ".join(f"difficulty {level} = {names[level]}" for level in levels if level in (names or {}))
        if names else "")
    fig, axes = figure(len(arms) * bands * columns, width=AT_K_WIDTH, height=1.55, columns=columns,
                       legend=[*labels, *keys], legend_title=title, empty=blank)
    ks = sorted(finals[0]["k"].unique()) if len(finals[0]) else sorted(arms[0][1]["k"].unique())
    cells = _by_panel([*finals, reference_base])
    entries: dict[str, Artist] = {}
    for a, ((label, _), colour, panel, name) in enumerate(zip(arms, colours, cells, labels)):
        for j, level in enumerate(levels):
            band, col = divmod(j, columns)
            ax = axes[(a * bands + band) * columns + col]
            for metric, marker in METRIC_MARKERS.items():
                if a == 0 and len(reference_base) and (level, metric) in cells[-1]:
                    r = cells[-1][(level, metric)]
                    entries[base_label], = ax.plot(r["k"], r["mean"], color="k" if shared else colour,
                                                   linestyle=":", markersize=3, **marker)
                elif a and (level, metric) in cells[0]:
                    r = cells[0][(level, metric)]
                    entries[REFERENCE_LABEL], = ax.plot(r["k"], r["mean"], markersize=3, **REFERENCE, **marker)
                r = panel.get((level, metric))
                if r is None:
                    continue
                ax.plot(r["k"], r["mean"], color=colour, markersize=4, markeredgecolor=colour, linewidth=1.4, **marker)
                entries[name] = Line2D([], [], color=colour, linewidth=2)  # the markers: entries of their own
                ax.fill_between(r["k"], r["ci_low"], r["ci_high"], color=colour, alpha=0.15, linewidth=0)
            _k_axes(ax, ks)
            ax.set_title(f"{panel_title(label, reference=a == 0)}: {_where(level)}", fontsize="small")
            if col == 0:
                ax.set_ylabel("score")
            else:
                ax.tick_params(labelleft=False)
            if a < len(arms) - 1:
                ax.tick_params(labelbottom=False)
            else:
                ax.set_xlabel("k")
    for metric, marker in METRIC_MARKERS.items():
        entries[metric] = Line2D([], [], color="k", markersize=4, **marker)
    legend_below(fig, {key: entries[key] for key in [*labels, *keys] if key in entries}, title=title)
    return fig


REFERENCE_LABEL = "the reference arm's final (first row), in every other row"


def _by_panel(parts: Sequence[pd.DataFrame]) -> list[dict[tuple[str, str], pd.DataFrame]]:
    """Each part's rows of every (difficulty, metric) panel, in k order: split once, not filtered per panel."""
    return [{key: rows.sort_values("k") for key, rows in part.groupby(
        [part["difficulty"].astype(str), part["metric"]], observed=True, sort=False)} for part in parts]


def _k_axes(ax: Axes, ks: Sequence[int]) -> None:
    """k on a log2 axis, ticked at every k drawn; scores on [0, 1]."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, labels=[str(k) for k in ks])
    ax.minorticks_off()
    ax.set_ylim(*UNIT_Y)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
    ax.grid(alpha=0.3)


def _where(level: str, names: dict[str, str] | None = None) -> str:
    """ "all prompts", "difficulty 2", "difficulty 2 (2+1 digits)" where `names` says what it is."""
    name = (names or {}).get(level)
    return "all prompts" if level == "all" else f"difficulty {level}" + (f" ({name})" if name else "")
