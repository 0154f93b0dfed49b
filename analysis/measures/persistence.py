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

from analysis.data.arms import DEFAULT_ARM
from analysis.data.codes import dense_ranks, stable_order, text_codes
from analysis.data.labels import sort_naturally
from analysis.stats.intervals import cluster_ratio_cis

KINDS = ("all_correct", "all_wrong", "mixed")
COLUMNS = ("difficulty", "kind", "pairs", "prompts", "tied_again_frac", "same_kind_frac", "mixed_frac", "ci_low",
           "ci_high", "samples_per_visit")  # after the `by` keys


def visits(groups: pd.DataFrame) -> dict[str, np.ndarray]:
    """One entry per job, prompt and step (a visit), in step order within each job and prompt: job and
    prompt (codes; prompts numbered in their sorted order), samples, n_correct, kind (an index into
    KINDS), and first (the visit's first row in `groups`)."""
    job = pd.factorize(groups["job"])[0]
    prompt = text_codes(groups["prompt_id"])[0]
    step = groups["step"].to_numpy(np.int64)
    step = step - step.min() if len(step) else step
    key = np.ravel_multi_index((job, prompt, step), (job.max(initial=0) + 1, prompt.max(initial=0) + 1,
                                                     step.max(initial=0) + 1))
    order = stable_order(key)  # by job, prompt and step; a visit's rows keep their order
    j, p, k = job[order], prompt[order], key[order]
    start = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    samples = np.add.reduceat(groups["group_size"].to_numpy(np.int64)[order], start)
    correct = np.add.reduceat(groups["n_correct"].to_numpy(np.int64)[order], start)
    kind = np.select([correct == samples, correct == 0], [0, 1], 2)
    return {"job": j[start], "prompt": p[start], "samples": samples, "n_correct": correct,
            "kind": kind, "first": order[start]}


def transitions(visit: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(now, next): indices of consecutive visits of one prompt in one job."""
    same = (visit["job"][1:] == visit["job"][:-1]) & (visit["prompt"][1:] == visit["prompt"][:-1])
    now = np.flatnonzero(same)
    return now, now + 1


def persistence(groups: pd.DataFrame, by: Sequence[str] = (DEFAULT_ARM,), n_boot: int = 1000, level: float = 0.95,
                seed: int = 0) -> pd.DataFrame:
    """By *by, difficulty ("all" too) and the kind of a visit: pairs (a visit and the prompt's next),
    prompts, tied_again_frac (the next visit tied either way), same_kind_frac (tied the same way),
    mixed_frac (the next visit mixed), the interval of tied_again_frac (ci_low, ci_high), and the
    mean samples of a visit. Keys are shown as text, as `value_text` names them (a missing value is
    "null", a cell of its own)."""
    keys = [*by, "difficulty", "kind"]
    visit = visits(groups)
    now, nxt = transitions(visit)
    first = visit["first"][now]  # (pairs,) a row of the visit each pair starts from
    labels, codes = [], []
    for k in (*by, "difficulty"):
        code, label = text_codes(groups[k])
        labels.append(label)
        codes.append(code[first])
    if "all" not in set(labels[-1]):  # every difficulty pooled: the label "all"
        labels[-1] = np.r_[labels[-1], np.array(["all"], dtype=object)]
    pooled = codes[:-1] + [np.full(len(now), list(labels[-1]).index("all"))]
    kind, next_kind = visit["kind"][now], visit["kind"][nxt]
    cell_codes = [np.r_[a, b] for a, b in zip(codes, pooled)] + [np.r_[kind, kind]]  # each pair twice
    cell, cell_keys = _combine(cell_codes)
    tied = np.r_[next_kind, next_kind] != 2
    same = np.r_[next_kind, next_kind] == np.r_[kind, kind]
    samples = np.r_[visit["samples"][now], visit["samples"][now]]
    prompt = np.r_[visit["prompt"][now], visit["prompt"][now]]
    n = len(cell_keys)
    pairs = np.bincount(cell, minlength=n)
    width = prompt.max(initial=0) + 1
    prompts = np.bincount(dense_ranks(cell * width + prompt, keys=True)[1] // width, minlength=n)
    tied_frac = np.bincount(cell, tied, minlength=n) / pairs
    low, high = cluster_ratio_cis(cell, prompt, [tied], [None], n_boot, level, seed)
    table = pd.DataFrame({
        **{k: labels[i][cell_keys[:, i]] for i, k in enumerate((*by, "difficulty"))},
        "kind": np.array(KINDS, dtype=object)[cell_keys[:, -1]], "pairs": pairs, "prompts": prompts,
        "tied_again_frac": tied_frac, "same_kind_frac": np.bincount(cell, same, minlength=n) / pairs,
        "mixed_frac": 1 - tied_frac, "ci_low": low[:, 0], "ci_high": high[:, 0],
        "samples_per_visit": np.bincount(cell, samples, minlength=n) / pairs})
    return sort_naturally(table, keys)


def _combine(codes: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(cell, keys): each row's cell (0..cells-1, in the sorted order of the code tuples) from several
    columns of non-negative codes, and each cell's codes."""
    sizes = [int(c.max(initial=0)) + 1 for c in codes]
    flat = np.ravel_multi_index(codes, sizes) if len(codes[0]) else np.zeros(0, np.int64)
    cell, keys = dense_ranks(flat, keys=True)
    return cell, np.column_stack(np.unravel_index(keys, sizes)) if len(keys) else \
        np.zeros((0, len(codes)), np.int64)
