"""The report's figures, drawn with matplotlib's object API onto Agg canvases (no pyplot, no
display, no global state), each from one of the analysis tables.

Legends go below the panels, outside the data; lines of one arm (or one difficulty) keep one
colour in every panel; labels name only the keys that vary within the figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from analysis.arms import arm_label
from analysis.budget import BASE, FINAL
from analysis.labels import natural_sorted

BUDGET_METRICS = {"wasted_frac": "wasted fraction of samples drawn",
                  "train_accuracy_round0": "training accuracy, first rounds (window)"}
AT_K_COLUMNS = 6  # difficulties side by side in the pass@k / cons@k figure before it wraps
LEGEND_ROW = 0.22  # inches per legend row (fontsize "small")
CHAR_WIDTH = 0.065  # inches per legend character (fontsize "small"), for laying out its columns
HANDLE_WIDTH = 0.75  # inches a legend entry takes besides its text
UNIT_Y = (-0.03, 1.03)  # y limits of a fraction: 0 and 1 stay clear of the frame


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _legend_shape(labels: Sequence[str], width: float, title: bool = False) -> tuple[int, int]:
    """(columns, rows) of a legend of `labels` across a figure `width` inches wide."""
    entry = HANDLE_WIDTH + CHAR_WIDTH * max((len(s) for s in labels), default=0)
    columns = max(1, min(len(labels), int((width - 0.3) // entry)))
    return columns, math.ceil(len(labels) / columns) + int(title)


def _figure(panels: int, width: float = 4.2, height: float = 3.2, columns: int = 3,
            legend: Sequence[str] = (), legend_title: str | None = None) -> tuple[Figure, list[Axes]]:
    """A figure of `panels` axes, `columns` to a row, each panel `width` x `height` inches, with
    room below the panels for a legend of the `legend` labels (see `_legend_below`)."""
    cols = min(panels, columns)
    rows = math.ceil(panels / cols)
    fig_width = width * cols
    legend_rows = _legend_shape(legend, fig_width, legend_title is not None)[1] if legend else 0
    below = legend_rows * LEGEND_ROW + (0.15 if legend_rows else 0.0)  # inches under the x labels
    fig_height = height * rows + below
    fig = Figure(figsize=(fig_width, fig_height))
    FigureCanvasAgg(fig)
    # fixed margins in inches rather than a layout engine: half the drawing time on a large report
    fig.subplots_adjust(left=0.7 / fig_width, right=1 - 0.15 / fig_width, bottom=(0.55 + below) / fig_height,
                        top=1 - 0.35 / fig_height, wspace=0.3, hspace=0.5)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, list(axes[:panels])


def _legend_below(fig: Figure, entries: dict[str, Artist], title: str | None = None) -> None:
    """One legend for the whole figure, centred under the panels (where `_figure` left room)."""
    if not entries:
        return
    columns, _ = _legend_shape(list(entries), fig.get_figwidth(), title is not None)
    fig.legend(list(entries.values()), list(entries), loc="lower center", bbox_to_anchor=(0.5, 0.0),
               ncol=columns, fontsize="small", title=title, title_fontsize="small", frameon=False,
               borderaxespad=0.3)


def _arms(frame: pd.DataFrame, by: Sequence[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows) of each arm, in order of first appearance; the label names only the keys that
    vary in `frame` (all of them when none does), so a constant key does not crowd every legend."""
    keys = list(by)
    varying = [k for k in keys if frame[k].astype(str).nunique() > 1] or keys
    for values, rows in frame.groupby(keys, observed=True, dropna=False, sort=False):
        named = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        yield arm_label({k: named[k] for k in varying}), rows


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, pil_kwargs={"compress_level": 1})  # fast zlib: the figures stay small
    return path


