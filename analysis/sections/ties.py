"""Ties: first-round tie fractions by difficulty and over training, beside the prediction p^G + (1−p)^G,
redraws apart; the first-round tie fraction's rows of the tests' family, and the overall calibration
the Findings quote."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms, job_arms, short_label, unit_keys
from analysis.data.config import ALIASES
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.measures.group_size import binary, correct_count_misses
from analysis.measures.ties import (
    ASSUMPTION,
    MIN_PROMPTS,
    TieRows,
    all_wrong_split,
    per_job_first_rounds,
    predict_ties,
    samples_by_window,
    tie_fractions,
    tie_rows,
)
from analysis.render import markdown
from analysis.render import ties as figures
from analysis.render.canvas import arm_rows, colours_by
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.seeds import compare_arms_by_seed

TIE_COLUMNS = ("difficulty", "group_size", "sampler", "groups", "prompts", "tie_frac", "all_correct_frac",
               "all_wrong_frac", "ci_low", "ci_high", "predicted_tie_frac", "observed_minus_predicted", "diff_ci_low",
               "diff_ci_high")
STEP_WINDOWS = 10  # windows over training: points per line in the ties-over-steps figure


def prediction_text(predicted: int, groups: int, window: int, misread: tuple[int, int] = (0, 0)) -> str:
    """What the prediction columns are, or in one line that there is none to show. `misread`: (first-round groups
    of two or more, those whose tie their correct count misreads: `correct_count_misses`)."""
    if not binary(*misread):
        return (f"No prediction p^G + (1−p)^G: the rewards are not binary ({misread[1]:,} of {misread[0]:,} "
                "first-round groups tie otherwise than their correct count says: a group ties when its rewards have "
                "zero spread, and `correct` is a threshold on a reward that takes other values), so a tie cannot be "
                "predicted from correct counts; the prediction columns are empty.")
    if not predicted:
        return (f"No prediction p^G + (1−p)^G: no prompt recurred within a {window}-step window of its job "
                f"(0 of {groups} first-round groups have one), so the prediction columns are empty.")
    return (f"`predicted_tie_frac` is the mean of p^G + (1−p)^G over groups, each prompt's term estimated from its "
            f"first-round groups at the other steps of the same job within {window}-step windows. It assumes "
            f"{ASSUMPTION}. `observed_minus_predicted` is tie_frac − predicted over the groups that have a "
            f"prediction ({predicted} of {groups} first-round groups). A prompt seen at exactly two steps of a "
            "window adds nothing to the mean gap (each of its groups predicts the other), so the check has power "
            "only where prompts recur three times or more per window.")


def apart_text(ties: pd.DataFrame, by: list[str], over: str = "") -> str:
    """The caption's word on predictions left out of a figure because they cover too few of the groups beside them
    (`render.ties.predicted_apart`), each arm with its counts; "" where there is none. `over`: what a row is,
    for the figure over training ("windows")."""
    apart = ties[figures.predicted_apart(ties).to_numpy()]
    if apart.empty:
        return ""
    parts = []
    for label, rows in arm_rows(apart, by):
        levels = ", ".join(natural_sorted(rows["difficulty"].astype(str).unique()))
        counts = f"{int(rows['predictable_groups'].sum()):,} of its {int(rows['groups'].sum()):,}"
        parts.append(f"{short_label(label)} ({counts} first-round groups{' in those windows' if over else ''} at "
                     f"difficulty {levels})")
    return (" No prediction is drawn beside a bar or point most of whose groups no prediction can cover (groups "
            "of one answer, which never tie): " + "; ".join(parts) + " have two answers or more; the tables give "
            "the prediction of those groups alone, by `group_size`.")


def partial_text(by_step: pd.DataFrame, by: list[str]) -> str:
    """The caption's word on partial windows (`render.ties.partial_windows`), or "" where there is none."""
    windows = by_step.loc[figures.partial_windows(by_step, by).to_numpy(), [*by, "step_window"]].drop_duplicates()
    if windows.empty:
        return ""
    return (f" Hollow points: {len(windows)} window{'s' * (len(windows) != 1)} of an arm holding fewer than half the "
            "groups of its median window (a run that ended part way through one), drawn off the lines, without "
            "band or prediction: its few groups a level would end a line at 0 or 1.")


