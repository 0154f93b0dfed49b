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
from matplotlib import rc_context
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter

from analysis.arms import arm_label, short_label
from analysis.budget import BASE, FINAL
from analysis.health import flat_metrics, health_bands, many_jobs
from analysis.health import PANELS as HEALTH_PANELS
from analysis.health import POINTS as HEALTH_POINTS
from analysis.labels import natural_sorted

# the training accuracy panel is left out: the training-health figure's reward panel shows the same
BUDGET_METRICS = {"wasted_frac": "wasted fraction of samples drawn"}
DPI = 150  # sharp at GitHub's page width
STYLE = {"font.size": 12, "axes.titlesize": 12, "axes.labelsize": 12, "xtick.labelsize": 11,
         "ytick.labelsize": 11}  # readable when GitHub scales a wide figure down
AT_K_COLUMNS = 5  # difficulties side by side in the pass@k / cons@k figure before it wraps
LEGEND_ROW = 0.27  # inches per legend row (fontsize "small" at STYLE's 12 pt)
CHAR_WIDTH = 0.078  # inches per legend character (fontsize "small"), for laying out its columns
HANDLE_WIDTH = 0.75  # inches a legend entry takes besides its text
UNIT_Y = (-0.03, 1.03)  # y limits of a fraction: 0 and 1 stay clear of the frame
MIN_SPAN = 0.1  # the least y range of a held-out score panel


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _legend_shape(labels: Sequence[str], width: float, title: bool = False) -> tuple[int, int]:
    """(columns, rows) of a legend of `labels` across a figure `width` inches wide."""
    entry = HANDLE_WIDTH + CHAR_WIDTH * max((len(s) for s in labels), default=0)
    columns = max(1, min(len(labels), int((width - 0.3) // entry)))
    return columns, math.ceil(len(labels) / columns) + int(title)


def _figure(panels: int, width: float = 4.2, height: float = 3.2, columns: int = 3,
            legend: Sequence[str] = (), legend_title: str | None = None, top: float = 0.35
            ) -> tuple[Figure, list[Axes]]:
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
                        top=1 - top / fig_height, wspace=0.3, hspace=0.5)
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
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})  # fast zlib: the figures stay small
    return path


def _styled(draw):
    """Draw under STYLE (fonts are fixed when artists are made, so the whole function runs inside it)."""
    def wrapped(*args, **kwargs):
        with rc_context(STYLE):
            return draw(*args, **kwargs)
    wrapped.__doc__, wrapped.__name__ = draw.__doc__, draw.__name__
    return wrapped


def level_label(level: str, names: dict[str, str] | None) -> str:
    """A difficulty as a tick label: "2" and what it is ("2+1 digits") when the task said."""
    name = (names or {}).get(str(level))
    return f"{level}\n{name}" if name else str(level)


@_styled
def ties_by_difficulty(ties: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None) -> Path:
    """First-round ties per difficulty, a bar per arm: all-correct (solid) under all-wrong (hatched),
    the 95% interval of their sum (black bar with caps) and the prediction p^G + (1-p)^G (a hollow
    diamond). `names`: what each difficulty label is, for the tick labels."""
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(_arms(ties, by))
    entries: dict[str, Artist] = {label: Patch(color=_colour(i)) for i, (label, _) in enumerate(arms)}
    entries |= {"all-correct tie": Patch(facecolor="0.55", edgecolor="0.3"),
                "all-wrong tie": Patch(facecolor="0.9", edgecolor="0.3", hatch="///"),
                "tie fraction, 95% interval": None, "predicted p^G + (1-p)^G": None}
    width = max(7.0, 1.5 * len(levels) * max(1, len(arms)) ** 0.5)
    fig, (ax,) = _figure(1, width=width, height=4.4, legend=list(entries))
    bar = min(0.8 / max(len(arms), 1), 0.35)
    for i, (_, rows) in enumerate(arms):
        x = np.array([levels.index(d) for d in rows["difficulty"].astype(str)]) + (i - (len(arms) - 1) / 2) * bar
        correct, wrong = rows["all_correct_frac"].to_numpy(float), rows["all_wrong_frac"].to_numpy(float)
        ax.bar(x, correct, bar * 0.92, color=_colour(i), edgecolor="0.2", linewidth=0.6)
        ax.bar(x, wrong, bar * 0.92, bottom=correct, color=_colour(i), alpha=0.35, hatch="///", edgecolor="0.2",
               linewidth=0.6)
        err = np.vstack([rows["tie_frac"] - rows["ci_low"], rows["ci_high"] - rows["tie_frac"]])
        entries["tie fraction, 95% interval"] = ax.errorbar(x, rows["tie_frac"], yerr=err, fmt="none", ecolor="k",
                                                            elinewidth=1.6, capsize=5, capthick=1.6, zorder=4)
        entries["predicted p^G + (1-p)^G"], = ax.plot(x + bar * 0.25, rows["predicted_tie_frac"], "D", color="k",
                                                      markerfacecolor="white", markersize=7, zorder=5,
                                                      linestyle="none")
    entries = {k: v for k, v in entries.items() if v is not None}
    ax.set(xticks=range(len(levels)), xlabel="difficulty", ylabel="fraction of first-round groups tied", ylim=UNIT_Y)
    ax.set_xticklabels([level_label(level, names) for level in levels])
    ax.grid(alpha=0.3, axis="y")
    ax.set_axisbelow(True)
    _legend_below(fig, entries)
    return _save(fig, path)


