"""What every figure shares: matplotlib's object API onto Agg canvases (no pyplot, no display, no
global state), one style, a legend below the panels, one colour per arm in every figure, and the
PNG writer.

Legends go below the panels, outside the data; an arm keeps one colour in every panel of every figure
of a report (`arm_colours`, made once per report and handed to each figure); labels name only the keys
that vary within the figure.
"""

from __future__ import annotations

import gc
import math
import struct
import threading
import zlib
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import wraps
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.data.arms import arm_label, arm_name, iter_arms, short_label

DPI = 150  # sharp at GitHub's page width
MAX_WIDTH_PX = 2000  # no figure wider: GitHub scales a wider one down to its page, and its text past reading
MAX_WIDTH = MAX_WIDTH_PX / DPI  # inches
MANY_ARMS = 4  # more arms than this: each arm's curves in a small panel of its own (`small_multiples`)
# the reference arm in every small panel of the others: grey and dashed, apart from an arm whose colour is a grey
REFERENCE = {"color": "0.5", "linestyle": "--", "linewidth": 1.3}
REFERENCE_NOTE = "grey, dashed: the reference arm (first panel)"
STYLE = {"font.size": 12, "axes.titlesize": 12, "axes.labelsize": 12, "xtick.labelsize": 11,
         "ytick.labelsize": 11}  # readable when GitHub scales a wide figure down
LEGEND_ROW = 0.27  # inches per legend row (fontsize "small" at STYLE's 12 pt)
CHAR_WIDTH = 0.078  # inches per legend character (fontsize "small"), for laying out its columns
HANDLE_WIDTH = 0.75  # inches a legend entry takes besides its text
UNIT_Y = (-0.03, 1.03)  # y limits of a fraction: 0 and 1 stay clear of the frame
# the arms' colours, in the report's order of arms: matplotlib's ten (tab10), then their light partners (tab20's)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7",
           "#dbdb8d", "#9edae5")


