"""Group size: from measured pass rates, what each G would buy, by difficulty (G from 2 up to the
fewest samples any prompt was measured with).

For a prompt of pass rate p a group of G is informative (not tied) with chance 1 - p^G - (1-p)^G
(`analysis.stats.binomial.tie_probability`). Over a difficulty's prompts, one group each:
- informative_frac: the expected share of groups (and, all groups being of size G, of samples) that
  are informative;
- samples_per_informative_group: G / informative_frac, samples drawn per informative group;
- informative_groups_per_1k: 1000 informative_frac / G (`advise_group_size`).
informative_frac only grows with G, so "informative samples per sample drawn" is maximised by the
largest G tried; what a larger G costs is fewer prompts per sample. The table names both ends: the G
with most informative groups per sample (`advise_group_size`, with a per-group overhead in samples)
and the smallest G that reaches `share` of the informative fraction of the largest G.

From measured counts (c correct of n per prompt: the base model's eval samples, else first-round
groups) the chance a group of G ties is estimated without bias, C(c, G)/C(n, G) + C(n−c, G)/C(n, G),
for G up to n only (`measured_sizes`): a larger G would extrapolate from a plug-in p = c/n, which
counts a prompt never solved in n samples as p = 0.

All of it reads ties from correct counts, which holds where a group ties exactly when its samples are all correct
or all wrong (a binary reward). Where the rewards are not binary (continuous scores, a threshold on them read as
`correct`), a group of all-"wrong" samples of different rewards does not tie: `correct_count_misses` counts the
first-round groups whose tie the correct count misreads, and the report then predicts nothing from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from analysis.data.labels import sort_naturally
from analysis.measures.ties import predict_ties, tie_fractions
from analysis.stats.binomial import comb_ratio, tie_probability

SIZES = range(2, 65)


class GroupSizeAdvice(NamedTuple):
    """`best`: the group size with most informative groups per sample; `table`: every size tried."""

    best: int
    table: pd.DataFrame


def advise_group_size(pass_rates: ArrayLike, sizes: Iterable[int] = range(2, 33),
                      overhead: float = 0.0) -> GroupSizeAdvice:
    """The group size G that maximises informative (non-tied) groups per sample, for prompts
    with the given pass rates drawn one group each: mean(1 - P_tie) / (G + overhead).

    `overhead` is a group's fixed cost in samples (prompt prefill, scheduling). Without it the
    answer is always 2 (3 ties with it): 1 - P_tie grows concavely in G, so the signal per
    sample only falls as G grows; an overhead is what makes larger groups worth it.

    >>> advise_group_size([0.1, 0.5, 0.9], overhead=8).best
    6
    """
    g = np.asarray(list(sizes))  # (sizes,)
    p = np.asarray(pass_rates, dtype=float)[:, None]  # (prompts, 1)
    tie = tie_probability(p, g).mean(axis=0)  # (sizes,)
    per_1k = 1000 * (1 - tie) / (g + overhead)
    table = pd.DataFrame({"group_size": g, "tie_frac": tie, "informative_per_1k_samples": per_1k})
    best = g[np.flatnonzero(per_1k >= per_1k.max() * (1 - 1e-12))[0]]  # of sizes equal up to rounding, the smallest
    return GroupSizeAdvice(int(best), table)



def prompt_pass_rates(groups: pd.DataFrame, eval: pd.DataFrame | None = None) -> pd.DataFrame:
    """Each prompt's measured pass rate: prompt_id, difficulty, samples, correct, p. From the base
    model's eval rows (step 0) when there are any, else from first-round groups of the training table."""
    if eval is not None and not eval.empty and (eval["step"] == 0).any():
        rows = eval[eval["step"] == 0]
        counts = rows.groupby(["prompt_id", "difficulty"], observed=True)["correct"].agg(samples="size", correct="sum")
    else:
        rows = groups[groups["round"] == 0]
        counts = rows.groupby(["prompt_id", "difficulty"], observed=True).agg(
            samples=("group_size", "sum"), correct=("n_correct", "sum"))
    out = counts.reset_index()
    out[["prompt_id", "difficulty"]] = out[["prompt_id", "difficulty"]].astype(str)
    out["p"] = out["correct"] / out["samples"]
    return out


MISREAD_SHARE = 0.05  # first-round groups whose tie the correct count misreads, above which it predicts nothing


def correct_count_misses(groups: pd.DataFrame) -> tuple[int, int]:
    """(first-round groups of two or more samples, those of them whose recorded tie (zero reward spread) is not
    what their correct count says: a tie of mixed correctness, or all correct or all wrong yet not tied, as
    continuous or shaped rewards make them)."""
    first = groups[(groups["round"].to_numpy() == 0) & (groups["group_size"].to_numpy() >= 2)]
    unanimous = (first["n_correct"].to_numpy() == 0) | (first["n_correct"].to_numpy() == first["group_size"].to_numpy())
    return len(first), int((first["tie"].to_numpy(bool) != unanimous).sum())