@_styled
def ties_over_samples(ties: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None
                      ) -> Path:
    """First-round tie fractions over training against samples drawn (`samples_drawn`: the mean over
    an arm's jobs of the samples drawn by the end of each step window), one column per difficulty;
    rows: all-correct ties, all-wrong ties (learning moves ties from one to the other; collapse
    fills the second), and all ties beside the prediction (markers). A colour per arm; bands: 95%
    intervals."""
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(_arms(ties, by))
    rows_shown = [("all_correct_frac", "all_correct_ci", "all-correct ties"),
                  ("all_wrong_frac", "all_wrong_ci", "all-wrong ties"),
                  ("tie_frac", "ci", "all ties")]
    labels = [label for label, _ in arms] + ["predicted p^G + (1-p)^G"]
    fig, axes = _figure(len(rows_shown) * len(levels), width=3.4, height=2.6, columns=len(levels), legend=labels)
    entries: dict[str, Artist] = {}
    for r, (column, ci, title) in enumerate(rows_shown):
        for c, level in enumerate(levels):
            ax = axes[r * len(levels) + c]
            for i, (label, rows) in enumerate(arms):
                part = rows[rows["difficulty"].astype(str) == level].sort_values("samples_drawn")
                if part.empty:
                    continue
                entries[label], = ax.plot(part["samples_drawn"], part[column], color=_colour(i), marker="o",
                                          markersize=3)
                ax.fill_between(part["samples_drawn"], part[f"{ci}_low"], part[f"{ci}_high"], color=_colour(i),
                                alpha=0.15, linewidth=0)
                if column == "tie_frac":
                    ax.plot(part["samples_drawn"], part["predicted_tie_frac"], "D", color=_colour(i),
                            markerfacecolor="white", markersize=5, linestyle="none")
                    entries[labels[-1]] = Line2D([], [], marker="D", color="k", markerfacecolor="white",
                                                 markersize=5, linestyle="none")  # the arm's colour in the panels
            name = (names or {}).get(level)
            ax.set_title(f"{title}, difficulty {level}" + (f" ({name})" if name else ""), fontsize="small")
            ax.set_ylim(*UNIT_Y)
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel("fraction of groups")
            else:
                ax.tick_params(labelleft=False)
            if r == len(rows_shown) - 1:
                ax.set_xlabel("samples drawn")
    _legend_below(fig, {k: entries[k] for k in labels if k in entries})
    return _save(fig, path)


@_styled
def budget_curves(bands: pd.DataFrame, path: Path, arm: Sequence[str], budget: str) -> Path:
    """Each metric against the budget: the mean over seeds per arm, the band from lowest to highest seed."""
    arms = list(_arms(bands, arm))
    fig, axes = _figure(len(BUDGET_METRICS), width=6.4 if len(BUDGET_METRICS) == 1 else 4.2, height=3.6,
                        legend=[label for label, _ in arms])
    entries: dict[str, Artist] = {}
    for i, (label, rows) in enumerate(arms):
        for ax, metric in zip(axes, BUDGET_METRICS):
            entries[label], = ax.plot(rows["budget"], rows[metric], color=_colour(i))
            low, high = rows[f"{metric}_low"], rows[f"{metric}_high"]
            ax.fill_between(rows["budget"], low, high, color=_colour(i), alpha=0.2, linewidth=0)
    for ax, title in zip(axes, BUDGET_METRICS.values()):
        ax.set(xlabel=f"{budget} drawn", ylabel=title.split(" of ")[0], title=title)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 40k, 1.2M: short tick labels at any budget
        ax.grid(alpha=0.3)
    _legend_below(fig, entries)
    return _save(fig, path)