def arm_colours(labels: Iterable[str]) -> dict[str, str]:
    """One colour per arm, {arm label: colour}, in the order of `labels` (the report's order of arms);
    past len(PALETTE) arms the colours repeat."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(dict.fromkeys(labels))}


def report_colours(jobs: pd.DataFrame, arm: Sequence[str]) -> dict[str, str]:
    """The report's colours: `arm_colours` of every arm of `jobs` (its label over the `arm` keys, as
    `arms.arm_name` names a row's arm), in the jobs' order, the order the report names them. Made once per
    report and handed to every figure as plain data (a figure may be drawn in the build's second process), so
    an arm has one colour in every figure, also in one that shows only some of the arms."""
    return arm_colours(label for label, _ in iter_arms(jobs, arm))


def colours_by(colours: Mapping[str, str] | None, jobs: pd.DataFrame, arm: Sequence[str],
               by: Sequence[str]) -> dict[str, str] | None:
    """`colours` (keyed by the label over the `arm` keys) keyed instead by the label over `by`, for a figure
    whose lines are told apart by other keys than the arm's (the ties figures: the group size drawn and the
    sampler first); `jobs`: a row per job holding both (`arms.job_arms`). None stays None."""
    if colours is None:
        return None
    return {arm_name(row, by): arm_colour(colours, arm_name(row, arm)) for _, row in jobs.iterrows()}


def arm_colour(colours: Mapping[str, str], label: str) -> str:
    """The colour of the arm `label`; one line naming the arm where the mapping lacks it (a figure never
    colours an arm of its own accord)."""
    try:
        return colours[label]
    except KeyError:
        raise KeyError(f"no colour for arm {label!r} (the report's colours are for {', '.join(colours)})") from None


def colours_of(arms: Sequence[tuple[str, pd.DataFrame]], keys: Sequence[str],
               colours: Mapping[str, str] | None) -> list[str]:
    """The colour of each of `arms` ((label, rows) as `arm_rows(frame, keys)` gives them): the report's
    `colours` of its label over `keys`; None (a figure drawn on its own) colours them in the order given."""
    names = [arm_name(rows.iloc[0], keys) for _, rows in arms]
    colours = arm_colours(names) if colours is None else colours
    return [arm_colour(colours, name) for name in names]


def legend_shape(labels: Sequence[str], width: float, title: bool = False) -> tuple[int, int]:
    """(columns, rows) of a legend of `labels` across a figure `width` inches wide."""
    entry = HANDLE_WIDTH + CHAR_WIDTH * max((len(s) for s in labels), default=0)
    columns = max(1, min(len(labels), int((width - 0.3) // entry)))
    return columns, math.ceil(len(labels) / columns) + int(title)


def fit_columns(width: float, columns: int) -> int:
    """How many of `columns` panels `width` inches wide fit in MAX_WIDTH: a figure wraps onto more rows
    rather than grow wider."""
    return max(1, min(columns, int(MAX_WIDTH / width + 1e-9)))


def figure(panels: int, width: float = 4.2, height: float = 3.2, columns: int = 3,
           legend: Sequence[str] = (), legend_title: str | None = None, top: float = 0.35,
           empty: Collection[int] = ()) -> tuple[Figure, list[Axes | None]]:
    """A figure of `panels` axes, `columns` to a row (fewer where they would pass MAX_WIDTH: `fit_columns`), each
    panel `width` x `height` inches, with room below the panels for a legend of the `legend` labels (see
    `legend_below`). `empty`: places of the grid left blank (None in the list; axes are only made where drawn:
    25 ms each)."""
    width = min(width, MAX_WIDTH)
    cols = min(panels, fit_columns(width, columns))
    rows = math.ceil(panels / cols)
    fig_width = width * cols
    legend_rows = legend_shape(legend, fig_width, legend_title is not None)[1] if legend else 0
    below = legend_rows * LEGEND_ROW + (0.15 if legend_rows else 0.0)  # inches under the x labels
    fig_height = height * rows + below
    fig = Figure(figsize=(fig_width, fig_height))
    FigureCanvasAgg(fig)
    # fixed margins in inches rather than a layout engine: half the drawing time on a large report
    fig.subplots_adjust(left=0.7 / fig_width, right=1 - 0.15 / fig_width, bottom=(0.55 + below) / fig_height,
                        top=1 - top / fig_height, wspace=0.3, hspace=0.5)
    grid = fig.add_gridspec(rows, cols)
    return fig, [None if i in empty else fig.add_subplot(grid[divmod(i, cols)]) for i in range(panels)]


def legend_below(fig: Figure, entries: dict[str, Artist], title: str | None = None) -> None:
    """One legend for the whole figure, centred under the panels (where `figure` left room)."""
    if not entries:
        return
    columns, _ = legend_shape(list(entries), fig.get_figwidth(), title is not None)
    fig.legend(list(entries.values()), list(entries), loc="lower center", bbox_to_anchor=(0.5, 0.0),
               ncol=columns, fontsize="small", title=title, title_fontsize="small", frameon=False,
               borderaxespad=0.3)


def small_multiples(blocks: Sequence[int], width: float = 2.2, height: float = 2.0, columns: int = 6,
                    legend: Sequence[str] = (), legend_title: str | None = None, top: float = 0.35,
                    gap: float = 0.45) -> tuple[Figure, list[list[Axes]]]:
    """A block of panels per metric, a panel per arm (`blocks`: each block's count), wrapped at most `columns` to a
    row within MAX_WIDTH, as few columns as keep that many rows (seven panels at six a row: two rows of four, not six
    and one alone), each block `gap` inches below the one before, so its x labels never meet the next block's titles.
    Returns the figure and each block's panels; `share_block` gives a block one scale and its labels."""
    most = max(blocks)
    cols = min(most, fit_columns(width, columns))
    rows = math.ceil(most / cols)
    cols = math.ceil(most / rows)
    width = min(width * 1.25, MAX_WIDTH / cols) if cols < columns else width  # fewer columns: wider panels
    fig_width = width * cols
    legend_rows = legend_shape(legend, fig_width, legend_title is not None)[1] if legend else 0
    below = legend_rows * LEGEND_ROW + (0.15 if legend_rows else 0.0)
    axis = height / 1.5  # as `figure` lays a row out: the axes, then half their height to the next row's
    block = rows * axis + (rows - 1) * axis / 2
    between = axis / 2 + gap  # from a block's last row to the next block's first: a row's space and the gap
    bottom = 0.55 + below
    fig_height = top + len(blocks) * block + (len(blocks) - 1) * between + bottom
    fig = Figure(figsize=(fig_width, fig_height))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.7 / fig_width, right=1 - 0.15 / fig_width, bottom=bottom / fig_height,
                        top=1 - top / fig_height)
    outer = fig.add_gridspec(len(blocks), 1, hspace=between / block)
    panels = []
    for b, count in enumerate(blocks):
        inner = outer[b].subgridspec(rows, cols, wspace=0.3, hspace=0.5)
        panels.append([fig.add_subplot(inner[divmod(i, cols)]) for i in range(count)])
    return fig, panels


def share_block(panels: Sequence[Axes], ylabel: str, xlabel: str) -> None:
    """One x and one y range over a block's panels (the union of what each autoscaled to), so a reader compares
    panels by position; y tick labels and `ylabel` on the first column only, `xlabel` under each column's last."""
    if not panels:
        return
    xs, ys = zip(*((ax.get_xlim(), ax.get_ylim()) for ax in panels))
    columns = panels[0].get_subplotspec().get_gridspec().ncols  # the block's own grid (`small_multiples`)
    for i, ax in enumerate(panels):
        ax.set_xlim(min(x[0] for x in xs), max(x[1] for x in xs))
        ax.set_ylim(min(y[0] for y in ys), max(y[1] for y in ys))
        if i % columns == 0:
            ax.set_ylabel(ylabel)
        else:
            ax.tick_params(labelleft=False)
        if i + columns >= len(panels):
            ax.set_xlabel(xlabel)