@dataclass(frozen=True, kw_only=True)
class Ties(Section):
    """`comparisons`: every pair of arms on the first-round tie fraction (rows of the tests' family);
    `calibration`: each arm's first-round tie fraction beside its prediction (`tie_fractions` rows over
    all its groups, with the arm's label in `arm`; empty when there are none); `by_difficulty`: each arm's
    first-round groups and tie fraction per difficulty, summed over its jobs (arm, difficulty, groups, tie_frac),
    for the Findings' reversal check."""

    comparisons: pd.DataFrame
    calibration: pd.DataFrame = field(default_factory=pd.DataFrame)
    by_difficulty: pd.DataFrame = field(default_factory=pd.DataFrame)
    answered: pd.DataFrame = field(default_factory=pd.DataFrame)  # `all_wrong_split` by arm (empty: not recorded)


def section(tables: Tables, ctx: Context) -> Ties | None:
    """The ties section; None without group tables."""
    groups, arm = tables.groups, list(ctx.arm)
    if groups.empty:
        return None
    files = Files()
    names = dict(ctx.names)
    split = ("group_size", "sampler", *ALIASES["group_size"], *ALIASES["sampler"])  # the first two columns say these
    by = ["group_size", "sampler", *(k for k in arm if k not in split)]
    window = max(1, math.ceil((int(groups["step"].max()) + 1) / STEP_WINDOWS))
    used = ["job", "prompt_id", "difficulty", "step", "round", "group_size", "n_correct", "tie", "tie_kind",
            "samples_total", *(["n_answered"] if "n_answered" in groups else []), *by, *unit_keys(groups, arm)]
    groups = groups[list(dict.fromkeys(used))]  # the columns read here: the copies below stay small
    misread = correct_count_misses(groups)
    predicted = predict_ties(groups, window=window)
    if not binary(*misread):  # continuous or shaped rewards: correct counts do not say which groups tie
        predicted = pd.Series(np.nan, index=predicted.index)
    first = groups["round"].to_numpy() == 0
    round0, redraws = groups[first], groups[~first]
    rows = tie_rows(round0, predicted[first])  # shared by every table of the first rounds
    by_difficulty = tie_fractions(round0, by, rows=rows)
    by_step = tie_fractions(round0, by, window=window, rows=rows)
    by_step = by_step.merge(samples_by_window(round0, by, window), on=[*by, "step_window"], how="left")
    shown_by, shown_difficulty, shown_step, pooled = shown_in_figures(round0, rows, arm, window, by, by_difficulty,
                                                                      by_step)
    # the report's colour of each arm, by the keys the figures tell arms apart by (the group size drawn first)
    colours = colours_by(ctx.colours, job_arms(round0, list(dict.fromkeys([*shown_by, *arm]))), arm, shown_by)
    comparisons = (compare_arms_by_seed(per_job_first_rounds(groups, arm).reset_index(), arm, ["tie_frac"])
                   .assign(metric="tie_frac (first rounds)", interval="seeds"))
    calibration = overall_calibration(round0, rows, arm)
    few = int(by_difficulty["ci_low"].isna().sum())
    too_few = (f" {few} of the {len(by_difficulty)} rows by difficulty have fewer than {MIN_PROMPTS} prompts: no "
               "interval for them (too few prompts to resample)." if few else "")
    answered = all_wrong_split(round0, arm, window)
    shown_difficulty = with_predictable(with_unanswered(shown_difficulty, round0, shown_by), round0, shown_by)
    shown_step = with_predictable(shown_step, round0, shown_by, window)
    redraw_text = (files.table("ties_redraws", tie_fractions(redraws, by)[[*TIE_COLUMNS[:10], *by[2:]]])
                   if len(redraws) else "No redraws: every group is a first round.")
    text = "\n".join([
        "## Ties", "",
        "A group *ties* when its rewards have zero spread (zero advantage). Arms are compared on **first-round "
        "groups only** (round 0): a redraw happens only because the round before it tied, so counting redraws "
        "would charge one arm for its own rule. Redraws are shown apart below. Intervals are 95% percentile "
        "bootstraps clustered by prompt (all groups of a prompt, in every job of the row, move together)."
        + pooled + too_few, "",
        prediction_text(int(predicted[first].notna().sum()), int(first.sum()), window, misread), "",
        "### First-round ties by difficulty", "",
        "Each bar is an arm's first-round groups at one difficulty, pooled over training: all-correct ties "
        "(solid) under all-wrong ties (hatched); the black bar is the 95% interval of their sum (the tie fraction) "
        "and the hollow diamond the prediction p^G + (1−p)^G"
        + ("; cross-hatched, the all-wrong ties in which no sample gave an answer the task could read (below)"
           if "unanswered_frac" in shown_difficulty else "")
        + ". Pooled over training, a level whose pass rate moves shows its average; the next figure follows it over "
        "samples drawn." + apart_text(shown_difficulty, shown_by), "",
        files.figure("ties_by_difficulty", figures.ties_by_difficulty, shown_difficulty, by=shown_by, names=names,
                     colours=colours),
        "",
        files.table("ties_by_difficulty", by_difficulty, [*TIE_COLUMNS, *by[2:]]), "",
        *answered_text(answered, window, files),
        "### Redraws (rounds after a tie), apart", "",
        redraw_text, "",
        "### Observed against predicted over training", "",
        f"First-round groups per {window}-step window (`step_window` is its first step), placed at the samples "
        "the arm's jobs had drawn by the window's end (`samples_drawn`, mean over jobs), so arms that draw at "
        "different rates line up. Columns: difficulties; rows: all-correct ties, all-wrong ties (learning moves "
        "groups from the second to the first; collapse fills the second) and all ties with the prediction "
        "(diamonds). Bands: 95% intervals clustered by prompt." + partial_text(shown_step, shown_by)
        + apart_text(shown_step, shown_by, over="windows"), "",
        files.figure("ties_over_samples", figures.ties_over_samples, shown_step, by=shown_by, names=names,
                     colours=colours), "",
        # a row per window, difficulty and arm: the figure carries it, the CSV holds it
        f"As CSV, with observed − predicted and its interval per window: {files.csv('ties_by_step', by_step)}",
    ])
    return Ties(text=text, files=files, comparisons=comparisons, calibration=calibration,
                by_difficulty=arm_tie_fractions(round0, arm), answered=answered)