@_styled
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
        low, high = ax.get_ylim()
        if high - low < MIN_SPAN:  # autoscaled, a flat line's noise would fill the panel and read as a trend
            # a score lies in [0, 1]: no negative ticks (their wider labels would push the axis title off)
            bottom = min(max((low + high) / 2 - MIN_SPAN / 2, -0.005), 1.005 - MIN_SPAN)
            ax.set_ylim(bottom, bottom + MIN_SPAN)
        ax.set(xlabel="samples drawn", ylabel="mean over prompts",
               title=f"held-out {metric.replace('@k', f'@{k}')}")
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


@_styled
def saturated(curves: pd.DataFrame, margin: float = 0.05) -> list[str]:
    """Difficulties whose every at-k mean (any arm, checkpoint, metric, k) is within `margin` of 0 or
    of 1: their panels would be flat lines on a frame's edge."""
    by_level = curves[curves["difficulty"].astype(str) != "all"].groupby(curves["difficulty"].astype(str))["mean"]
    flat = by_level.agg(lambda m: bool((m >= 1 - margin).all() or (m <= margin).all()))
    return natural_sorted(flat.index[flat])


def at_k(curves: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None) -> Path:
    """pass@k (top row) and cons@k (bottom row) against k, one column of panels per difficulty and one
    for all prompts pooled ("all"); a colour per arm, dashed at base and solid at final, with their
    intervals (one black base line when every arm's base is the same). More than AT_K_COLUMNS
    difficulties wrap onto further pairs of rows."""
    shown = curves[curves["checkpoint"].isin([BASE, FINAL])]
    flat = set(saturated(shown))
    levels = natural_sorted(d for d in shown["difficulty"].astype(str).unique() if d != "all" and d not in flat)
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
    fig, axes = _figure(2 * bands * columns, width=3.0, height=2.6, columns=columns, legend=[s for s, *_ in lines],
                        top=0.7)  # two-line titles
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
    for j in range(len(levels), bands * columns):  # panels past the last difficulty
        band, col = divmod(j, columns)
        for row in (0, 1):
            axes[(2 * band + row) * columns + col].set_visible(False)
    _legend_below(fig, entries)
    return _save(fig, path)


def _interval_row(ax: Axes, y: float, low: float, high: float, centre: float, note: str, filled: bool = True,
                  size: float = 7, fontsize: str = "small") -> None:
    """One row of a forest-style panel: the interval as a bar, the estimate as a dot (hollow when not
    `filled`), and `note` just right of the axes."""
    ax.plot([low, high], [y, y], color="k", linewidth=2.2, solid_capstyle="butt")
    ax.plot(centre, y, "o", color="k", markersize=size, markerfacecolor="k" if filled else "white", zorder=3)
    ax.annotate(note, (1.02, y), xycoords=("axes fraction", "data"), va="center", fontsize=fontsize)


def _holm_note(p_holm: float) -> str:
    return f"Holm p = {p_holm:.2g}" if pd.notna(p_holm) else "no test"


@_styled
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
    width = left + 5.0 + 1.5  # labels, the axis, the Holm p column
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=left / width, right=1 - 1.5 / width, top=1 - 0.35 / height, bottom=0.75 / height)
    ax = fig.subplots()
    y = np.arange(len(tests))[::-1]
    for yi, (_, row), strong in zip(y, tests.iterrows(), detectable):
        _interval_row(ax, yi, row["ci_low"], row["ci_high"], row["difference"], _holm_note(row["p_holm"]), strong,
                      size=8)
    ax.axvline(0, color="0.4", linestyle="--", linewidth=1)
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.6, len(tests) - 0.4)
    ax.set_xlabel(f"difference b − a: {pairs['b'].iloc[0]} − {pairs['a'].iloc[0]}\n(filled: detectable; hollow: not)")
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def _forest_panels(tests: pd.DataFrame, path: Path, detectable: Sequence[bool]) -> Path:
    """`forest` for several pairs of arms: one panel per metric on its own scale (a pass@1 difference of
    0.01 and a wasted-fraction one of 0.3 share no axis), a row per pair "b − a", the Holm p beside it."""
    tests = tests.assign(_detectable=list(detectable), _pair=[
        f"{short_label(b)} − {short_label(a)}" for a, b in zip(tests["a"].astype(str), tests["b"].astype(str))])
    metrics = list(dict.fromkeys(tests["metric"]))
    pairs = list(dict.fromkeys(tests["_pair"]))
    columns = min(2, len(metrics))
    rows = math.ceil(len(metrics) / columns)
    left = 0.3 + 0.085 * max(len(p) for p in pairs)  # inches for the pair labels
    panel_w, panel_h = 3.4, 0.42 * len(pairs) + 0.9
    pad = 1.3  # the Holm p column right of each panel
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
            _interval_row(ax, yi, r["ci_low"], r["ci_high"], r["difference"], _holm_note(r["p_holm"]),
                          r["_detectable"], fontsize="x-small")
        ax.axvline(0, color="0.4", linestyle="--", linewidth=1)
        ax.set_yticks(y, pairs)
        ax.set_ylim(-0.6, len(pairs) - 0.4)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel("difference b − a", fontsize="small")
        ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