def report_order(arms: Sequence[tuple[str, pd.DataFrame]], keys: Sequence[str],
                 colours: Mapping[str, str] | None) -> list[tuple[str, pd.DataFrame]]:
    """`arms` ((label, rows) as `arm_rows(frame, keys)` gives them) in the report's order of arms (that of
    `colours`, which puts a declared baseline first), whatever order a table holds them in; as given without
    `colours`."""
    if colours is None:
        return list(arms)
    order = {label: i for i, label in enumerate(colours)}
    return sorted(arms, key=lambda a: order.get(arm_name(a[1].iloc[0], keys), len(order)))


def panel_title(label: str, reference: bool = False) -> str:
    """A small panel's title: its arm (the value alone where one key tells arms apart), one key a line where
    several would overrun the panel."""
    title = short_label(label)
    title = title.replace(", ", ",\n") if len(title) > 24 else title
    return f"{title} (reference)" if reference else title


def arm_rows(frame: pd.DataFrame, by: Sequence[str]) -> Iterator[tuple[str, pd.DataFrame]]:
    """(label, rows) of each arm, in order of first appearance; the label names only the keys that
    vary in `frame` (all of them when none does), so a constant key does not crowd every legend."""
    keys = list(by)
    varying = [k for k in keys if frame[k].astype(str).nunique() > 1] or keys
    for values, rows in frame.groupby(keys, observed=True, dropna=False, sort=False):
        named = dict(zip(keys, values if isinstance(values, tuple) else (values,)))
        yield arm_label({k: named[k] for k in varying}), rows


def save(fig: Figure, path: Path) -> Path:
    """The figure drawn at DPI and written as a PNG: the pixels `fig.savefig` writes, stored as `png` stores
    them (PIL's writer tries five filters on every row: twice the time, for files 10-15% smaller)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.set_dpi(DPI)
    fig.canvas.draw()
    path.write_bytes(png(np.asarray(fig.canvas.buffer_rgba()), DPI))
    return path


def png(pixels: np.ndarray, dpi: float) -> bytes:
    """A PNG of (height, width, 4) RGBA bytes at `dpi`: every row unfiltered, deflated at zlib's fastest level."""
    height, width, _ = pixels.shape
    rows = np.zeros((height, 1 + 4 * width), np.uint8)  # each row's first byte: filter type 0 (none)
    rows[:, 1:] = pixels.reshape(height, -1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    per_metre = round(dpi / 0.0254)
    return b"".join([b"\x89PNG\r\n\x1a\n",
                     chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)),  # 8-bit RGBA
                     chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
                     chunk(b"IDAT", zlib.compress(rows, 1)), chunk(b"IEND", b"")])


_STYLING = threading.RLock()  # matplotlib's rcParams are one global: two threads' figures take turns


def styled(draw):
    """Draw under STYLE (fonts are fixed when artists are made, so the whole function runs inside it),
    the garbage collector paused (`_collector_paused`). One figure at a time in a process: rc_context sets
    and restores the global rcParams, so a figure drawn by another thread meanwhile (two reports built at
    once) would take the other's fonts."""
    @wraps(draw)  # its module and name too: a figure handed to the second process pickles by name
    def wrapped(*args, **kwargs):
        with _STYLING, rc_context(STYLE), _collector_paused():
            return draw(*args, **kwargs)
    wrapped.styled = True  # what `Files.figure` asks of every figure it records
    return wrapped


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a figure is drawn (in the whole process: a figure
    takes a second at most). A figure's thousands of artists live until it is saved, and each pass of the
    collector would walk them again: a seventh of the drawing time. Once drawn they are garbage, freed by
    the collector's next pass."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def level_label(level: str, names: dict[str, str] | None) -> str:
    """A difficulty as a tick label: "2" and what it is ("2+1 digits") when the task said."""
    name = (names or {}).get(str(level))
    return f"{level}\n{name}" if name else str(level)


def interval_row(ax: Axes, y: float, low: float, high: float, centre: float, note: str, filled: bool = True,
                 size: float = 7, fontsize: str = "small") -> None:
    """One row of a forest-style panel: the interval as a bar, the estimate as a dot (hollow when not
    `filled`), and `note` just right of the axes."""
    ax.plot([low, high], [y, y], color="k", linewidth=2.2, solid_capstyle="butt")
    ax.plot(centre, y, "o", color="k", markersize=size, markerfacecolor="k" if filled else "white", zorder=3)
    ax.annotate(note, (1.02, y), xycoords=("axes fraction", "data"), va="center", fontsize=fontsize)