def shown_in_figures(round0: pd.DataFrame, rows: TieRows, arm: list[str], window: int, by: list[str],
                     by_difficulty: pd.DataFrame, by_step: pd.DataFrame
                     ) -> tuple[list[str], pd.DataFrame, pd.DataFrame, str]:
    """(keys, tie fractions by difficulty, by step window, the caption's word) as the figures show them: the
    tables' (`by`), but pooled over group sizes where an arm draws first-round groups of several (knapsack would
    be a bar and a line per size)."""
    if "group_size" in arm or round0.groupby(list(arm), observed=True)["group_size"].nunique().max() <= 1:
        return by, by_difficulty, by_step, ""
    shown_by = list(arm)
    shown_step = tie_fractions(round0, shown_by, window=window, rows=rows).merge(
        samples_by_window(round0, shown_by, window), on=[*shown_by, "step_window"], how="left")
    return shown_by, tie_fractions(round0, shown_by, rows=rows), shown_step, (
        " Arms that draw first-round groups of several sizes (knapsack's allocations, Reinforce-Ada's rounds) are "
        "pooled over their sizes in the figures (the prediction is per group, so it pools alike); the tables split "
        "them by `group_size`.")


def overall_calibration(round0: pd.DataFrame, rows: TieRows, arm: list[str]) -> pd.DataFrame:
    """Each arm's first-round tie fraction over all its groups beside its prediction, its label in `arm` (empty
    without groups)."""
    every = pd.Categorical.from_codes(np.zeros(len(round0), np.int8), ["all"])  # not a column of 1M strings
    overall = tie_fractions(round0[["difficulty", "prompt_id", *arm]].assign(difficulty=every), arm, rows=rows)
    if not len(overall):
        return pd.DataFrame()
    return pd.concat([part.assign(arm=label) for label, part in iter_arms(overall, arm)], ignore_index=True)