@_styled
def ranking(rankings: Sequence, path: Path) -> Path:
    """One panel per ranked measure (`analysis.ranking.Ranking`): each arm's mean with its 95% interval,
    best at the top, and the ranks it can hold given the resolved orderings at the right."""
    n = max(len(r.table) for r in rankings)
    labels = [short_label(a) for r in rankings for a in r.table["arm"]]
    left = 0.3 + 0.085 * max(len(a) for a in labels)  # inches for the arm names
    panel, gap, right = 3.6, 0.9, 0.25
    width = len(rankings) * (left + panel + gap) + right
    height = 0.42 * n + 1.5
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    for i, r in enumerate(rankings):
        x0 = (i * (left + panel + gap) + left) / width
        ax = fig.add_axes((x0, 0.9 / height, panel / width, 1 - 1.35 / height))
        table = r.table
        y = np.arange(len(table))[::-1]
        for yi, (_, row) in zip(y, table.iterrows()):
            _interval_row(ax, yi, row["ci_low"], row["ci_high"], row["mean"], f"ranks {row['ranks']}")
        ax.set_yticks(y, [short_label(a) for a in table["arm"]])
        ax.set_ylim(-0.6, len(table) - 0.4)
        ax.set_title(f"{r.measure}\n({len(r.resolved)} of {r.pairs} orderings resolved)", fontsize="medium")
        ax.set_xlabel(f"mean, 95% interval over {r.interval}")
        ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


@_styled
def health(curves: pd.DataFrame, path: Path, points: int = HEALTH_POINTS) -> Path:
    """The training-health figure from `analysis.health.health_curves`: a panel per metric (but
    `flat_metrics`), a colour per arm; a line per job, or with `many_jobs` each arm's mean and
    lowest-to-highest band on a common samples grid."""
    metrics = [m for m in HEALTH_PANELS if m in set(curves["metric"]) and m not in flat_metrics(curves)]
    arms = list(dict.fromkeys(curves["arm"]))
    jobs = curves.groupby("arm", sort=False)["job"].nunique()
    banded = many_jobs(curves)
    bands = health_bands(curves) if banded else None
    labels = [f"{short_label(a)} ({jobs[a]} job{'s' if jobs[a] != 1 else ''})" for a in arms]
    title = (("mean over jobs, band: lowest to highest job" if banded else "one line per job")
             + f"; rolling mean over 1/{points} of each job's steps")
    fig, axes = _figure(len(metrics), width=4.4, height=3.3, columns=2 if len(metrics) == 4 else 3, legend=labels,
                        legend_title=title)
    entries: dict[str, Artist] = {}
    for ax, metric in zip(axes, metrics):
        for i, (name, label) in enumerate(zip(arms, labels)):
            if banded:
                b = bands[(bands["arm"] == name) & (bands["metric"] == metric)]
                entries[label], = ax.plot(b["samples_total"], b["mean"], color=_colour(i), lw=1.6)
                ax.fill_between(b["samples_total"], b["low"], b["high"], color=_colour(i), alpha=0.15, linewidth=0)
            else:
                part = curves[(curves["arm"] == name) & (curves["metric"] == metric)]
                for _, line in part.groupby("job", sort=False):
                    entries[label], = ax.plot(line["samples_total"], line["value"], color=_colour(i), lw=1.4,
                                              alpha=0.8)
        ax.set(title=HEALTH_PANELS[metric], xlabel="samples drawn")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.grid(alpha=0.3)
        if metric in ("clip_frac", "tie_frac"):
            ax.set_ylim(bottom=0)
        if metric == "tie_frac":
            ax.set_ylim(top=1.02)
    _legend_below(fig, entries, title=title)
    return _save(fig, path)
