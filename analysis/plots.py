"""The report's figures, drawn with matplotlib's object API onto Agg canvases (no pyplot, no
display, no global state), each from one of the analysis tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.arms import iter_arms
from analysis.labels import natural_sorted

BUDGET_METRICS = {"accuracy": "accuracy (window)", "informative_per_1k": "informative groups / 1k samples",
                  "wasted_frac": "wasted fraction of samples"}


def _figure(panels: int, width: float = 4.2, height: float = 3.2, columns: int = 3) -> tuple[Figure, list[Axes]]:
    """A figure of `panels` axes, `columns` to a row, each panel `width` x `height` inches."""
    cols = min(panels, columns)
    rows = math.ceil(panels / cols)
    fig = Figure(figsize=(width * cols, height * rows))
    FigureCanvasAgg(fig)
    # fixed margins in inches rather than a layout engine: half the drawing time on a large report
    fig.subplots_adjust(left=0.7 / (width * cols), right=1 - 0.15 / (width * cols), bottom=0.55 / (height * rows),
                        top=1 - 0.35 / (height * rows), wspace=0.3, hspace=0.5)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, list(axes[:panels])


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def ties_by_difficulty(ties: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """Observed tie fraction per difficulty with its interval (points), predicted (dashed line)."""
    fig, (ax,) = _figure(1, width=6.4, height=4.0)
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(iter_arms(ties, by))
    for i, (label, rows) in enumerate(arms):
        x = np.array([levels.index(d) for d in rows["difficulty"].astype(str)])
        shift = (i - (len(arms) - 1) / 2) * 0.08  # side by side, so the bars stay apart
        err = np.vstack([rows["tie_frac"] - rows["ci_low"], rows["ci_high"] - rows["tie_frac"]])
        line = ax.errorbar(x + shift, rows["tie_frac"], yerr=err, fmt="o", capsize=3, label=f"{label} observed")
        ax.plot(x + shift, rows["predicted_tie_frac"], "--", color=line[0].get_color(), label=f"{label} predicted")
    ax.set(xticks=range(len(levels)), xticklabels=levels, xlabel="difficulty", ylabel="tie fraction", ylim=(0, 1))
    ax.legend(fontsize="x-small")
    return _save(fig, path)


def ties_over_steps(ties: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """Tie fraction per step window, one line per difficulty with its interval, one panel per arm."""
    arms = list(iter_arms(ties, by))
    fig, axes = _figure(len(arms))
    for ax, (label, rows) in zip(axes, arms):
        for level in natural_sorted(rows["difficulty"].astype(str).unique()):
            r = rows[rows["difficulty"].astype(str) == level]
            ax.plot(r["step_window"], r["tie_frac"], label=level)
            ax.fill_between(r["step_window"], r["ci_low"], r["ci_high"], alpha=0.12)
        ax.set(title=label, xlabel="step", ylabel="tie fraction", ylim=(0, 1))
        ax.title.set_fontsize("small")
    axes[0].legend(title="difficulty", fontsize="x-small")
    return _save(fig, path)


def budget_curves(bands: pd.DataFrame, path: Path, arm: Sequence[str], budget: str) -> Path:
    """Each metric against the budget: the mean over seeds per arm, the band from lowest to highest seed."""
    fig, axes = _figure(len(BUDGET_METRICS))
    for label, rows in iter_arms(bands, arm):
        for ax, (metric, title) in zip(axes, BUDGET_METRICS.items()):
            line, = ax.plot(rows["budget"], rows[metric], label=label)
            low, high = rows[f"{metric}_low"], rows[f"{metric}_high"]
            ax.fill_between(rows["budget"], low, high, color=line.get_color(), alpha=0.2)
            ax.set(xlabel=f"{budget} drawn", title=title)
            ax.title.set_fontsize("small")
    axes[0].legend(fontsize="x-small")
    return _save(fig, path)


def at_k(curves: pd.DataFrame, path: Path, by: Sequence[str]) -> Path:
    """pass@k and cons@k against k (all difficulties), a line per arm and checkpoint with its interval."""
    fig, axes = _figure(2, width=5.0)
    pooled = curves[curves["difficulty"] == "all"]
    for ax, metric in zip(axes, ("pass@k", "cons@k")):
        for label, rows in iter_arms(pooled[pooled["metric"] == metric], [*by, "step"]):
            line, = ax.plot(rows["k"], rows["mean"], marker="o", label=label)
            ax.fill_between(rows["k"], rows["ci_low"], rows["ci_high"], color=line.get_color(), alpha=0.2)
        ks = sorted(pooled["k"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, labels=[str(k) for k in ks], minor=False)
        ax.minorticks_off()
        ax.set(xlabel="k", ylabel=metric, ylim=(0, 1), title=metric)
    axes[0].legend(fontsize="x-small")
    return _save(fig, path)
