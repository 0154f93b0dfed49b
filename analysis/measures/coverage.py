"""Coverage after RL (Yue et al. 2025, "Does reinforcement learning really incentivize reasoning
capacity in LLMs beyond the base model?"): does the trained model's pass@1 gain hold at large k, or
does the base model catch up and pass it?

Per difficulty and arm: the mean over held-out prompts of unbiased pass@k (`analysis.stats.at_k.pass_at_k`)
for every k up to the eval's n, for the base model (step 0) and the trained one (each job's last
evaluated step), over the held-out prompts and the arm's jobs (seeds). The
curves *cross* at the smallest k where the base model is ahead (trained - base < 0) having been
behind at k = 1 (curves that only meet, both at 1, do not cross). The gain's interval at each k is
Student's t over the per-seed gains (each job's trained − base, its mean over the prompts), as the
held-out comparisons' "final vs base" rows (one quantity, one interval): for new seeds on these prompts.
Where an arm has one seed, no seed replicate exists: a percentile bootstrap over prompts at that seed (new
prompts, this trained model). The crossing's interval is read from the per-k intervals: from the first k
whose interval reaches below zero to the first whose interval lies below it ("never" where none does).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import DEFAULT_ARM, value_text
from analysis.data.labels import sort_naturally
from analysis.measures.comparisons import seed_of_jobs
from analysis.stats.at_k import pass_at_k
from analysis.stats.intervals import bootstrap_mean_ci, seed_difference_ci


def prompt_curves(eval: pd.DataFrame, by: Sequence[str] = (DEFAULT_ARM,)) -> pd.DataFrame:
    """pass@k of each prompt in each job for k = 1..n (the fewest samples any prompt has at either
    checkpoint), base and trained. Long frame: *by, seed (the job's, as the held-out comparisons name
    it), prompt_id, difficulty, model, k, pass."""
    step = eval["step"].to_numpy()
    last = eval.groupby("job", observed=True)["step"].transform("max").to_numpy()
    model = np.where(step == 0, "base", np.where(step == last, "trained", None))
    rows = eval.assign(model=model)[model != None]  # noqa: E711 (elementwise)
    rows = rows[rows.groupby("job", observed=True)["step"].transform("max") > 0]  # jobs that trained
    # an arm's values as the report names them (a null one is "null", never dropped); prompts keep their
    # type, so they sort as the held-out comparisons' score matrices do
    rows = rows.assign(**{k: rows[k].map(value_text) for k in by}, difficulty=rows["difficulty"].astype(str),
                       seed=rows["job"].astype(str).map(seed_of_jobs(rows)))
    keys = [*by, "seed", "prompt_id", "difficulty", "model"]
    counts = rows.groupby(keys, observed=True)["correct"].agg(n="size", c="sum").reset_index()
    n_max = int(counts["n"].min())
    ks = np.arange(1, n_max + 1)  # (K,)
    values = pass_at_k(counts["n"].to_numpy()[:, None], counts["c"].to_numpy()[:, None], ks[None, :])  # (rows, K)
    wide = pd.concat([counts[keys], pd.DataFrame(values, columns=ks)], axis=1).set_index(keys)
    wide.columns.name = "k"
    return wide.stack().rename("pass").reset_index()


def coverage(eval: pd.DataFrame, by: Sequence[str] = (DEFAULT_ARM,), n_boot: int = 2000, level: float = 0.95,
             seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curves, crossings).

    curves: *by, difficulty ("all" too), k, prompts, seeds, base, trained, gain (trained - base),
    gain_low, gain_high. crossings: *by, difficulty, prompts, seeds, interval (what the gain's intervals are
    over: "seeds", or "prompts, one seed"), gain_at_1, cross_k (smallest k with gain < 0 after a positive gain
    at 1; NaN: none up to n), cross_low (the first k after the first whose gain interval reaches below zero),
    cross_high (the first k whose gain interval lies below zero, given an interval above zero at k = 1), each
    inf where there is none, n (the largest k).

    With two seeds or more, each k's interval is Student's t over the per-seed gains (a job's base and
    trained scores are paired by its seed; `seed_difference_ci`): at k = 1 on all prompts it is the arm's
    "final vs base" pass@1 comparison's. With one seed, a percentile bootstrap over prompts (`n_boot`
    resamples, `seed`), every k under the same resamples."""
    long = prompt_curves(eval, by)
    long = pd.concat([long, long.assign(difficulty="all")], ignore_index=True)
    curve_rows, cross_rows = [], []
    # one pivot of every arm and difficulty (a pivot's own cost is most of one this size); each one's rows,
    # less the columns it has no value in, are the pivot of its rows alone
    keys = [*by, "difficulty"]
    pivot = long.pivot_table(index=[*keys, "prompt_id"], columns=["model", "seed", "k"], values="pass",
                             aggfunc="mean", observed=True)
    for key in long[keys].drop_duplicates().itertuples(index=False, name=None):  # in order of appearance
        wide = pivot.loc[key].dropna(axis=1, how="all")
        if wide.empty or not {"base", "trained"} <= set(wide.columns.get_level_values("model")):
            continue
        # the seeds scored at both checkpoints (a job may lack one), then the prompts every one of them scored
        both = set(wide["trained"].columns.get_level_values("seed"))
        seeds = [s for s in wide["base"].columns.get_level_values("seed").unique() if s in both]
        ks = np.array(sorted(wide["base"].columns.get_level_values("k").unique()))
        columns = pd.MultiIndex.from_product([["base", "trained"], seeds, ks])
        wide = (wide if wide.columns.equals(columns) else wide.reindex(columns=columns)).dropna()
        if wide.empty:
            continue
        shape = (len(wide), len(seeds), len(ks))
        base, trained = (wide[m].to_numpy().reshape(shape) for m in ("base", "trained"))  # (prompts, seeds, K)
        gain = (trained - base).mean(axis=(0, 1))  # (K,)
        if len(seeds) > 1:  # new seeds on these prompts: Student's t over the per-seed gains
            low, high = seed_difference_ci(base, trained, True, level)
            over = "seeds"
        else:  # no seed replicate: new prompts for this one trained model
            low, high = bootstrap_mean_ci((trained - base)[:, 0, :], n_boot, level, seed)
            over = "prompts, one seed"
        for i, k in enumerate(ks):
            curve_rows.append((*key, int(k), len(wide), len(seeds), base[:, :, i].mean(), trained[:, :, i].mean(),
                               gain[i], low[i], high[i]))
        cross_low, cross_high = crossing_bounds(low, high, ks)
        cross_rows.append((*key, len(wide), len(seeds), over, gain[0], crossing_k(gain, ks), cross_low, cross_high,
                           int(ks[-1])))
    curves = pd.DataFrame(curve_rows, columns=[*by, "difficulty", "k", "prompts", "seeds", "base", "trained", "gain",
                                               "gain_low", "gain_high"])
    crossings = pd.DataFrame(cross_rows, columns=[*by, "difficulty", "prompts", "seeds", "interval", "gain_at_1",
                                                  "cross_k", "cross_low", "cross_high", "n"])
    return (sort_naturally(curves, [*by, "difficulty", "k"]), sort_naturally(crossings, [*by, "difficulty"]))


