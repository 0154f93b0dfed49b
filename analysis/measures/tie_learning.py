"""What each arm made of its ties: how many drawn groups tied each way, how many tied groups still
trained (an advantage rule such as RL-ZVP or NGRPO gives them a signal), how many groups were
replayed in place of ties, the unanimous shares over training, and what became of the held-out
prompts that started unanimous.

A replayed group (`reused`) was drawn and counted at an earlier step: it is never a draw here; its
samples are counted apart. Every share is per job first, then averaged over seeds (a seed is the
independent unit), with Student's t interval over seeds where one is given.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.stats.intervals import SHARE, t_mean_ci

WINDOWS = 4  # training is cut into this many equal spans of samples drawn
START_KINDS = {"all_wrong": 0.0, "all_correct": 1.0}  # a held-out prompt's kind at the first checkpoint


def split_reused(groups: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(drawn rows, replayed rows). Tables without the `reused` column (older runs) replayed nothing."""
    if "reused" not in groups:
        return groups, groups.iloc[:0]
    reused = groups["reused"].fillna(False).astype(bool).to_numpy()
    if not reused.any():  # no copy of every row (and config column) where nothing was replayed
        return groups, groups.iloc[:0]
    return groups[~reused], groups[reused]


def _per_job(drawn: pd.DataFrame, replayed: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job: its drawn groups and samples, tied groups by kind, tied groups that trained, replays."""
    tied = drawn["tie"].astype(bool).to_numpy()
    informative = drawn["n_informative"].fillna(0).to_numpy() if "n_informative" in drawn else np.zeros(len(drawn))
    frame = pd.DataFrame({
        "job": drawn["job"], **{k: drawn[k] for k in arm},
        "groups": 1, "samples": drawn["group_size"].to_numpy(),
        "all_correct": (drawn["tie_kind"] == "all_correct").to_numpy(),
        "all_wrong": (drawn["tie_kind"] == "all_wrong").to_numpy(),
        "tied_trained": tied & (informative > 0),
        "tied_trained_samples": np.where(tied, informative, 0),
    })
    per_job = frame.groupby(["job", *arm], observed=True, dropna=False).sum().reset_index()
    per_job = per_job[per_job["groups"] > 0]
    counts = replayed.groupby("job", observed=True).agg(replayed=("group_size", "size"),
                                                        replayed_samples=("group_size", "sum"))
    per_job = per_job.join(counts, on="job")
    per_job[["replayed", "replayed_samples"]] = per_job[["replayed", "replayed_samples"]].fillna(0).astype(int)
    return per_job


def tie_outcomes(groups: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm: jobs; drawn groups and samples (sums over jobs); the mean over jobs of the all-correct and
    all-wrong shares of drawn groups; tied groups that trained (count, share of tied groups, their informative
    samples); groups and samples replayed in place of ties."""
    arm = list(arm)
    drawn, replayed = split_reused(groups)
    per_job = _per_job(drawn, replayed, arm)
    tied = per_job["all_correct"] + per_job["all_wrong"]
    per_job = per_job.assign(all_correct_share=per_job["all_correct"] / per_job["groups"],
                             all_wrong_share=per_job["all_wrong"] / per_job["groups"],
                             tied_trained_share=(per_job["tied_trained"] / tied.where(tied > 0)).fillna(0.0))
    out = per_job.groupby(arm, observed=True, dropna=False, sort=False).agg(
        jobs=("job", "size"), groups=("groups", "sum"), samples=("samples", "sum"),
        all_correct_share=("all_correct_share", "mean"), all_wrong_share=("all_wrong_share", "mean"),
        tied_trained=("tied_trained", "sum"), tied_trained_share=("tied_trained_share", "mean"),
        tied_trained_samples=("tied_trained_samples", "sum"), replayed=("replayed", "sum"),
        replayed_samples=("replayed_samples", "sum"))
    return out.reset_index()


def shares_over_training(groups: pd.DataFrame, arm: Sequence[str], windows: int = WINDOWS) -> pd.DataFrame:
    """Per arm and window of samples drawn (`windows` equal spans of the common budget, the most samples
    every job drew): the mean over jobs of the all-correct and all-wrong shares of the groups drawn in it,
    with its seeds' t interval (`t_mean_ci`, cut to [0, 1]). A group belongs to the window of the samples drawn
    before its step."""
    arm = list(arm)
    drawn, _ = split_reused(groups)
    if drawn.empty:
        return pd.DataFrame()
    done = drawn.groupby("job", observed=True)["samples_total"].max()
    budget = float(done.min())
    # the samples drawn before a group's step: the job's total after the previous step
    step_totals = drawn.groupby(["job", "step"], observed=True)["samples_total"].max().rename("after").reset_index()
    step_totals["before"] = step_totals.groupby("job", observed=True)["after"].shift(fill_value=0)
    rows = drawn.merge(step_totals[["job", "step", "before"]], on=["job", "step"], how="left")
    rows = rows[rows["before"] < budget]
    window = np.minimum((rows["before"].to_numpy() / budget * windows).astype(int), windows - 1)
    frame = pd.DataFrame({"job": rows["job"], **{k: rows[k] for k in arm}, "window": window,
                          "all_correct": (rows["tie_kind"] == "all_correct").to_numpy(float),
                          "all_wrong": (rows["tie_kind"] == "all_wrong").to_numpy(float)})
    per_job = frame.groupby(["job", *arm, "window"], observed=True, dropna=False).mean().reset_index()
    out = []
    for keys, rows_ in per_job.groupby([*arm, "window"], observed=True, dropna=False, sort=False):
        values = dict(zip([*arm, "window"], keys if isinstance(keys, tuple) else (keys,)))
        entry = {**values, "samples_from": values["window"] * budget / windows,
                 "samples_to": (values["window"] + 1) * budget / windows, "jobs": len(rows_)}
        for kind in ("all_correct", "all_wrong"):
            low, high = t_mean_ci(rows_[kind], bounds=SHARE)
            entry |= {f"{kind}_share": rows_[kind].mean(), f"{kind}_low": low, f"{kind}_high": high}
        out.append(entry)
    return pd.DataFrame(out).sort_values([*arm, "window"], kind="stable").reset_index(drop=True)


def from_unanimous_start(eval: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm and start kind: held-out prompts whose samples were all wrong (all right) at a job's first
    checkpoint, and their accuracy at its last: the mean over jobs of each job's accuracy on its own such
    prompts, with the seeds' t interval; `prompts` is the mean count per job. Empty with fewer than two
    checkpoints."""
    arm = list(arm)
    if eval.empty:
        return pd.DataFrame()
    steps = eval.groupby("job", observed=True)["step"].agg(["min", "max"])
    steps = steps[steps["max"] > steps["min"]]
    if steps.empty:
        return pd.DataFrame()
    rows = eval[eval["job"].isin(steps.index)]
    first = rows[rows["step"].to_numpy() == steps["min"].reindex(rows["job"]).to_numpy()]
    last = rows[rows["step"].to_numpy() == steps["max"].reindex(rows["job"]).to_numpy()]
    start = first.groupby(["job", "prompt_id"], observed=True)["correct"].mean().rename("start")
    end = last.groupby(["job", "prompt_id"], observed=True)["correct"].mean().rename("end")
    prompts = pd.concat([start, end], axis=1, join="inner").reset_index()
    job_arm = rows.drop_duplicates("job").set_index("job")[arm]
    out = []
    for kind, value in START_KINDS.items():
        chosen = prompts[prompts["start"] == value]
        per_job = chosen.groupby("job", observed=True).agg(prompts=("end", "size"), accuracy=("end", "mean"))
        per_job = per_job.join(job_arm)
        for keys, jobs in per_job.groupby(arm, observed=True, dropna=False, sort=False):
            low, high = t_mean_ci(jobs["accuracy"], bounds=SHARE)
            out.append({**dict(zip(arm, keys if isinstance(keys, tuple) else (keys,))), "start": kind,
                        "jobs": len(jobs), "prompts": jobs["prompts"].mean(), "accuracy_end": jobs["accuracy"].mean(),
                        "ci_low": low, "ci_high": high})
    return pd.DataFrame(out)
