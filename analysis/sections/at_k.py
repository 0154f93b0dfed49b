"""pass@k and cons@k against k: which checkpoint "final" is for each job, the curves per difficulty,
and all difficulties pooled as a table.

The curves come from the eval rows alone (`curves_of`, begun with the held-out sections while the groups
load); the section adds what the groups say of each job's checkpoints (`section`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import value_text
from analysis.data.checkpoints import BASE, FINAL, checkpoint_rank, job_checkpoints
from analysis.data.labels import sort_naturally
from analysis.data.load import Tables
from analysis.measures.at_k import at_k_curves, saturated
from analysis.render import markdown
from analysis.render import scores as figures
from analysis.render.writer import Files
from analysis.sections.jobs import sampler_stops
from analysis.sections.section import Context, Section
from analysis.stats.at_k import METRICS


@dataclass(frozen=True)
class Curves:
    """What the eval rows make of the section: the curves, their figure and CSV (`files`), and the markdown
    that shows and links them."""

    curves: pd.DataFrame
    files: Files
    figure: str
    csv: str


def curves_of(tables: Tables, ctx: Context, scores: pd.DataFrame | None) -> Curves | None:
    """The curves from the eval rows and the held-out section's per-prompt scores (`prompt_scores` at every
    k it reports); None without eval tables."""
    eval, arm = tables.eval, list(ctx.arm)
    if eval.empty:
        return None
    files = Files()
    curves = at_k_curves(eval, arm, scores=scores)
    return Curves(curves, files, files.figure("at_k", figures.at_k, curves, by=arm, names=dict(ctx.names),
                                               colours=ctx.colours),
                  files.csv("at_k", curves))


def section(tables: Tables, ctx: Context, drawn: Curves | None) -> Section | None:
    """The pass@k and cons@k section from its curves (`curves_of`); None without them (no eval tables)."""
    if drawn is None:
        return None
    arm, curves = list(ctx.arm), drawn.curves
    files = Files(csvs=dict(drawn.files.csvs), figures=dict(drawn.files.figures))
    pooled = curves[curves["difficulty"] == "all"].drop(columns="difficulty")
    jobs = job_checkpoints_table(tables, arm)
    status = tables.jobs.set_index(tables.jobs["job"].astype(str))["status"]
    early = [f"`{j}` (last eval at step {f}, trained to step {t:.0f}, status {status[j]})"
             for j, f, t in zip(jobs["job"], jobs["final_step"], jobs["last_trained_step"])
             if f < t or status[j] != "done"]
    if early:
        ends = ("**Not at the end of its budget**: " + ", ".join(early) + ". For these jobs `final` is an earlier "
                "checkpoint, not the end of the budget.")
    elif jobs["last_trained_step"].isna().any():
        ends = "Some jobs have no group tables: whether their final checkpoint is their last training step is unknown."
    else:
        stops = sampler_stops(tables)  # done, but short of the budget: never "every job is done" unsaid
        ends = ("Every job is done and its final checkpoint is its last training step" + (
            f"; {len(stops)} of them ({', '.join(f'`{s.job}`' for s in stops)}) stopped by their sampler before "
            "their budget (under Jobs)." if stops else "."))
    text = "\n".join([
        "## pass@k and cons@k", "",
        "Unbiased pass@k, 1 − C(n−c, k)/C(n, k), and exact majority-vote cons@k (expected over every k-subset "
        "of the n samples; a missing answer never wins; tied top answers split the win), as means over prompts, "
        "with 95% percentile bootstrap intervals clustered by prompt: a prompt's scores in every job of the arm "
        "are averaged and resampled together (at base the jobs are one model on the same prompts).", "",
        "### Checkpoints", "",
        "**final** is each job's last evaluated step, which is the end of its sample budget when the job "
        "finished and was evaluated at its last step (`final_step` ≥ `last_trained_step`). Steps and "
        f"samples per job: {files.csv('checkpoints', jobs)}.", "",
        ends, "",
        "### Curves per difficulty", "",
        "pass@k (top row) and cons@k (bottom row) against k, one column per difficulty and one for all prompts "
        "pooled. A colour per arm; solid: final (the legend gives each job's step); dashed: base, one black line "
        "when every arm's base scores the same (one base model); bands: the finals' 95% intervals. Arm "
        "differences at equal k, with intervals, are in the tables below and the forest plot under the tests.", "",
        saturated_note(curves, ctx.names),
        drawn.figure, "",
        "All difficulties pooled:", "",
        markdown.table_unless_zero(pooled, ("mean", "ci_low", "ci_high"), by_k(pooled, arm)), "",
        f"As CSV: {drawn.csv}, per difficulty and pooled (`all`).",
    ])
    return Section(text=text, files=files)


def saturated_note(curves: pd.DataFrame, names: Mapping[str, str]) -> str:
    """The difficulties left out of the figure (flat at 0 or 1), said once; "" when none is."""
    flat = saturated(curves[curves["checkpoint"].isin([BASE, FINAL])])
    if not flat:
        return ""
    shown = ", ".join(f"{d} ({names[d]})" if d in names else str(d) for d in flat)
    return (f"Difficulties left out of the figure (every score within 0.05 of 0 or 1 at every k, base and final): "
            f"{shown}; their numbers are in the CSV.\n")


def job_checkpoints_table(tables: Tables, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job with eval rows: its arm, seed, evaluated steps, the final step, the last step
    it trained (groups), and the samples and tokens it had drawn by its final checkpoint."""
    steps = job_checkpoints(tables.eval)
    per_job = steps.groupby("job", sort=False).agg(
        evaluated_steps=("step", lambda s: ", ".join(map(str, sorted(s.astype(int))))),
        final_step=("step", "max"))
    keys = [k for k in (*arm, "seed") if k in tables.jobs.columns]
    out = tables.jobs.assign(job=tables.jobs["job"].astype(str), **{k: tables.jobs[k].map(value_text) for k in keys})
    out = out[["job", *dict.fromkeys(keys)]]
    out = out.join(per_job, on="job", how="inner")
    groups = tables.groups
    if groups.empty:
        return out.assign(last_trained_step=math.nan, samples_at_final=math.nan, tokens_at_final=math.nan)
    # grouped by load's categorical codes (not its million labels), each job named as text
    names = pd.Index(groups["job"].cat.categories.map(str), name="job")
    codes, step = groups["job"].cat.codes.to_numpy(), groups["step"].to_numpy()

    def largest(values: pd.DataFrame | pd.Series, rows: np.ndarray | None = None) -> pd.DataFrame | pd.Series:
        """Each job's largest of `values` (over `rows`, a mask, where given), indexed by the job's name."""
        found = values.groupby(codes).max() if rows is None else values[rows].groupby(codes[rows]).max()
        return found.set_axis(names[found.index])

    # (groups,) each group's job's final step; NaN: the job has no eval rows
    final = names.to_series().map(per_job["final_step"]).to_numpy(float)[codes]
    drawn = largest(groups[["samples_total", "tokens_total"]], step <= final)
    trained = largest(groups["step"])
    return out.assign(last_trained_step=out["job"].map(trained),
                      samples_at_final=out["job"].map(drawn["samples_total"]),
                      tokens_at_final=out["job"].map(drawn["tokens_total"]))


def by_k(curves: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per arm, checkpoint and metric; one column per k holding "mean [ci_low, ci_high]"."""
    text = [f"{markdown.cell(m, 3)} [{markdown.cell(lo, 3)}, {markdown.cell(hi, 3)}]"
            for m, lo, hi in zip(curves["mean"], curves["ci_low"], curves["ci_high"])]
    wide = curves.assign(text=text).pivot(index=[*arm, "checkpoint", "steps", "samples", "metric"], columns="k",
                                          values="text")
    wide = wide.rename(columns=lambda k: f"k={k}").reset_index()
    return sort_naturally(wide, [*arm, "checkpoint", "metric"],
                          {"checkpoint": checkpoint_rank, "metric": METRICS.index})