def crossing_bounds(low: np.ndarray, high: np.ndarray, ks: np.ndarray) -> tuple[float, float]:
    """The crossing's interval from the gain's intervals at each of `ks` (lows, highs): from the first k after
    the first whose interval reaches below zero (the base may be ahead there) to the first whose interval lies
    below zero (the base is ahead there), the latter only where the interval at the first k lies above zero (a
    gain to lose); inf where there is none."""
    low, high = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
    may = np.flatnonzero(low[1:] < 0)
    ahead = np.flatnonzero(high < 0)
    start = float(ks[1:][may[0]]) if len(may) else np.inf
    end = float(ks[ahead[0]]) if len(ahead) and len(low) and low[0] > 0 else np.inf
    return start, end


def crossings_k(gains: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """`crossing_k` of each row of (rows, K) `gains`."""
    below = gains < 0
    first = below.argmax(axis=1)
    return np.where((gains[:, 0] > 0) & below.any(axis=1), ks[first].astype(float), np.nan)


def crossing_k(gain: np.ndarray, ks: np.ndarray) -> float:
    """The smallest k at which `gain` (trained - base over ks) is below 0, given gain > 0 at the first k;
    NaN when the gain never starts positive or never turns negative."""
    return float(crossings_k(np.asarray(gain, dtype=float)[None], ks)[0]) if len(gain) else float("nan")
