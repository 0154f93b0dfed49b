"""Intervals drawn as rows: the forest of arm differences under the tests, and the ranking panels."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.data.arms import short_label
from analysis.render.canvas import MAX_WIDTH, fit_columns, interval_row, save, styled
from analysis.render.markdown import p_value


def _p_note(row: pd.Series) -> str:
    """The test's p as adjusted: Holm's where its family holds several tests, plain where one."""
    if pd.isna(row["p_holm"]):
        return "no test"
    return f"{'Holm p' if row.get('family', 2) > 1 else 'p'} = {p_value(row['p_holm'])}"  # as the Findings print it


@styled
def forest(tests: pd.DataFrame, path: Path, detectable: Sequence[bool]) -> Path:
    """Arm differences b − a with their 95% intervals, one row per comparison of the report's tests
    table (metric, a, b, difference, ci_low, ci_high, p_holm); a filled dot where the comparison is a
    detectable difference (`detectable`, as the findings decide), hollow where not; 0 dashed. With
    several pairs of arms, one panel per metric (`_forest_panels`)."""
    pairs = tests[["a", "b"]].astype(str).drop_duplicates()
    if len(pairs) > 1:
        return _forest_panels(tests, path, detectable)
    labels = tests["metric"].astype(str).tolist()
    height = 0.55 * len(tests) + 1.2
    left = 0.4 + 0.08 * max(len(label) for label in labels)  # inches for the labels
    width = left + max(2.5, min(5.0, MAX_WIDTH - left - 1.5)) + 1.5  # labels, the axis (narrower past MAX_WIDTH), p
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left / width, right=1 - 1.5 / width, top=1 - 0.35 / height, bottom=0.75 / height)
    ax = fig.subplots()
    y = np.arange(len(tests))[::-1]
    for yi, (_, row), strong in zip(y, tests.iterrows(), detectable):
        interval_row(ax, yi, row["ci_low"], row["ci_high"], row["difference"], _p_note(row), strong,
                      size=8)
    ax.axvline(0, color="0.4", linestyle="--", linewidth=1)
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.6, len(tests) - 0.4)
    ax.set_xlabel(f"difference b − a: {pairs['b'].iloc[0]} − {pairs['a'].iloc[0]}\n(filled: detectable; hollow: not)")
    ax.grid(alpha=0.3, axis="x")
    return save(fig, path)


def _forest_panels(tests: pd.DataFrame, path: Path, detectable: Sequence[bool]) -> Path:
    """`forest` for several pairs of arms: one panel per metric on its own scale (a pass@1 difference of
    0.01 and a wasted-fraction one of 0.3 share no axis), a row per pair "b − a", the p beside it."""
    tests = tests.assign(_detectable=list(detectable), _pair=[
        f"{short_label(b)} − {short_label(a)}" for a, b in zip(tests["a"].astype(str), tests["b"].astype(str))])
    metrics = list(dict.fromkeys(tests["metric"]))
    pairs = list(dict.fromkeys(tests["_pair"]))
    left = 0.3 + 0.085 * max(len(p) for p in pairs)  # inches for the pair labels
    pad = 1.3  # the p column right of each panel
    # two panels side by side while each keeps an axis of 2.6 inches within MAX_WIDTH, else one a row
    columns = 2 if len(metrics) > 1 and 2 * (left + 2.6 + pad) <= MAX_WIDTH else 1
    rows = math.ceil(len(metrics) / columns)
    panel_w = max(2.6, min(3.4, MAX_WIDTH / columns - left - pad))
    panel_h = 0.42 * len(pairs) + 0.9
    width = columns * (left + panel_w + pad)
    height = rows * panel_h + 0.4
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    for i, metric in enumerate(metrics):
        row, col = divmod(i, columns)
        ax = fig.add_axes(((col * (left + panel_w + pad) + left) / width,
                           (height - (row + 1) * panel_h + 0.55) / height, panel_w / width, (panel_h - 0.95) / height))
        part = tests[tests["metric"] == metric].set_index("_pair").reindex(pairs)
        y = np.arange(len(pairs))[::-1]
        for yi, (_, r) in zip(y, part.iterrows()):
            if pd.isna(r["difference"]):
                continue
            interval_row(ax, yi, r["ci_low"], r["ci_high"], r["difference"], _p_note(r),
                          r["_detectable"], fontsize="x-small")
        ax.axvline(0, color="0.4", linestyle="--", linewidth=1)
        ax.set_yticks(y, pairs)
        ax.set_ylim(-0.6, len(pairs) - 0.4)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel("difference b − a", fontsize="small")
        ax.grid(alpha=0.3, axis="x")
    return save(fig, path)


@styled
def ranking(rankings: Sequence, path: Path) -> Path:
    """One panel per ranked measure (`analysis.ranking.Ranking`): each arm's mean with its 95% interval,
    best at the top, and the ranks it can hold given the resolved orderings at the right."""
    n = max(len(r.table) for r in rankings)
    labels = [short_label(a) for r in rankings for a in r.table["arm"]]
    left = 0.3 + 0.085 * max(len(a) for a in labels)  # inches for the arm names
    panel, gap, right = 3.6, 0.9, 0.25
    columns = fit_columns(left + panel + gap, len(rankings))  # more measures: a second row, never wider
    rows = math.ceil(len(rankings) / columns)
    width = columns * (left + panel + gap) + right
    block = 0.42 * n + 1.5  # one row of panels
    height = rows * block
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    for i, r in enumerate(rankings):
        row_at, col = divmod(i, columns)
        x0 = (col * (left + panel + gap) + left) / width
        ax = fig.add_axes((x0, ((rows - 1 - row_at) * block + 0.9) / height, panel / width, (block - 1.35) / height))
        table = r.table
        y = np.arange(len(table))[::-1]
        for yi, (_, row) in zip(y, table.iterrows()):
            interval_row(ax, yi, row["ci_low"], row["ci_high"], row["mean"],
                         f"{'ranks' if '–' in str(row['ranks']) else 'rank'} {row['ranks']}")
        ax.set_yticks(y, [short_label(a) for a in table["arm"]])
        ax.set_ylim(-0.6, len(table) - 0.4)
        ax.set_title(f"{r.measure}\n({len(r.resolved)} of {r.pairs} orderings resolved)", fontsize="medium")
        ax.set_xlabel(f"mean, 95% interval over {r.interval}")
        ax.grid(alpha=0.3, axis="x")
    return save(fig, path)

