"""Curves against samples drawn: the equal-budget measures and the training-health panels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.data.arms import short_label
from analysis.measures.health import MISMATCH, flat_metrics, health_bands, many_jobs
from analysis.measures.health import PANELS as HEALTH_PANELS
from analysis.measures.health import POINTS as HEALTH_POINTS
from analysis.render.canvas import (
    MANY_ARMS,
    REFERENCE,
    REFERENCE_NOTE,
    arm_colour,
    arm_colours,
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

# the training accuracy panel is left out: the training-health figure's reward panel shows the same
BUDGET_METRICS = {"wasted_frac": "wasted fraction of samples drawn"}



@styled
def budget_curves(bands: pd.DataFrame, path: Path, arm: Sequence[str], budget: str,
                  colours: Mapping[str, str] | None = None) -> Path:
    """The equal-budget measures against the budget (`budget_figure`), written to `path`."""
    return save(budget_figure(bands, arm, budget, colours), path)


@styled
def budget_figure(bands: pd.DataFrame, arm: Sequence[str], budget: str,
                  colours: Mapping[str, str] | None = None) -> Figure:
    """Each metric against the budget: the mean over seeds per arm, the band from lowest to highest seed;
    `colours`: the report's colour of each arm (`canvas.report_colours`). Past MANY_ARMS arms, a small panel per
    arm over the reference arm (the report's first) in grey, one scale across a metric's panels."""
    arms = report_order(list(arm_rows(bands, arm)), arm, colours)
    colour = colours_of(arms, arm, colours)
    labels = [label for label, _ in arms]
    many = len(arms) > MANY_ARMS
    if many:
        fig, blocks = small_multiples([len(arms)] * len(BUDGET_METRICS), legend=labels, legend_title=SMALL_TITLE)
    else:
        fig, axes = figure(len(BUDGET_METRICS), width=6.4 if len(BUDGET_METRICS) == 1 else 4.2, height=3.6,
                           legend=labels)
        blocks = [[ax] * len(arms) for ax in axes]  # every arm on the metric's one panel
    entries: dict[str, Artist] = {}
    for (metric, title), panels in zip(BUDGET_METRICS.items(), blocks):
        reference = arms[0][1]
        for i, ((label, rows), c, ax) in enumerate(zip(arms, colour, panels)):
            if many and i:
                ax.plot(reference["budget"], reference[metric], **REFERENCE)
            entries[label], = ax.plot(rows["budget"], rows[metric], color=c)
            low, high = rows[f"{metric}_low"], rows[f"{metric}_high"]
            ax.fill_between(rows["budget"], low, high, color=c, alpha=0.2, linewidth=0)
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 40k, 1.2M: short tick labels at any budget
            ax.grid(alpha=0.3)
            if many:
                ax.set_title(panel_title(label, reference=i == 0), fontsize="small")
                ax.xaxis.set_major_locator(MaxNLocator(nbins=3))
        if many:
            share_block(panels, title.split(" of ")[0], f"{budget} drawn")
        else:
            panels[0].set(xlabel=f"{budget} drawn", ylabel=title.split(" of ")[0], title=title)
    legend_below(fig, entries, title=SMALL_TITLE if many else None)
    return fig


SMALL_TITLE = f"mean over seeds, band: lowest to highest seed; {REFERENCE_NOTE}"


SPIKE_LABEL = "spike past the axis (its value)"


@styled
def health(curves: pd.DataFrame, path: Path, points: int = HEALTH_POINTS,
           colours: Mapping[str, str] | None = None, spikes: pd.DataFrame | None = None,
           tops: Mapping[str, float] | None = None) -> Path:
    """The training-health figure from `analysis.health.health_curves`: a panel per metric (but
    `flat_metrics`), a colour per arm (`colours`: the report's, by the arm labels of `curves["arm"]`); a line
    per job, or with `many_jobs` each arm's mean and lowest-to-highest band on a common samples grid. `tops`: a
    metric's axis top where spikes would set it (`measures.health.axis_tops`); each spike past it (`spikes`:
    `measures.health.spikes`) is a triangle in its arm's colour at the top edge, at its samples drawn, with its
    value."""
    present = set(curves["metric"].unique())  # not a set of every row's string
    metrics = [m for m in HEALTH_PANELS if m in present and m not in flat_metrics(curves)]
    arms = list(curves["arm"].unique())  # in order of appearance
    colours = arm_colours(arms) if colours is None else colours
    jobs = curves.groupby("arm", sort=False)["job"].nunique()
    banded = many_jobs(curves)
    bands = health_bands(curves) if banded else None
    labels = [f"{short_label(a)} ({jobs[a]} job{'s' if jobs[a] != 1 else ''})" for a in arms]
    title = (("mean over jobs, band: lowest to highest job" if banded else "one line per job")
             + f"; rolling mean over 1/{points} of each job's steps")
    past = spikes is not None and any(((spikes["metric"] == m) & (spikes["value"] > top)).any()
                                      for m, top in (tops or {}).items() if m in metrics)
    fig, axes = figure(len(metrics), width=4.4, height=3.3, columns=2 if len(metrics) == 4 else 3,
                       legend=[*labels, *([SPIKE_LABEL] if past else [])], legend_title=title)
    entries: dict[str, Artist] = {}
    for ax, metric in zip(axes, metrics):
        for name, label in zip(arms, labels):
            colour = arm_colour(colours, name)
            if banded:
                b = bands[(bands["arm"] == name) & (bands["metric"] == metric)]
                entries[label], = ax.plot(b["samples_total"], b["mean"], color=colour, lw=1.6)
                ax.fill_between(b["samples_total"], b["low"], b["high"], color=colour, alpha=0.15, linewidth=0)
            else:
                part = curves[(curves["arm"] == name) & (curves["metric"] == metric)]
                for _, line in part.groupby("job", sort=False):
                    entries[label], = ax.plot(line["samples_total"], line["value"], color=colour, lw=1.4, alpha=0.8)
        ax.set(title=HEALTH_PANELS[metric], xlabel="samples drawn")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        if metric in ("clip_frac", "tie_frac", *MISMATCH):  # shares and sizes: their zero is the reference
            ax.set_ylim(bottom=0)
        if metric == "tie_frac":
            ax.set_ylim(top=1.02)
        if tops and metric in tops:
            _mark_spikes(ax, tops[metric], spikes[spikes["metric"] == metric] if spikes is not None else None,
                         colours, entries)
    legend_below(fig, entries, title=title)
    return save(fig, path)



def _mark_spikes(ax, top: float, spikes: pd.DataFrame | None, colours: Mapping[str, str],
                 entries: dict[str, Artist]) -> None:
    """The panel cut at `top`, each spike past it a triangle at the edge (its arm's colour) with its value."""
    low = ax.get_ylim()[0]  # autoscaled to the spike: below a positive quantity's zero by a twentieth of it
    ax.set_ylim(bottom=max(low, -0.04 * top), top=top)
    if spikes is None:
        return
    past = spikes[spikes["value"] > top].sort_values("samples_total", kind="stable")
    span = max(float(curves_span(ax)), 1e-12)
    previous, level = None, 0
    for r in past.itertuples(index=False):
        ax.plot([r.samples_total], [top], marker="^", color=arm_colour(colours, r.arm), markeredgecolor="k",
                markersize=7, clip_on=False, zorder=6, linestyle="none")
        # labels of spikes close together step down, so none covers another
        level = level + 1 if previous is not None and r.samples_total - previous < 0.08 * span else 0
        previous = r.samples_total
        ax.annotate(f"{r.value:.3g}", (r.samples_total, top), xytext=(6, -3 - 10 * level), textcoords="offset points",
                    ha="left", va="top", fontsize="x-small", zorder=6,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.8})
    if len(past):
        entries[SPIKE_LABEL] = Line2D([], [], marker="^", color="0.5", markeredgecolor="k", markersize=7,
                                      linestyle="none")


def curves_span(ax) -> float:
    """The width of a panel's x range, in data units."""
    low, high = ax.get_xlim()
    return high - low