def binary(first: int, misread: int) -> bool:
    """Whether correct counts say which groups tie: `correct_count_misses`' (first, misread) within MISREAD_SHARE."""
    return not (first and misread > MISREAD_SHARE * first)


def observed_ties(groups: pd.DataFrame) -> pd.DataFrame:
    """First-round groups by difficulty and G: groups, tie_frac (the recorded ties: zero reward spread)."""
    first = groups[groups["round"].to_numpy() == 0]
    table = first.groupby(["difficulty", "group_size"], observed=True)["tie"].agg(groups="size", tie_frac="mean")
    table = table.reset_index()
    table["difficulty"] = table["difficulty"].astype(str)
    return sort_naturally(table, ["difficulty", "group_size"])


def measured_sizes(rates: pd.DataFrame, sizes: Iterable[int] = SIZES) -> list[int]:
    """The sizes among `sizes` that the measured pass rates can speak for without extrapolating: at most
    the fewest samples any prompt has (a group of G is G of a prompt's samples)."""
    most = int(rates["samples"].min()) if "samples" in rates and len(rates) else 0
    return [g for g in sizes if g <= most]


def _tie_chances(part: pd.DataFrame, g: np.ndarray) -> np.ndarray:
    """(prompts, sizes) chance that a group of G ties: from counts (`samples`, `correct`) the unbiased
    C(c, G)/C(n, G) + C(n − c, G)/C(n, G) (G of the prompt's n samples all alike), else p^G + (1 − p)^G."""
    if {"samples", "correct"} <= set(part.columns):
        n, c = (part[k].to_numpy(float)[:, None] for k in ("samples", "correct"))
        if g.max(initial=0) > n.min(initial=np.inf):
            raise ValueError(f"group size {g.max()} is more than the {int(n.min())} samples some prompt has")
        return comb_ratio(c, n, g[None, :]) + comb_ratio(n - c, n, g[None, :])
    return tie_probability(part["p"].to_numpy()[:, None], g)


def expected_by_size(rates: pd.DataFrame, sizes: Iterable[int] = SIZES) -> pd.DataFrame:
    """By difficulty ("all" too) and G: prompts, informative_frac, samples_per_informative_group,
    informative_groups_per_1k (one group of G per prompt: from each prompt's counts where `rates` has
    them, `_tie_chances`; else at the pass rates `p`)."""
    g = np.asarray(list(sizes))  # (sizes,)
    rows = []
    for level, part in pd.concat([rates, rates.assign(difficulty="all")]).groupby("difficulty", sort=False):
        informative = 1 - _tie_chances(part, g).mean(axis=0)  # (sizes,)
        with np.errstate(divide="ignore"):
            per_group = g / informative
        rows.append(pd.DataFrame({"difficulty": level, "group_size": g, "prompts": len(part),
                                  "informative_frac": informative, "samples_per_informative_group": per_group,
                                  "informative_groups_per_1k": 1000 * informative / g}))
    return sort_naturally(pd.concat(rows, ignore_index=True), ["difficulty", "group_size"])


def best_sizes(rates: pd.DataFrame, sizes: Iterable[int] = SIZES, overhead: float = 0.0,
               share: float = 0.9) -> pd.DataFrame:
    """By difficulty: best_for_groups (most informative groups per sample, with `overhead` samples of
    cost per group), g_at_share (the smallest G whose informative fraction reaches `share` of the
    largest G's), and that largest G's informative fraction."""
    sizes = list(sizes)
    table = expected_by_size(rates, sizes)
    rows = []
    for level, part in table.groupby("difficulty", sort=False):
        top = part["informative_frac"].iloc[-1]
        reach = part["group_size"][part["informative_frac"] >= share * top]
        per_sample = (part["informative_frac"] / (part["group_size"] + overhead)).to_numpy()
        best = int(part["group_size"].iloc[np.flatnonzero(per_sample >= per_sample.max() * (1 - 1e-12))[0]])
        rows.append((level, best, int(reach.iloc[0]) if top > 0 else None, top))
    return pd.DataFrame(rows, columns=["difficulty", "best_for_groups", "g_at_share", "informative_frac_at_max"])


def observed_vs_predicted(groups: pd.DataFrame) -> pd.DataFrame:
    """Where the runs used several group sizes: observed tie fraction of first-round groups by
    difficulty and G beside its prediction from each prompt's pass rate measured on *all* jobs' other
    steps (`predict_ties` pooled across jobs, so sizes borrow each other's measurements). Empty when
    one size was used."""
    round0 = groups["round"].to_numpy() == 0
    if groups["group_size"][round0].nunique() < 2:
        return pd.DataFrame()
    read = ["difficulty", "prompt_id", "step", "round", "group_size", "n_correct", "tie", "tie_kind"]
    first = groups.loc[round0, read].reset_index(drop=True)  # the columns read, not every config column
    predicted = predict_ties(first, pool=())
    return tie_fractions(first, by=("group_size",), predicted=predicted)

