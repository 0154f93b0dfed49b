"""Learning from ties: what each arm's advantage rule or sampler made of tied groups (the
questions: tied groups that still trained, replays in place of ties, the unanimous shares over training,
and the held-out prompts that started all wrong)."""

from __future__ import annotations

import pandas as pd

from analysis.data.load import Tables
from analysis.measures.recipes import COLUMNS as RECIPE_COLUMNS
from analysis.measures.recipes import recipe_rows, shared_base
from analysis.measures.tie_learning import (
    WINDOWS,
    from_unanimous_start,
    shares_over_training,
    split_reused,
    tie_outcomes,
)
from analysis.render import tie_learning as figures
from analysis.render.writer import Files
from analysis.sections.section import Context, Section

OUTCOME_COLUMNS = ("jobs", "groups", "all_correct_share", "all_wrong_share", "tied_trained", "tied_trained_share",
                   "tied_trained_samples", "replayed", "replayed_samples")


def applies(tables: Tables, arm: list[str]) -> bool:
    """The section is shown where ties can teach or be replaced: a job's advantage rule is not eq. 3's, or a
    group was replayed. (A tied round pooled with a later mixed one under resample_on_tie's `pool=all` also
    trains; the What-trained section counts it.)"""
    groups = tables.groups
    if groups.empty:
        return False
    rules = tables.jobs["algo.advantage"].dropna().astype(str) if "algo.advantage" in tables.jobs \
        else pd.Series([], dtype=str)
    return "algo.advantage" in arm or bool((rules != "grpo").any()) or not split_reused(groups)[1].empty


def section(tables: Tables, ctx: Context) -> Section | None:
    """The section; None where `applies` is false."""
    groups, arm = tables.groups, list(ctx.arm)
    if not applies(tables, arm):
        return None
    files = Files()
    outcomes = tie_outcomes(groups, arm)
    shares = shares_over_training(groups, arm)
    started = from_unanimous_start(tables.eval, arm)
    lines = [
        "## Learning from ties", "",
        "What each arm made of its tied groups. A group is **tied** when its rewards are all equal (all correct or "
        "all wrong); under plain GRPO every advantage of a tied group is 0, so it trains nothing. An advantage rule "
        "can give it a signal (NGRPO: a negative one to all-wrong groups; RL-ZVP: entropy-shaped token advantages "
        "to both kinds): such a group is counted as **tied but trained** (`tied_trained`: tied groups with a "
        "nonzero advantage in the update; `tied_trained_samples`: their samples), and is *informative* in the "
        "sections above (a nonzero advantage), although tied. A replay buffer trains an earlier mixed group in "
        "place of a tie: `replayed` groups (`replayed_samples`) were drawn and counted at an earlier step and are "
        "never counted as draws here or elsewhere in this report; the tie they replaced stays a tied, wasted draw. "
        "`all_correct_share` and `all_wrong_share` are shares of the groups an arm **drew**; `tied_trained_share` is "
        "a share of its **tied** groups (those that still trained, of all that tied); each per job, then the mean "
        "over seeds.", "",
        files.table("tie_outcomes", outcomes, [*arm, *OUTCOME_COLUMNS]), "",
    ]
    if not shares.empty:
        lines += [f"Over training ({WINDOWS} equal spans of samples drawn, up to the most every job drew): the "
                  "share of drawn groups tied all correct (prompts the policy has mastered, or collapsed onto) and "
                  "all wrong (prompts it cannot yet solve). Bands: 95% t intervals over seeds.", "",
                  files.figure("tie_learning_shares", figures.unanimous_over_training, shares, by=arm,
                               colours=ctx.colours),
                  "", f"As CSV: {files.csv('tie_learning_shares', shares)}", ""]
    if not started.empty:
        lines += ["Held-out prompts by how they started: at each job's first checkpoint, prompts whose samples were "
                  "all wrong (`start=all_wrong`) or all right (`all_correct`); `accuracy_end` is the mean over jobs "
                  "of each job's accuracy on its own such prompts at its last checkpoint (95% t interval over "
                  "seeds; `prompts`: the mean count per job; a job with no such prompt is left out, `jobs` says "
                  "how many remain). From all wrong, any rise is learning a prompt the group never rewarded at "
                  "the start (the samples are a fixed prompt set, so part of a rise is regression to the mean of "
                  "a prompt's pass rate, the same for every arm).", "",
                  files.table("tie_learning_start", started), ""]
    lines += recipes(tables, arm, files)
    return Section(text="\n".join(lines).rstrip() + "\n", files=files)


def recipes(tables: Tables, arm: list[str], files: Files) -> list[str]:
    """Each arm against its method's published recipe (`analysis.measures.recipes`): the base recipe the arms
    share, named in one sentence, and the table of each arm's departures."""
    rows = recipe_rows(tables.jobs, arm)
    if rows.empty:
        return []
    base = shared_base(tables.jobs, arm)
    shared = "No two arms share one recipe (the objective's keys differ between every pair)."
    if base:
        labels, keys = base
        sep = "; " if any(", " in label for label in labels) else ", "  # a label of several keys has commas
        which = f"All {len(labels)} arms" if len(labels) == len(rows) else f"{len(labels)} of the {len(rows)} arms"
        shared = (f"{which} ({sep.join(labels)}) run on one base recipe "
                  f"({', '.join(f'{k} {v}' for k, v in keys.items())}"
                  "): they differ in what they do with ties, not in the objective, so each departs from its own "
                  "paper where the table says.")
    return ["### Each arm against its paper's recipe", "",
            "The recipe each arm's method was published with, read from its paper and official code "
            "(grpo-lab's `docs/RECIPES.md` gives the source of every value), against the arm's config: clip "
            "(`algo.eps_low`, `algo.eps_high`), KL weight "
            "(`algo.beta`), loss aggregation (`algo.loss_agg`), the advantage's std (`algo.std`, `algo.std_eps`), "
            "updates a batch (`algo.mu`), the share of drawn answers that train (PODS's keep) and the sampler's "
            "filter. `departures`: each key where the arm differs (none: \"as the paper\" where the recipe is "
            "verified, that is every value was read in a source, else \"none from the values found\"); `verified`: "
            "whether `docs/RECIPES.md` verified the recipe (no: its values are what the repository carried or the "
            "part of it found, and \"paper\" in `departures` is that value); `not_settable`: what "
            "the paper's recipe needs that no config key sets. With one update a batch of fresh samples every "
            "ratio is exactly 1, so a clip departure there changes nothing (marked inert). " + shared, "",
            files.table("recipes", rows, list(RECIPE_COLUMNS)), ""]