def ties_by_difficulty(ties: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """Observed tie fraction per difficulty with its interval (points), predicted (dashed line), a
    colour per arm; the legend names each arm once and the two marks once."""
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(_arms(ties, by))
    marks = ["observed (95% interval)", "predicted p^G + (1-p)^G"]
    labels = [label for label, _ in arms] + marks
    columns = 2 if len(arms) > 4 else 1  # many arms: a wider figure, so the legend takes two columns
    width = max(6.4, 0.9 * len(levels), columns * (HANDLE_WIDTH + CHAR_WIDTH * max(map(len, labels))) + 0.3)
    fig, (ax,) = _figure(1, width=width, height=4.0, legend=labels)
    entries: dict[str, Artist] = {}
    for i, (label, rows) in enumerate(arms):
        x = np.array([levels.index(d) for d in rows["difficulty"].astype(str)])
        shift = (i - (len(arms) - 1) / 2) * min(0.08, 0.6 / len(arms))  # side by side, so the bars stay apart
        err = np.vstack([rows["tie_frac"] - rows["ci_low"], rows["ci_high"] - rows["tie_frac"]])
        entries[label] = ax.errorbar(x + shift, rows["tie_frac"], yerr=err, fmt="o", capsize=3, color=_colour(i))
        ax.plot(x + shift, rows["predicted_tie_frac"], "--", color=_colour(i))
    entries[marks[0]] = ax.errorbar([], [], yerr=[], fmt="o", capsize=3, color="k")
    entries[marks[1]], = ax.plot([], [], "--", color="k")
    ax.set(xticks=range(len(levels)), xlabel="difficulty", ylabel="tie fraction", ylim=UNIT_Y)
    long = max((len(s) for s in levels), default=0) > 4
    ax.set_xticklabels(levels, rotation=30 if long else 0, ha="right" if long else "center")
    ax.grid(alpha=0.3)
    _legend_below(fig, entries)
    return _save(fig, path)


def ties_over_steps(ties: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """Tie fraction per step window, one line per difficulty with its interval and its prediction
    (dashed), one panel per arm."""
    arms = list(_arms(ties, by))
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    fig, axes = _figure(len(arms), legend=levels, legend_title="difficulty")
    entries: dict[str, Artist] = {}
    for ax, (label, rows) in zip(axes, arms):
        for i, level in enumerate(levels):  # a difficulty keeps its colour in every panel
            r = rows[rows["difficulty"].astype(str) == level]
            if r.empty:
                continue
            entries[level], = ax.plot(r["step_window"], r["tie_frac"], color=_colour(i))
            ax.fill_between(r["step_window"], r["ci_low"], r["ci_high"], color=_colour(i), alpha=0.12, linewidth=0)
            ax.plot(r["step_window"], r["predicted_tie_frac"], "x--", color=_colour(i), linewidth=1, markersize=4)
        ax.set(title=label, xlabel="step (window start)", ylabel="tie fraction", ylim=UNIT_Y)
        ax.title.set_fontsize("small")
        ax.grid(alpha=0.3)
    _legend_below(fig, {level: entries[level] for level in levels if level in entries}, title="difficulty")
    return _save(fig, path)


def budget_curves(bands: pd.DataFrame, path: Path, arm: Sequence[str], budget: str) -> Path:
    """Each metric against the budget: the mean over seeds per arm, the band from lowest to highest seed."""
    arms = list(_arms(bands, arm))
    fig, axes = _figure(len(BUDGET_METRICS), legend=[label for label, _ in arms])
    entries: dict[str, Artist] = {}
    for i, (label, rows) in enumerate(arms):
        for ax, metric in zip(axes, BUDGET_METRICS):
            entries[label], = ax.plot(rows["budget"], rows[metric], color=_colour(i))
            low, high = rows[f"{metric}_low"], rows[f"{metric}_high"]
            ax.fill_between(rows["budget"], low, high, color=_colour(i), alpha=0.2, linewidth=0)
    for ax, title in zip(axes, BUDGET_METRICS.values()):
        ax.set(xlabel=f"{budget} drawn", title=title)
        ax.title.set_fontsize("small")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 40k, 1.2M: short tick labels at any budget
        ax.grid(alpha=0.3)
    _legend_below(fig, entries)
    return _save(fig, path)


def heldout(bands: pd.DataFrame, path: Path, arm: Sequence[str]) -> Path:
    """Held-out scores against samples drawn, one panel per (metric, k): per arm the mean over seeds
    at each checkpoint (points joined by lines), the band from the lowest to the highest seed."""
    panels = list(dict.fromkeys(zip(bands["metric"], bands["k"])))
    arms = list(_arms(bands, arm))
    fig, axes = _figure(len(panels), legend=[label for label, _ in arms])
    entries: dict[str, Artist] = {}
    for i, (label, rows) in enumerate(arms):
        for ax, (metric, k) in zip(axes, panels):
            r = rows[(rows["metric"] == metric) & (rows["k"] == k)].sort_values("samples")
            entries[label], = ax.plot(r["samples"], r["mean"], "o-", color=_colour(i), markersize=3)
            ax.fill_between(r["samples"], r["low"], r["high"], color=_colour(i), alpha=0.2, linewidth=0)
    for ax, (metric, k) in zip(axes, panels):
        ax.set(xlabel="samples drawn", title=f"held-out {metric.replace('@k', f'@{k}')}")
        ax.title.set_fontsize("small")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
    _legend_below(fig, entries)
    return _save(fig, path)


def _steps_label(checkpoint: str, steps: str) -> str:
    """ "final (steps 80, 83)", "final (step 100)", "base (step 0)"."""
    unique = list(dict.fromkeys(s.strip() for s in str(steps).split(",")))
    return f"{checkpoint} (step{'s' if len(unique) > 1 else ''} {', '.join(unique)})"


def _same_curves(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Whether two arms' at-k rows hold the same means and intervals at every difficulty, metric and k."""
    keys, values = ["difficulty", "metric", "k"], ["mean", "ci_low", "ci_high"]
    a, b = (frame.astype({"difficulty": str}).set_index(keys)[values].sort_index() for frame in (a, b))
    return a.index.equals(b.index) and np.allclose(a.to_numpy(), b.to_numpy(), rtol=0, atol=1e-9)  # summed in another order


def at_k(curves: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """pass@k (top row) and cons@k (bottom row) against k, one column of panels per difficulty and one
    for all prompts pooled ("all"); a colour per arm, dashed at base and solid at final, with their
    intervals (one black base line when every arm's base is the same). More than AT_K_COLUMNS
    difficulties wrap onto further pairs of rows."""
    shown = curves[curves["checkpoint"].isin([BASE, FINAL])]
    levels = natural_sorted(d for d in shown["difficulty"].astype(str).unique() if d != "all")
    levels += ["all"] if (shown["difficulty"] == "all").any() else []
    arms = list(_arms(shown, by))
    base = [rows[rows["checkpoint"] == BASE] for _, rows in arms]
    base = [b for b in base if len(b)]
    # every arm's base the same numbers (one base model, one eval seed): one black line, not one hidden under another
    shared = len(base) > 1 and all(_same_curves(base[0], b) for b in base[1:])
    lines = []  # (label, colour, checkpoint, rows)
    if shared:
        lines.append((f"every arm, {_steps_label(BASE, '0')}", "k", BASE, base[0]))
    for i, (label, rows) in enumerate(arms):
        for checkpoint in (FINAL,) if shared else (BASE, FINAL):
            part = rows[rows["checkpoint"] == checkpoint]
            if len(part):
                lines.append((f"{label}, {_steps_label(checkpoint, part['steps'].iloc[0])}", _colour(i), checkpoint,
                              part))
    columns = min(len(levels), AT_K_COLUMNS)
    bands = math.ceil(len(levels) / columns)
    fig, axes = _figure(2 * bands * columns, width=3.0, height=2.6, columns=columns, legend=[s for s, *_ in lines])
    ks = sorted(shown["k"].unique())
    entries: dict[str, Artist] = {}
    for j, level in enumerate(levels):
        band, col = divmod(j, columns)
        for row, metric in enumerate(("pass@k", "cons@k")):
            ax = axes[(2 * band + row) * columns + col]
            for label, colour, checkpoint, part in lines:
                r = part[(part["difficulty"].astype(str) == level) & (part["metric"] == metric)].sort_values("k")
                if r.empty:
                    continue
                final = checkpoint == FINAL
                entries[label], = ax.plot(r["k"], r["mean"], color=colour, linestyle="-" if final else "--",
                                          marker="o" if final else "s", markersize=4 if final else 3,
                                          markerfacecolor=colour if final else "none")
                ax.fill_between(r["k"], r["ci_low"], r["ci_high"], color=colour, alpha=0.12 if final else 0.06,
                                linewidth=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, labels=[str(k) for k in ks])
            ax.minorticks_off()
            ax.set_ylim(*UNIT_Y)
            ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
            ax.grid(alpha=0.3)
            ax.set_title(f"{metric}, {'all prompts' if level == 'all' else f'difficulty {level}'}", fontsize="small")
            if col == 0:
                ax.set_ylabel(metric)
            else:
                ax.tick_params(labelleft=False)
            if row == 1:
                ax.set_xlabel("k")
    for j in range(len(levels), bands * columns):  # panels past the last difficulty
        band, col = divmod(j, columns)
        for row in (0, 1):
            axes[(2 * band + row) * columns + col].set_visible(False)
    _legend_below(fig, entries)
    return _save(fig, path)
