"""The verdict's figure: where a study has many arms, a table of means hides the one question a reader brings (is
this arm better than the reference?), so each arm's difference from the reference arm is drawn with its interval,
one panel per alignment, on one scale."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from analysis.data.arms import short_label
from analysis.measures.verdict import Alignment
from analysis.render.canvas import DPI, interval_row, save, styled

MAX_WIDTH = 2000 / DPI  # inches: the figure stays within 2,000 px
ROW, LINE = 0.18, 0.16  # inches a row of arms takes: ROW + LINE per line of its name (one line: 0.34)
LINES = 3  # lines a long name may take, broken at its keys
CHAR = 0.08  # inches per character of a tick label (11 pt)
AXIS, MIN_AXIS, GAP = 2.8, 1.7, 0.45  # a panel's drawing width (most, least) and the room after it
TOP, BOTTOM = 1.3, 0.75  # inches above the panels (the title's two lines, each panel's two) and below (x label)
TITLE_CHAR = 0.1  # inches per character of the title (12 pt)


@styled
def differences_from_reference(alignments: Sequence[Alignment], path: Path, reference: str) -> Path:
    """Each arm's held-out pass@1 minus the reference arm's, with its 95% interval over seeds (`differences` of
    each alignment), one panel per alignment on a shared scale, arms ordered by their difference (highest at the
    top), filled where the difference is resolved and hollow where not; 0 (the reference) dashed. Names too long
    for panels side by side within MAX_WIDTH break at their keys onto up to LINES lines."""
    panels = [a for a in alignments if a.differences is not None and a.differences["difference"].notna().any()]
    if not panels:
        raise ValueError("differences_from_reference: no alignment has a difference from the reference to draw")
    arms = list(dict.fromkeys(arm for a in panels for arm in a.differences["arm"]))
    longest = max((len(short_label(arm)) for arm in arms), default=8)
    fits = int(((MAX_WIDTH - 0.1) / len(panels) - GAP - MIN_AXIS - 0.3) / CHAR)  # characters a line of a name has
    names = {arm: _wrapped(short_label(arm), min(longest, fits)) for arm in arms}
    line = max(len(part) for name in names.values() for part in name.split("\n"))
    left = 0.3 + CHAR * line
    axis = min(AXIS, (MAX_WIDTH - 0.1) / len(panels) - GAP - left)
    rows = max(len(a.differences) for a in panels)
    named = _cut(short_label(reference), 40)
    title = [f"Held-out pass@1: each arm − {named}", "95% interval over seeds (filled: resolved; hollow: not)"]
    width = len(panels) * (left + axis + GAP) + 0.1
    shift = max(0.0, TITLE_CHAR * max(map(len, title)) + 0.3 - width) / 2  # a narrow figure widened for its title
    width += 2 * shift
    height = (ROW + LINE * max(n.count("\n") + 1 for n in names.values())) * rows + TOP + BOTTOM
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    low, high = _limits(panels)
    for i, alignment in enumerate(panels):
        shown = alignment.differences.dropna(subset=["difference"]).sort_values(
            "difference", ascending=False, kind="stable")
        ax = fig.add_axes(((shift + i * (left + axis + GAP) + left) / width, BOTTOM / height, axis / width,
                           (height - TOP - BOTTOM) / height))
        y = np.arange(len(shown))[::-1] + (rows - len(shown))
        for yi, row in zip(y, shown.itertuples(index=False)):
            interval_row(ax, yi, row.ci_low, row.ci_high, row.difference, "", bool(row.resolved), size=6)
        ax.axvline(0, color="0.4", linestyle="--", linewidth=1)
        ax.set_yticks(y, [names[a] for a in shown["arm"]])
        ax.set_ylim(-0.6, rows - 0.4)
        ax.set_xlim(low, high)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # a narrow panel's ticks apart
        ax.set_title(f"{alignment.name} ({alignment.point})\n"
                     f"{int(shown['resolved'].sum())} of {len(shown)} resolved", fontsize="medium")
        ax.set_xlabel(f"difference from {named if len(named) <= 20 else 'the reference'}", fontsize="small")
        ax.grid(alpha=0.3, axis="x")
    fig.suptitle("\n".join(title), fontsize="medium", y=1 - 0.1 / height, va="top")
    return save(fig, path)


def _wrapped(name: str, longest: int) -> str:
    """`name` within `longest` characters a line: whole where it fits, else broken after a key's ", " onto up to
    LINES lines ("sampler=band," / "algo.lr=0.0001"), a line still too long cut in its middle ("sam…_on_tie")."""
    if len(name) <= longest:
        return name
    parts = name.split(", ")
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines) < LINES and len(lines[-1]) + 2 + len(part) > longest:
            lines[-1] += ","
            lines.append(part)
        else:
            lines[-1] += ", " + part
    return "\n".join(_cut(line, longest) for line in lines)


def _limits(panels: Sequence[Alignment]) -> tuple[float, float]:
    """One x range for every panel (the same quantity at each alignment), 0 inside it, with a margin."""
    values = np.concatenate([a.differences[c].to_numpy(float) for a in panels
                             for c in ("difference", "ci_low", "ci_high")] + [np.zeros(1)])
    low, high = np.nanmin(values), np.nanmax(values)
    margin = 0.06 * (high - low) if high > low else 0.01
    return low - margin, high + margin


def _cut(name: str, longest: int) -> str:
    """`name` cut to `longest` characters in its middle: names of arms differ at either end."""
    if len(name) <= longest:
        return name
    head = (longest - 1) // 2
    return name[:head] + "…" + name[len(name) - (longest - 1 - head):]
