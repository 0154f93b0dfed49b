"""What trained: informative and wasted samples per arm and difficulty, and against samples drawn
(the wasted fraction's rows of the tests' family)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.measures.informative import COMPARABLE_METRIC, comparable_per_job
from analysis.measures.spend import across_seeds, budget_curves, counted_how, flags, per_job_spend, spend
from analysis.render import curves as figures
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.seeds import compare_arms_by_seed

BUDGET_POINTS = 20  # equal-budget points per curve
NO_GROUPS = "No group tables were found: no tie or equal-budget analysis."
UNIT_WEIGHTS = {"prompt": "a unit of several rounds weighs in the loss as one prompt (the paper's mean over prompts)",
                "sample": "every sample weighs the same in the loss, so a unit of r rounds weighs r groups"}


@dataclass(frozen=True, kw_only=True)
class Trained(Section):
    """`comparisons`: every pair of arms on wasted_frac (rows of the tests' family; None without group
    tables); `unit_weight`: how a unit of several rounds weighs in the loss, in words; `counted`: each
    group's samples, informative and wasted (`flags`), for the sections at other budgets; `per_job`:
    each job's wasted fraction (`per_job_spend`), for the ranking; `by_difficulty`: each arm's
    wasted_frac per difficulty (`spend`, with the arm's label in `arm`), for the Findings."""

    comparisons: pd.DataFrame | None = None
    by_difficulty: pd.DataFrame | None = None
    unit_weight: str
    counted: pd.DataFrame | None = None
    per_job: pd.DataFrame | None = None
    comparable: pd.DataFrame | None = None  # each job's informative share counted alike for every arm (`informative`)


def unit_weight(jobs: pd.DataFrame) -> str:
    """How a training unit of several rounds weighs in the loss (`algo.unit_weight`), as the jobs say."""
    if "algo.unit_weight" not in jobs or jobs["algo.unit_weight"].isna().all():
        return f"{UNIT_WEIGHTS['prompt']} (the default; `algo.unit_weight` is not in these configs)"
    values = natural_sorted(jobs["algo.unit_weight"].dropna().astype(str).unique())
    return "; ".join(f"`algo.unit_weight={v}`: {UNIT_WEIGHTS.get(v, 'unknown')}" for v in values)


def section(tables: Tables, ctx: Context) -> Trained:
    """Informative and wasted samples; says so when there are no group tables."""
    groups, arm = tables.groups, list(ctx.arm)
    weight = unit_weight(tables.jobs)
    if groups.empty:
        return Trained(text=NO_GROUPS, unit_weight=weight)
    files = Files()
    how = counted_how(groups)
    counted = flags(groups)
    by_arm = spend(groups, arm, counted=counted)
    by_difficulty = spend(groups, arm, by_difficulty=True, counted=counted)
    curves = budget_curves(groups, arm, "samples", BUDGET_POINTS, counted=counted)
    bands = across_seeds(curves, arm)
    per_job = per_job_spend(groups, arm, counted=counted)
    # the informative share counted alike for every arm (a tie rule's forced advantages and a sampler's cap left
    # out: `measures.informative`): what the ranking orders arms by; as trained, what their rules gave
    comparable = comparable_per_job(groups, arm)
    comparisons = compare_arms_by_seed(per_job, arm, ["wasted_frac"])
    if not np.allclose(comparable["trained_per_1000"], comparable["comparable_per_1000"]):  # some arm has a rule
        comparisons = pd.concat([comparisons, compare_arms_by_seed(comparable, arm, ["wasted_frac_comparable"])
                                 .assign(metric=COMPARABLE_METRIC)], ignore_index=True)
    comparisons = comparisons.assign(interval="seeds")
    counting = ("read from the groups table's `n_informative`, which the trainer takes from the advantages the "
               "update used" if how == "recorded" else
               "**recounted** (these runs predate the `n_informative` column): the used groups of a prompt at one "
               "step are its unit, informative when their pooled rewards are not all equal"
               if how == "recounted" else f"{how} (some jobs predate the `n_informative` column)")
    text = "\n".join([
        "## What trained: informative and wasted samples", "",
        "A sample is **informative** when its advantage in its training unit was nonzero; every other sample "
        "drawn is **wasted** (its unit tied, or it never entered the update). A training unit is the samples "
        "that shared one baseline: one group, or under `resample_on_tie` with `pool=all` all rounds of a prompt "
        "(a tied round pooled with a later mixed one trains). `wasted_frac` = wasted / drawn is the one number "
        "reported (the informative fraction is 1 − it). Counts here are " + counting + ". "
        f"Under `pool=all`, {weight}.", "",
        "Per arm, summed over its jobs (seeds):", "",
        files.table("budget_by_arm", by_arm), "",
        "Per arm and difficulty:", "",
        files.table("budget_by_difficulty", by_difficulty), "",
        f"The wasted fraction against samples drawn ({BUDGET_POINTS} equal budgets up to the common budget, the most "
        "samples every job drew). Lines: mean over seeds; bands: lowest to highest seed. The CSV adds "
        "`train_accuracy_round0`, a secondary measure on *training* prompts: the fraction correct of the "
        "first-round samples drawn in each window (redraws go to prompts that just tied, so they are left out; "
        "the training-health figure's reward shows the same trend); held-out results above come first.", "",
        files.figure("budget_samples", figures.budget_curves, bands, arm=arm, budget="samples",
                     colours=ctx.colours), "",
        f"Per job and budget point: {files.csv('budget_curves_samples', curves)}",
    ])
    labelled = pd.concat([part.assign(arm=label) for label, part in iter_arms(by_difficulty, arm)], ignore_index=True)
    return Trained(text=text, files=files, comparisons=comparisons, unit_weight=weight, counted=counted,
                   per_job=per_job, by_difficulty=labelled,
                   comparable=comparable.assign(wasted_frac=comparable["wasted_frac_comparable"]))
