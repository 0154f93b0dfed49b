"""Tied groups: how often a group is unanimous, by difficulty and over training, beside the
prediction P_tie = p^G + (1-p)^G.

A tie is the table's `tie` (reward std <= eps: zero advantage, no signal), split by `tie_kind`
into all_correct and all_wrong; a tie of kind "other" (tied on a non-binary reward) counts in
`tie_frac` but in neither split. The prediction is about correctness alone, so a format reward
that breaks ties shows up as observed below predicted. Intervals are bootstraps clustered by
prompt: the groups of one prompt share its pass rate, so they are not independent trials.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from analysis.data.arms import job_arms, unit_keys
from analysis.data.codes import cell_codes, column_codes, dense_ranks, group_ids, stable_order
from analysis.data.labels import natural_sorted, sort_naturally
from analysis.stats.binomial import comb_ratio
from analysis.stats.intervals import cluster_ratio_cis

KINDS = ("all_correct", "all_wrong")
MIN_PROMPTS = 5  # a cell's prompts (the bootstrap's clusters) below which it gets no interval: too few to resample


def step_window(step: ArrayLike, window: int | None) -> np.ndarray:
    """The first step of each step's window of `window` steps (0 for all when window is None)."""
    step = np.asarray(step)
    return np.zeros_like(step) if window is None else step // window * window
ASSUMPTION = ("a prompt's pass rate p does not move within its step window: then the estimate from its "
              "first-round groups at the window's other steps is unbiased for p^G + (1-p)^G; training moves p, "
              "and under drift the estimate mixes pass rates from before and after, so it is biased")


def predict_ties(groups: pd.DataFrame, window: int | None = None, pool: Sequence[str] = ("job",)) -> pd.Series:
    """Each group's predicted tie probability, estimated without the group itself.

    The prompt's pass rate comes from its first-round (round 0) groups at *other* steps of the
    same step window and `pool` (by default: the same job). Round 0 is drawn whatever happened
    before, so whether there is an estimate, and its value, never depend on the group being
    predicted (redraws after a tie would). From those m samples with c correct,
    C(c, G)/C(m, G) + C(m-c, G)/C(m, G) estimates p^G + (1-p)^G, unbiased under `ASSUMPTION`
    (the plug-in (c/m)^G is biased upwards even then). Fewer than G such samples: NaN; NaN for a group of one
    answer too (SPO's), which cannot tie: the formula's 1 would be no prediction of anything.
    """
    size = groups["group_size"].to_numpy()
    first = groups["round"].to_numpy() == 0
    c0 = np.where(first, groups["n_correct"].to_numpy(), 0)  # (rows,) round-0 correct samples
    m0 = np.where(first, size, 0)  # (rows,) round-0 samples
    step = groups["step"].to_numpy()
    cell = _group_ids(*(groups[k] for k in pool), groups["prompt_id"], step_window(step, window))
    # a cell's steps by their place in its window (a few values, where the steps themselves span the run)
    at_step = _pair_ids(cell, step - step_window(step, window))
    c = np.bincount(cell, c0)[cell] - np.bincount(at_step, c0)[at_step]
    m = np.bincount(cell, m0)[cell] - np.bincount(at_step, m0)[at_step]
    predicted = np.where(size >= 2, _unbiased_tie(c, m, size), np.nan)
    return pd.Series(predicted, index=groups.index, name="predicted_tie")


def _group_ids(*columns: ArrayLike) -> np.ndarray:
    """Dense int codes (0..groups-1) for the rows' combinations of values of `columns`, in no particular
    order (they only index bincounts): counted or hashed, never sorted."""
    codes = [dense_ranks(col) if isinstance(col, np.ndarray) else column_codes(col) for col in columns]
    return group_ids(np.ravel_multi_index(codes, [c.max() + 1 for c in codes]))[0]


