"""The ties figures: first-round ties by difficulty (bars, all-correct under all-wrong, with the
prediction), and over training against samples drawn."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import EngFormatter, MaxNLocator

from analysis.data.labels import natural_sorted
from analysis.render.canvas import (
    MAX_WIDTH,
    UNIT_Y,
    arm_rows,
    colours_of,
    figure,
    fit_columns,
    legend_below,
    level_label,
    save,
    styled,
)

PARTIAL = 0.5  # a step window holding fewer groups than this share of its arm's median window is partial
PARTIAL_LABEL = "partial window (under half the groups)"
OVER_SAMPLES_WIDTH = 3.3  # inches a difficulty's panel takes in the ties-over-samples figure: four within MAX_WIDTH
PREDICTED_SHARE = 0.5  # a prediction is drawn beside a bar or point only where this share of its groups can have one


def predicted_apart(ties: pd.DataFrame) -> pd.Series:
    """Whether each row's prediction (`tie_fractions`' `predicted_tie_frac`) stands beside a bar or point made mostly
    of groups no prediction can cover: fewer than PREDICTED_SHARE of its groups have two answers or more
    (`predictable_groups`, `sections.ties.with_predictable`; SPO's groups of one never tie, so its prediction is of its
    few groups of 8 alone, while its bar is of every group). Such a prediction is not drawn; the tables keep it, by
    `group_size`. False everywhere where the frame does not count them."""
    if "predictable_groups" not in ties:
        return pd.Series(False, index=ties.index)
    return ties["predicted_tie_frac"].notna() & (ties["predictable_groups"] < PREDICTED_SHARE * ties["groups"])


def partial_windows(ties: pd.DataFrame, by: Sequence[str]) -> pd.Series:
    """Whether each row of `tie_fractions` by step window (one arm, difficulty and window) lies in a partial
    window: one whose groups, over every difficulty, are fewer than PARTIAL of the arm's median window's (the
    last window of a run that ended part way through it: a handful of groups a level, whose tie fraction jumps
    to 0 or 1). Arms are told apart by `by`."""
    keys = [*by, "step_window"]
    total = ties.groupby(keys, observed=True, dropna=False, sort=False)["groups"].transform("sum")
    once = total.where(~ties.duplicated(keys))  # each window counted once in its arm's median
    median = once.groupby([ties[k] for k in by], observed=True, dropna=False, sort=False).transform("median")
    return total < PARTIAL * median


@styled
def ties_by_difficulty(ties: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None,
                       colours: Mapping[str, str] | None = None) -> Path:
    """First-round ties per difficulty, a bar per arm: all-correct (solid) under all-wrong (hatched; where
    `unanswered_frac` is given, those without any answer read cross-hatched at the bottom of that segment),
    the 95% interval of their sum (black bar with caps) and the prediction p^G + (1-p)^G (a hollow
    diamond), only beside a bar of the groups it predicts (`predicted_apart`). `names`: what each difficulty label
    is, for the tick labels; `colours`: the report's colour of each arm, by its label over `by`
    (`canvas.colours_by`)."""
    ties = ties.assign(predicted_tie_frac=ties["predicted_tie_frac"].mask(predicted_apart(ties)))
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(arm_rows(ties, by))
    colour = colours_of(arms, by, colours)
    entries: dict[str, Artist] = {label: Patch(color=c) for (label, _), c in zip(arms, colour)}
    entries |= {"all-correct tie": Patch(facecolor="0.55", edgecolor="0.3"),
                "all-wrong tie": Patch(facecolor="0.9", edgecolor="0.3", hatch="///"),
                **({"all-wrong, no answer read": Patch(facecolor="0.9", edgecolor="0.3", hatch="xxx")}
                   if "unanswered_frac" in ties else {}),
                "tie fraction, 95% interval": None, "predicted p^G + (1-p)^G": None}
    per_row = levels_per_row(len(levels), len(arms))
    rows = math.ceil(len(levels) / per_row)
    width = min(MAX_WIDTH, max(7.0, 1.5 * per_row * max(1, len(arms)) ** 0.5))
    fig, axes = figure(rows, width=width, height=4.4, columns=1, legend=list(entries))
    bar = min(0.8 / max(len(arms), 1), 0.35)
    for i, ((_, rows_of_arm), c) in enumerate(zip(arms, colour)):
        place = np.array([levels.index(d) for d in rows_of_arm["difficulty"].astype(str)])
        for row, ax in enumerate(axes):
            mine = (place // per_row) == row
            if not mine.any():
                continue
            r = rows_of_arm[mine]
            x = place[mine] % per_row + (i - (len(arms) - 1) / 2) * bar
            _tie_bars(ax, r, x, bar, c, entries)
    entries = {k: v for k, v in entries.items() if v is not None}
    for row, ax in enumerate(axes):
        shown = levels[row * per_row:(row + 1) * per_row]
        ax.set(xticks=range(len(shown)), ylabel="fraction of first-round groups tied", ylim=UNIT_Y)
        if rows > 1:  # the same width a difficulty in every row, the last one's too
            ax.set_xlim(-0.5, per_row - 0.5)
        ax.set_xticklabels([level_label(level, names) for level in shown])
        ax.grid(alpha=0.3, axis="y")
        ax.set_axisbelow(True)
    axes[-1].set_xlabel("difficulty")
    legend_below(fig, entries)
    return save(fig, path)


LEAST_BAR = 0.22  # inches: the narrowest bar of the ties figure before its difficulties wrap onto another row


def levels_per_row(levels: int, arms: int) -> int:
    """How many difficulties a row of the ties-by-difficulty figure holds: all where today's bars (1.5 * sqrt(arms)
    inches a difficulty) fit in MAX_WIDTH or squeeze to bars LEAST_BAR wide; else as many as fit at LEAST_BAR,
    the rows balanced."""
    least = LEAST_BAR * max(1, arms) / 0.8  # a difficulty's bars fill 0.8 of its slot
    fit = max(1, int((MAX_WIDTH - 0.85) / least))  # 0.85: `figure`'s margins
    if levels <= fit:
        return levels
    return math.ceil(levels / math.ceil(levels / fit))


def _tie_bars(ax, rows: pd.DataFrame, x: np.ndarray, bar: float, c: str, entries: dict) -> None:
    """One arm's bars at `x`: all-correct under all-wrong (those without an answer cross-hatched), the interval
    of their sum, and the prediction beside them."""
    correct, wrong = rows["all_correct_frac"].to_numpy(float), rows["all_wrong_frac"].to_numpy(float)
    ax.bar(x, correct, bar * 0.92, color=c, edgecolor="0.2", linewidth=0.6)
    ax.bar(x, wrong, bar * 0.92, bottom=correct, color=c, alpha=0.35, hatch="///", edgecolor="0.2", linewidth=0.6)
    if "unanswered_frac" in rows:  # the all-wrong ties without an answer, the bottom of their segment
        ax.bar(x, rows["unanswered_frac"].to_numpy(float), bar * 0.92, bottom=correct, color=c, alpha=0.35,
               hatch="xxx", edgecolor="0.2", linewidth=0.6)
    if rows["ci_low"].notna().any():  # an interval needs enough prompts (`tie_fractions`)
        err = np.vstack([rows["tie_frac"] - rows["ci_low"], rows["ci_high"] - rows["tie_frac"]])
        entries["tie fraction, 95% interval"] = ax.errorbar(x, rows["tie_frac"], yerr=err, fmt="none", ecolor="k",
                                                            elinewidth=1.6, capsize=5, capthick=1.6, zorder=4)
    if rows["predicted_tie_frac"].notna().any():  # no legend entry for what is not drawn
        entries["predicted p^G + (1-p)^G"], = ax.plot(x + bar * 0.25, rows["predicted_tie_frac"], "D", color="k",
                                                      markerfacecolor="white", markersize=7, zorder=5,
                                                      linestyle="none")


@styled
def ties_over_samples(ties: pd.DataFrame, path: Path, by: Sequence[str], names: dict[str, str] | None = None,
                      colours: Mapping[str, str] | None = None) -> Path:
    """First-round tie fractions over training against samples drawn (`samples_drawn`: the mean over
    an arm's jobs of the samples drawn by the end of each step window), one column per difficulty;
    rows: all-correct ties, all-wrong ties (learning moves ties from one to the other; collapse
    fills the second), and all ties beside the prediction (markers). A colour per arm (`colours`: the
    report's, by the label over `by`); bands: 95% intervals. A partial window (`partial_windows`) is a
    hollow point off the line, without band or prediction: its few groups would end a line at 0 or 1."""
    ties = ties.assign(_partial=partial_windows(ties, by).to_numpy(),
                       predicted_tie_frac=ties["predicted_tie_frac"].mask(predicted_apart(ties)))
    levels = natural_sorted(ties["difficulty"].astype(str).unique())
    arms = list(arm_rows(ties, by))
    colour = colours_of(arms, by, colours)
    rows_shown = [("all_correct_frac", "all_correct_ci", "all-correct ties"),
                  ("all_wrong_frac", "all_wrong_ci", "all-wrong ties"),
                  ("tie_frac", "ci", "all ties")]
    labels = [label for label, _ in arms] + ["predicted p^G + (1-p)^G", PARTIAL_LABEL]
    fit = fit_columns(OVER_SAMPLES_WIDTH, len(levels))
    columns = math.ceil(len(levels) / math.ceil(len(levels) / fit))  # wrapped onto bands of three rows, balanced
    bands = math.ceil(len(levels) / columns)
    past = [(len(rows_shown) * (j // columns) + r) * columns + j % columns
            for j in range(len(levels), bands * columns) for r in range(len(rows_shown))]
    fig, axes = figure(len(rows_shown) * bands * columns, width=OVER_SAMPLES_WIDTH, height=2.7, columns=columns,
                       legend=labels, top=0.6, empty=past)  # two-line titles
    entries: dict[str, Artist] = {}
    for r, (column, ci, title) in enumerate(rows_shown):
        for j, level in enumerate(levels):
            band, c = divmod(j, columns)
            ax = axes[(len(rows_shown) * band + r) * columns + c]
            for (label, rows), arm_colour in zip(arms, colour):
                part = rows[rows["difficulty"].astype(str) == level].sort_values("samples_drawn")
                if part.empty:
                    continue
                full, thin = part[~part["_partial"]], part[part["_partial"]]
                entries[label], = ax.plot(full["samples_drawn"], full[column], color=arm_colour, marker="o",
                                          markersize=3)
                ax.fill_between(full["samples_drawn"], full[f"{ci}_low"], full[f"{ci}_high"], color=arm_colour,
                                alpha=0.15, linewidth=0)
                if len(thin):
                    ax.plot(thin["samples_drawn"], thin[column], "o", color=arm_colour, markerfacecolor="white",
                            markersize=4, linestyle="none")
                    entries[PARTIAL_LABEL] = Line2D([], [], marker="o", color="k", markerfacecolor="white",
                                                    markersize=4, linestyle="none")  # the arm's colour in the panels
                if column == "tie_frac" and full["predicted_tie_frac"].notna().any():  # no legend entry for nothing
                    ax.plot(full["samples_drawn"], full["predicted_tie_frac"], "D", color=arm_colour,
                            markerfacecolor="white", markersize=5, linestyle="none")
                    entries[labels[-2]] = Line2D([], [], marker="D", color="k", markerfacecolor="white",
                                                 markersize=5, linestyle="none")  # the arm's colour in the panels
            name = (names or {}).get(level)
            ax.set_title(f"{title},\ndifficulty {level}" + (f" ({name})" if name else ""), fontsize="small")
            ax.set_ylim(*UNIT_Y)
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel("fraction of groups")
            else:
                ax.tick_params(labelleft=False)
            if r == len(rows_shown) - 1:
                ax.set_xlabel("samples drawn")
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
    legend_below(fig, {k: entries[k] for k in labels if k in entries})
    return save(fig, path)
