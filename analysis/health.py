"""Training health at a glance: reward, KL to the reference, clip fraction, gradient norm and tie
fraction against samples drawn, one colour per arm, one line per job (its seeds), from the steps
table. x is samples drawn, not steps: arms that spend samples at different rates line up."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from analysis.arms import iter_arms

PANELS = {"reward_mean": "reward (mean per step)", "kl": "KL to the reference (k3)", "clip_frac": "clip fraction",
          "grad_norm": "gradient norm (before clipping)", "tie_frac": "tie fraction of groups"}
POINTS = 25  # about this many smoothing windows per job: a step-level curve is mostly noise
DPI = 160
FONT = 12


def health_curves(steps: pd.DataFrame, arm: Sequence[str], points: int = POINTS) -> pd.DataFrame:
    """Per job, each PANELS metric as a centred rolling mean over `window` steps (window = steps //
    points, at least 1), against samples_total. Columns: arm, job, step, samples_total, metric, value.
    Steps with no update (NaN losses) are left out of their metric's mean."""
    out = []
    for label, rows in iter_arms(steps, list(arm)) if arm else [("all", steps)]:
        for job, run in rows.groupby("job", observed=True, sort=False):
            run = run.sort_values("step")
            window = max(len(run) // points, 1)
            for metric in PANELS:
                values = run[metric].astype(float).rolling(window, center=True, min_periods=1).mean()
                out.append(pd.DataFrame({"arm": label, "job": str(job), "step": run["step"].to_numpy(),
                                         "samples_total": run["samples_total"].to_numpy(), "metric": metric,
                                         "value": values.to_numpy()}))
    columns = ["arm", "job", "step", "samples_total", "metric", "value"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


def health_figure(steps: pd.DataFrame, arm: Sequence[str], path: str | Path, points: int = POINTS) -> Path:
    """Draw the training-health figure (5 panels and a legend, 3 x 2) to `path` (PNG, DPI dots per
    inch, fonts readable at GitHub's page width). `arm`: the config keys that tell arms apart
    (analysis.arms.arm_keys); empty: every job is one arm."""
    curves = health_curves(steps, arm, points)
    arms = list(dict.fromkeys(curves["arm"]))
    fig = Figure(figsize=(11, 6.6), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3).ravel()
    fig.subplots_adjust(left=0.07, right=0.985, top=0.95, bottom=0.1, wspace=0.32, hspace=0.42)
    for ax, (metric, title) in zip(axes, PANELS.items()):
        ax.set_title(title, fontsize=FONT + 1)
        ax.tick_params(labelsize=FONT - 1)
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_xlabel("samples drawn", fontsize=FONT)
        ax.grid(alpha=0.3)
        for i, name in enumerate(arms):
            for _, line in curves[(curves["arm"] == name) & (curves["metric"] == metric)].groupby("job", sort=False):
                ax.plot(line["samples_total"], line["value"], color=f"C{i % 10}", lw=1.6, alpha=0.8)
        if metric in ("clip_frac", "tie_frac"):
            ax.set_ylim(bottom=0)
        if metric == "tie_frac":
            ax.set_ylim(top=1.02)
    legend = axes[-1]
    legend.axis("off")
    handles = [legend.plot([], [], color=f"C{i % 10}", lw=2.5)[0] for i in range(len(arms))]
    jobs = curves.groupby("arm", sort=False)["job"].nunique()
    labels = [f"{name.replace(', ', chr(10))}\n({jobs[name]} job{'s' if jobs[name] != 1 else ''})" for name in arms]
    legend.legend(handles, labels, loc="center left", bbox_to_anchor=(-0.1, 0.5), fontsize=FONT, frameon=False,
                  labelspacing=0.9,
                  title=f"one line per job (seed),\nrolling mean over 1/{points} of its steps", title_fontsize=FONT - 1)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    return out

