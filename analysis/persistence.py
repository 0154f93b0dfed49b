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

from analysis import markdown
from analysis.labels import sort_naturally

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


def ratio_ci(num: np.ndarray, den: np.ndarray, n_boot: int = 1000, level: float = 0.95,
             seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of sum(num) / sum(den) resampling the rows (clusters) with replacement."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    if len(num) == 0:
        return float("nan"), float("nan")
    draws = np.random.default_rng(seed).integers(0, len(num), size=(n_boot, len(num)))  # (n_boot, clusters)
    counts = np.zeros((n_boot, len(num)))
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = counts @ num / (counts @ den)  # (n_boot,)
    tail = (1 - level) / 2
    return float(np.nanquantile(ratios, tail)), float(np.nanquantile(ratios, 1 - tail))


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


def persistence_section(groups: pd.DataFrame, by: Sequence[str] = ("sampler",),
                        table: pd.DataFrame | None = None) -> str:
    """The report's markdown section on tie persistence (`table`: `persistence(groups, by)` when the
    caller already has it)."""
    table = persistence(groups, by) if table is None else table
    tied = table[(table["kind"] != "mixed") & (table["difficulty"] == "all")]
    lines = ["## Tie persistence", "",
             "A visit is one prompt at one step (all its groups then, pooled); of the prompts tied at one visit, "
             "`tied_again_frac` were tied again at their next visit (either way; `same_kind_frac`: the same way) "
             "and `mixed_frac` became mixed. 95% intervals bootstrap over prompts. GRESO (Zheng et al. 2025) "
             "reports over 90% persistence on its data; skipping tied prompts pays only where it is high.", ""]
    for row in tied.itertuples(index=False):
        arm = ", ".join(f"{k}={getattr(row, k)}" for k in by)
        lines.append(f"- {arm}: {row.kind} visits were tied again at the next visit in {row.tied_again_frac:.1%} "
                     f"of {row.pairs} cases (95% CI {row.ci_low:.1%}–{row.ci_high:.1%}, {row.prompts} prompts).")
    shown = [*by, "difficulty", "kind", "pairs", "prompts", "tied_again_frac", "ci_low", "ci_high", "same_kind_frac",
             "mixed_frac", "samples_per_visit"]
    return "\n".join(lines) + "\n\n" + markdown.table(table[shown])