def _pair_ids(cell: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """Ids of the rows' (cell, offset) pairs, `cell` dense codes and `offset` non-negative, that only index a
    bincount: `cell * span + offset` where that table stays within a few times the rows (no codes to count
    again), else `_group_ids`. A bincount sums each id's rows in row order however the ids are numbered."""
    span = int(offset.max(initial=0)) + 1
    if len(cell) and offset.min() >= 0 and (int(cell.max()) + 1) * span <= 4 * len(cell) + 1024:
        return cell * span + offset
    return _group_ids(cell, offset)


def _unbiased_tie(c: np.ndarray, m: np.ndarray, size: np.ndarray) -> np.ndarray:
    """C(c,G)/C(m,G) + C(m-c,G)/C(m,G) where m >= G, else NaN; computed once per distinct (c, m, G)."""
    triple = [x.astype(np.int64) for x in (c, m, size)]
    rank, distinct = group_ids(np.ravel_multi_index(triple, [int(x.max(initial=0)) + 1 for x in triple]))
    one = np.empty(len(distinct), np.int64)
    one[rank] = np.arange(len(rank))  # a row of each distinct triple
    return _unbiased_tie_each(c[one], m[one], size[one])[rank]


def _unbiased_tie_each(c: np.ndarray, m: np.ndarray, size: np.ndarray) -> np.ndarray:
    """`_unbiased_tie`, element by element."""
    enough = m >= size
    m_safe = np.where(enough, m, size)  # keeps comb_ratio's domain; those entries become NaN
    c_safe = np.where(enough, c, 0)
    tie = comb_ratio(c_safe, m_safe, size) + comb_ratio(m_safe - c_safe, m_safe, size)
    return np.where(enough, tie, np.nan)


class TieRows(NamedTuple):
    """What `tie_fractions` needs of each group whatever the grouping: its prompt (codes), the four
    ratios' numerators (tie, all_correct, all_wrong, observed - predicted) and denominators (1, 1, 1,
    has a prediction; None counts 1), each (groups,), and the prediction with NaN as 0."""

    prompt: np.ndarray
    numerators: tuple[np.ndarray, ...]
    denominators: tuple[np.ndarray | None, ...]
    predicted: np.ndarray


def tie_rows(groups: pd.DataFrame, predicted: pd.Series | None = None) -> TieRows:
    """The per-group arrays of `tie_fractions`, to share between several groupings of the same groups."""
    pred = np.full(len(groups), np.nan) if predicted is None else predicted.to_numpy(float)
    has = ~np.isnan(pred)
    tie = groups["tie"].to_numpy(bool)
    gap = np.where(has, tie.astype(float) - np.where(has, pred, 0.0), 0.0)  # (groups,) observed - predicted
    kinds = tuple((groups["tie_kind"] == k).to_numpy(bool) for k in KINDS)
    prompt = pd.factorize(groups["prompt_id"])[0]  # int codes in order of appearance: the clusters' order
    return TieRows(prompt, (tie, *kinds, gap), (None, None, None, has), np.where(has, pred, 0.0))


def tie_fractions(groups: pd.DataFrame, by: Sequence[str] = ("group_size", "sampler"), window: int | None = None,
                  predicted: pd.Series | None = None, level: float = 0.95, n_boot: int = 1000,
                  rows: TieRows | None = None) -> pd.DataFrame:
    """Tie fractions by difficulty and `by` (and by step window when `window` is set), beside the
    mean of `predicted` (aligned with `groups`, e.g. from `predict_ties`) over the groups that have
    a prediction. Intervals are percentile bootstraps clustered by prompt: every group of a prompt,
    in every job of the cell, is resampled together, since a prompt's groups share its pass rate.
    `rows`: `tie_rows(groups, predicted)`, when the caller tabulates the same groups several ways.

    Columns: difficulty, *by, [step_window], groups, prompts, tie_frac, all_correct_frac,
    all_wrong_frac, ci_low, ci_high (tie_frac's), predicted_tie_frac, predicted_groups,
    observed_minus_predicted with its interval (diff_ci_low, diff_ci_high; over the groups that have
    a prediction), the counts (ties, all_correct, all_wrong), then the intervals of the two kinds.
    A cell of fewer than MIN_PROMPTS prompts has no intervals (NaN), and one whose groups with a
    prediction come from fewer than MIN_PROMPTS prompts no prediction (`predicted_groups` still counts them).
    """
    keys = ["difficulty", *by, *(["step_window"] if window else [])]
    columns = [*keys, "groups", "prompts", "tie_frac", "all_correct_frac", "all_wrong_frac", "ci_low", "ci_high",
               "predicted_tie_frac", "predicted_groups", "observed_minus_predicted", "diff_ci_low", "diff_ci_high",
               "ties", *KINDS, *(f"{kind}_ci_{end}" for kind in KINDS for end in ("low", "high"))]
    if groups.empty:
        return pd.DataFrame(columns=columns)
    rows = tie_rows(groups, predicted) if rows is None else rows
    frame = pd.DataFrame({k: groups[k] for k in keys if k != "step_window"})
    if window:
        frame["step_window"] = step_window(groups["step"].to_numpy(), window)
    cell, cell_keys = cell_codes(frame, keys)  # (groups,) each group's cell
    low, high = cluster_ratio_cis(cell, rows.prompt, rows.numerators, rows.denominators, n_boot, level)
    n = len(cell_keys)
    sizes = np.bincount(cell, minlength=n)
    width = int(rows.prompt.max()) + 1
    prompts = np.bincount(dense_ranks(cell * width + rows.prompt, keys=True)[1] // width, minlength=n)
    few = prompts < MIN_PROMPTS  # (cells,) resampling 2 prompts gives [min, max], not a 95% interval
    low[few], high[few] = np.nan, np.nan
    has = rows.denominators[3].astype(bool)  # (groups,) those with a prediction
    pairs = dense_ranks(cell[has] * width + rows.prompt[has], keys=True)[1] if has.any() else np.zeros(0, np.int64)
    predicted_prompts = np.bincount(pairs // width, minlength=n)  # (cells,) prompts with a prediction
    unpredicted = predicted_prompts < MIN_PROMPTS  # a prediction from a prompt or two is no check of it
    ties, *kind_counts, predicted_groups = (np.bincount(cell, weights=x, minlength=n).astype(np.int64)
                                            for x in (*rows.numerators[:3], rows.denominators[3]))
    # each cell's means as numpy sums them (pairwise, in row order): the rows of a cell, contiguous
    order = stable_order(cell)
    bounds = np.r_[0, np.cumsum(sizes)]
    pred_sorted, gap_sorted = rows.predicted[order], rows.numerators[3][order]
    pred_sum = [pred_sorted[lo:hi].sum() for lo, hi in zip(bounds[:-1], bounds[1:])]
    gap_sum = [gap_sorted[lo:hi].sum() for lo, hi in zip(bounds[:-1], bounds[1:])]
    out = []
    for c, key in enumerate(cell_keys):
        row = dict(zip(keys, key))
        found = predicted_groups[c]
        row |= {"groups": sizes[c], "prompts": prompts[c], "ties": ties[c],
                **{k: kind_counts[i][c] for i, k in enumerate(KINDS)},
                "predicted_tie_frac": pred_sum[c] / found if found and not unpredicted[c] else np.nan,
                "predicted_groups": found}
        for i, (kind, count) in enumerate((("tie", "ties"), *((k, k) for k in KINDS))):
            prefix = "" if kind == "tie" else f"{kind}_"  # the tie interval keeps the short names ci_low, ci_high
            row[f"{kind}_frac"] = row[count] / sizes[c]
            row[f"{prefix}ci_low"], row[f"{prefix}ci_high"] = low[c, i], high[c, i]
        ok = found and not unpredicted[c]
        row["observed_minus_predicted"] = gap_sum[c] / found if ok else np.nan
        row["diff_ci_low"], row["diff_ci_high"] = (low[c, 3], high[c, 3]) if ok else (np.nan, np.nan)
        out.append(row)
    return sort_naturally(pd.DataFrame(out, columns=columns), keys)


def samples_by_window(groups: pd.DataFrame, by: Sequence[str], window: int) -> pd.DataFrame:
    """Per `by` and step window: samples_drawn, the mean over the jobs of the samples each had drawn by
    the window's last group (where arms draw at different rates, steps are not comparable; this is)."""
    frame = groups[["job", *by, "samples_total"]].assign(step_window=groups["step"].to_numpy() // window * window)
    per_job = frame.groupby(["job", *by, "step_window"], observed=True)["samples_total"].max().reset_index()
    out = per_job.groupby([*by, "step_window"], observed=True)["samples_total"].mean().rename("samples_drawn")
    return out.reset_index()


def per_job_first_rounds(groups: pd.DataFrame, arm: Sequence[str], last_step: int | None = None,
                         reward: bool = False) -> pd.DataFrame:
    """Each job's first-round (round 0) tie fraction (`tie_frac`; with `reward`, also its mean train reward,
    `reward`) over its steps up to `last_step` (None: all), beside its arm keys and seed: one row a job, what
    `compare_arms_by_seed` compares."""
    keep = groups["round"].to_numpy() == 0
    if last_step is not None:
        keep &= groups["step"].to_numpy() <= last_step
    first = groups[keep]
    aggs = {"tie_frac": ("tie", "mean"), **({"reward": ("reward_mean", "mean")} if reward else {})}
    return first.groupby("job", observed=True).agg(**aggs).join(job_arms(first, unit_keys(first, arm)))


SPLIT = ("unanswered", "answered", "mixed")  # an all-wrong tie: no sample answered, every one did, some did


def all_wrong_split(groups: pd.DataFrame, by: Sequence[str], window: int) -> pd.DataFrame:
    """All-wrong first-round ties split by whether the model answered (`n_answered`: samples an answer could be
    read from): `unanswered` (none: a format failure), `answered` (all: a capability failure), `mixed`; per `by`,
    difficulty (and "all") and phase: each job's own first `window` steps ("first"), its own last `window` ("last":
    a job that ended early is read at its own end, never at another job's) and every step ("all"). Columns: *by,
    difficulty, phase, steps (the steps the phase covers in the jobs of the row's arm: "1–8", or "30–37 to
    68–75" where their windows differ), all_wrong, unanswered, answered, mixed, unanswered_share. Groups without
    `n_answered` (runs written before it, replayed groups) are left out; empty where none has it."""
    columns = [*by, "difficulty", "phase", "steps", "all_wrong", *SPLIT, "unanswered_share"]
    if "n_answered" not in groups:
        return pd.DataFrame(columns=columns)
    wrong = groups[(groups["round"].to_numpy() == 0) & (groups["tie_kind"] == "all_wrong").to_numpy()
                   & groups["n_answered"].notna().to_numpy()]
    if wrong.empty:
        return pd.DataFrame(columns=columns)
    answered = wrong["n_answered"].to_numpy(float)
    kind = np.where(answered == 0, "unanswered", np.where(answered == wrong["group_size"].to_numpy(), "answered",
                                                          "mixed"))
    ends = job_steps(groups)  # each job's own first and last step, of every group it drew
    step = wrong["step"].to_numpy()
    start = wrong["job"].map(ends["first"]).to_numpy(np.int64)
    end = wrong["job"].map(ends["last"]).to_numpy(np.int64)
    frame = wrong[list(by)].assign(difficulty=wrong["difficulty"].astype(str), kind=kind, job=wrong["job"].to_numpy(),
                                   first=step < start + window, last=step > end - window)
    levels = natural_sorted(frame["difficulty"].unique())
    # each arm's jobs (every job where `by` is empty): the windows a row of the arm counts over
    arm_ends = {_key(k): ends.loc[list(rows["job"].unique())]
                for k, rows in groups[[*by, "job"]].groupby(list(by), observed=True, sort=False)} if by else {}
    records = []
    for phase, rows in (("first", frame[frame["first"]]), ("last", frame[frame["last"]]), ("all", frame)):
        for level, cell in [*((lv, rows[rows["difficulty"] == lv]) for lv in levels), ("all", rows)]:
            for key, part in cell.groupby(list(by), observed=True, sort=False) if by else [((), cell)]:
                counts = {k: int((part["kind"] == k).sum()) for k in SPLIT}
                total = len(part)
                if total:
                    records.append({**dict(zip(by, _key(key))), "difficulty": level, "phase": phase,
                                    "steps": _phase_steps(arm_ends[_key(key)] if by else ends, phase, window),
                                    "all_wrong": total, **counts, "unanswered_share": counts["unanswered"] / total})
    return pd.DataFrame(records, columns=columns)


def _key(key: object) -> tuple:
    """A group-by's key as a tuple, whether pandas gave a tuple or one value."""
    return key if isinstance(key, tuple) else (key,)


def job_steps(groups: pd.DataFrame) -> pd.DataFrame:
    """Each job's first and last step (`first`, `last`), indexed by job: the ends of its own training, which a
    window of its first or last steps is counted from (jobs of one sweep end at different steps)."""
    ends = groups.groupby("job", observed=True)["step"].agg(["min", "max"]).astype(np.int64)
    return ends.rename(columns={"min": "first", "max": "last"})


def _phase_steps(ends: pd.DataFrame, phase: str, window: int) -> str:
    """The steps a phase covers in these jobs (`ends`: `job_steps` rows): one range where they share it, else the
    earliest and latest job's ranges ("30–37 to 68–75")."""
    if phase == "all":
        spans = sorted({(int(a), int(b)) for a, b in zip(ends["first"], ends["last"])})
    elif phase == "first":
        spans = sorted({(int(a), int(min(a + window - 1, b))) for a, b in zip(ends["first"], ends["last"])})
    else:
        spans = sorted({(int(max(b - window + 1, a)), int(b)) for a, b in zip(ends["first"], ends["last"])})
    text = [f"{a}–{b}" if a != b else str(a) for a, b in (spans[0], spans[-1])]
    return text[0] if len(spans) == 1 else f"{text[0]} to {text[1]}"
