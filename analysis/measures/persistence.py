"""Tie persistence: of the prompts tied at one visit, how many are tied again at their next visit,
and how many become mixed (GRESO, Zheng et al. 2025, reports over 90% on its data; it is what makes
skipping a prompt before sampling it pay).

A *visit* is one prompt at one step of one job: every group drawn for it then, pooled (resampling
rounds, knapsack's allocation, Reinforce-Ada's rounds), so a visit is tied when it taught nothing.
Its kind is all_correct, all_wrong or mixed by correctness (with the default binary reward, exactly
the table's tie kinds). A prompt a sampler skipped (greso, band) has no visit: its next visit is the
next time it was drawn. Intervals are percentile bootstraps over prompts (the prompt is the
independent unit; its consecutive visits are not).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.labels import sort_naturally
from analysis.stats.intervals import ratio_ci

KINDS = ("all_correct", "all_wrong", "mixed")


def visits(groups: pd.DataFrame, by: Sequence[str] = ("sampler",)) -> pd.DataFrame:
    """One row per job, prompt and step, in step order within each job and prompt: job, *by,
    prompt_id, difficulty, step, samples, n_correct, kind."""
    keys = ["job", "prompt_id", "step"]
    frame = pd.DataFrame({
        **{k: groups[k].astype(str) for k in ("job", "prompt_id", "difficulty", *by)},
        "step": groups["step"].astype(np.int64), "samples": groups["group_size"].astype(np.int64),
        "n_correct": groups["n_correct"].astype(np.int64),
    })
    out = frame.groupby(keys, sort=True).agg(
        **{k: (k, "first") for k in ("difficulty", *by)}, samples=("samples", "sum"), n_correct=("n_correct", "sum"),
    ).reset_index()
    out["kind"] = np.select([out["n_correct"] == out["samples"], out["n_correct"] == 0], KINDS[:2], KINDS[2])
    return out[["job", *by, "prompt_id", "difficulty", "step", "samples", "n_correct", "kind"]]


def transitions(visit_rows: pd.DataFrame) -> pd.DataFrame:
    """Consecutive visits of each prompt in each job: the visit's columns plus next_kind and next_step."""
    same = (visit_rows["job"].to_numpy()[1:] == visit_rows["job"].to_numpy()[:-1]) & (
        visit_rows["prompt_id"].to_numpy()[1:] == visit_rows["prompt_id"].to_numpy()[:-1])
    first = visit_rows.iloc[:-1][same].reset_index(drop=True)
    nxt = visit_rows.iloc[1:][same].reset_index(drop=True)
    return first.assign(next_kind=nxt["kind"].to_numpy(), next_step=nxt["step"].to_numpy())


def persistence(groups: pd.DataFrame, by: Sequence[str] = ("sampler",), n_boot: int = 1000, level: float = 0.95,
                seed: int = 0) -> pd.DataFrame:
    """By *by, difficulty ("all" too) and the kind of a visit: pairs (a visit and the prompt's next),
    prompts, tied_again_frac (the next visit tied either way), same_kind_frac (tied the same way),
    mixed_frac (the next visit mixed), the interval of tied_again_frac (ci_low, ci_high), and the
    mean samples of a visit."""
    pairs = transitions(visits(groups, by))
    pairs = pd.concat([pairs, pairs.assign(difficulty="all")], ignore_index=True)
    pairs["tied_again"] = (pairs["next_kind"] != "mixed").astype(float)
    pairs["same_kind"] = (pairs["next_kind"] == pairs["kind"]).astype(float)
    rows = []
    for key, part in pairs.groupby([*by, "difficulty", "kind"], sort=False):
        per_prompt = part.groupby("prompt_id").agg(n=("tied_again", "size"), tied=("tied_again", "sum"))
        low, high = ratio_ci(per_prompt["tied"], per_prompt["n"], n_boot, level, seed)
        rows.append((*key, len(part), len(per_prompt), part["tied_again"].mean(), part["same_kind"].mean(),
                     1 - part["tied_again"].mean(), low, high, part["samples"].mean()))
    columns = [*by, "difficulty", "kind", "pairs", "prompts", "tied_again_frac", "same_kind_frac", "mixed_frac",
               "ci_low", "ci_high", "samples_per_visit"]
    return sort_naturally(pd.DataFrame(rows, columns=columns), [*by, "difficulty", "kind"])