def with_predictable(fractions: pd.DataFrame, round0: pd.DataFrame, by: list[str], window: int | None = None
                     ) -> pd.DataFrame:
    """`fractions` (`tie_fractions` by difficulty, or by step window with `window`) with `predictable_groups`: the
    first-round groups of each row that a prediction can cover at all (two answers or more: a group of one never
    ties), for the figures to draw a prediction only beside a bar or point made mostly of them
    (`render.ties.predicted_apart`)."""
    if fractions.empty:
        return fractions
    keys = [*by, "difficulty", *(["step_window"] if window else [])]
    frame = round0[list(by)].assign(difficulty=round0["difficulty"].astype(str),
                                    predictable=round0["group_size"].to_numpy() >= 2)
    if window:
        frame["step_window"] = round0["step"].to_numpy() // window * window
    counted = frame.groupby(keys, observed=True)["predictable"].sum().rename("predictable_groups").reset_index()
    out = fractions.assign(difficulty=fractions["difficulty"].astype(str)).merge(counted, on=keys, how="left")
    return out.assign(predictable_groups=out["predictable_groups"].fillna(0).astype(np.int64))


def with_unanswered(fractions: pd.DataFrame, round0: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """`fractions` (`tie_fractions` by difficulty) with `unanswered_frac`: all_wrong_frac times the share of the
    first-round all-wrong groups in which no sample answered (`n_answered` 0), for the figure; as it was where the
    runs did not record answers."""
    if "n_answered" not in round0 or round0["n_answered"].isna().all():
        return fractions
    wrong = round0[(round0["tie_kind"] == "all_wrong").to_numpy() & round0["n_answered"].notna().to_numpy()]
    share = (wrong.assign(difficulty=wrong["difficulty"].astype(str), unanswered=wrong["n_answered"].eq(0))
             .groupby([*by, "difficulty"], observed=True)["unanswered"].mean().rename("unanswered_share").reset_index())
    out = fractions.assign(difficulty=fractions["difficulty"].astype(str)).merge(share, on=[*by, "difficulty"],
                                                                                 how="left")
    return out.assign(unanswered_frac=out["all_wrong_frac"] * out["unanswered_share"].fillna(0.0)).drop(
        columns="unanswered_share")


def answered_text(split: pd.DataFrame, window: int, files: Files) -> list[str]:
    """The subsection on all-wrong ties with and without an answer; nothing where the runs did not record it."""
    if split.empty:
        return []
    shown = split[split["phase"] != "all"]
    return [
        "### All-wrong ties: answered or not", "",
        "An all-wrong tie where no sample gave an answer the task could read (`unanswered`: a format failure, "
        "cured by a looser answer format, shots or a format reward) is not one where every sample answered wrongly "
        "(`answered`: a capability failure, cured by easier problems or more samples); `mixed` has both. First-"
        f"round all-wrong ties of each arm in each job's own first {window} steps (`first`) and its own last "
        f"{window} (`last`: a job that ended early is read at its own end, never at the sweep's); `steps` gives the "
        "steps a row covers (\"30–37 to 68–75\": its jobs ended at different steps). "
        "`unanswered_share` = unanswered / all_wrong. The CSV adds every step (`all`).", "",
        (f"{markdown.table(shown)}\n\nAs CSV, with every step: {files.csv('all_wrong_answered', split)}"
         if len(shown) <= 24 else f"Per arm, difficulty and phase: {files.csv('all_wrong_answered', split)}"), "",
    ]


def arm_tie_fractions(round0: pd.DataFrame, arm: list[str]) -> pd.DataFrame:
    """Each arm's first-round groups and tie fraction per difficulty, summed over its jobs."""
    parts = []
    for label, rows in iter_arms(round0, arm):
        counted = rows.groupby(rows["difficulty"].astype(str), observed=True)["tie"].agg(groups="size", tied="sum")
        parts.append(counted.reset_index().assign(arm=label, tie_frac=counted["tied"].to_numpy() / counted["groups"]
                                                  .to_numpy()))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
