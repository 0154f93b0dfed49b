"""Training health at a glance: reward, KL to the reference, clip fraction, gradient norm and tie
fraction against samples drawn, one colour per arm, from the steps table: a line per job (its
seeds), or with many jobs an arm's mean and its lowest-to-highest band (`analysis.render.curves.health`
draws them). x is samples drawn, not steps: arms that spend samples at different rates line up."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.data.arms import iter_arms
from analysis.data.schema import OPTIONAL

PANELS = {"reward_mean": "reward (mean per step)", "kl": "KL to the reference (k3)", "clip_frac": "clip fraction",
          "grad_norm": "gradient norm (before clipping)", "tie_frac": "tie fraction of groups",
          "rollout_logp_diff_max": "rollout/train |Δ log-prob|, step max", "rollout_kl": "KL(rollout ‖ train), k3"}
# the rollout/train mismatch (steps written since rollout.engine): panels only where it is past float rounding
# (the hf engine's own decode measures ~1e-6 at most); runs written before it have no such columns
MISMATCH = ("rollout_logp_diff_max", "rollout_kl")
ROUNDING = 1e-3
# the steps table's mismatch columns, which the report reads where present (analysis/data/schema.py's optional ones)
MISMATCH_COLUMNS = tuple(c for c in OPTIONAL["steps"] if c.startswith("rollout_"))
POINTS = 25  # about this many smoothing windows per job: a step-level curve is mostly noise
GRID = 60  # points on the common samples grid of an arm's mean and band
BAND_JOBS = 3  # arms with more jobs than this are drawn as mean and band: 12 lines an arm are a tangle
# a spike: one step's KL or gradient norm above SPIKE times its arm's SPIKE_QUANTILE over all its jobs' steps (a
# training blow-up, or the start of one); the panel's axis then stops at HEADROOM times the largest other step, and
# the spike is marked at its edge with its value, so one step cannot flatten every other arm's curve
SPIKE_METRICS = ("kl", "grad_norm")
SPIKE, SPIKE_QUANTILE, HEADROOM = 10.0, 0.9, 1.15


def health_curves(steps: pd.DataFrame, arm: Sequence[str], points: int = POINTS) -> pd.DataFrame:
    """Per job, each PANELS metric as a centred rolling mean over `window` steps (window = steps //
    points, at least 1), against samples_total. Columns: arm, job, step, samples_total, metric, value.
    Steps with no update (NaN losses) are left out of their metric's mean."""
    out = []
    for label, rows in iter_arms(steps, list(arm)) if arm else [("all", steps)]:
        for job, run in rows.groupby("job", observed=True, sort=False):
            run = run.sort_values("step")
            window = max(len(run) // points, 1)
            for metric in (m for m in PANELS if m in run):
                values = run[metric].astype(float).rolling(window, center=True, min_periods=1).mean()
                out.append(pd.DataFrame({"arm": label, "job": str(job), "step": run["step"].to_numpy(),
                                         "samples_total": run["samples_total"].to_numpy(), "metric": metric,
                                         "value": values.to_numpy()}))
    columns = ["arm", "job", "step", "samples_total", "metric", "value"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


def many_jobs(curves: pd.DataFrame) -> bool:
    """Whether some arm has more than BAND_JOBS jobs: then arms are drawn as mean and band."""
    return bool(curves.groupby("arm", sort=False)["job"].nunique().max() > BAND_JOBS)


def flat_metrics(curves: pd.DataFrame) -> list[str]:
    """Panels with nothing to show: the clip fraction when it is 0 at every step of every job (mu = 1,
    where a step's one pass has ratio exactly 1), the KL when no job measured it (algo.beta = 0 in every
    job: no reference). A reward or KL flat at 0 is a finding, and stays."""
    clip = curves.loc[curves["metric"] == "clip_frac", "value"]
    unmeasured = no_kl_jobs(curves)
    diff = curves.loc[curves["metric"] == "rollout_logp_diff_max", "value"]
    return ((["clip_frac"] if clip.fillna(0).eq(0).all() else [])
            + (["kl"] if len(unmeasured) and len(unmeasured) == curves["job"].nunique() else [])
            + (list(MISMATCH) if not (diff.max() > ROUNDING) else []))  # NaN or absent: nothing to draw


def no_kl_jobs(curves: pd.DataFrame) -> pd.Index:
    """The jobs that measured no KL at any step (algo.beta = 0: trained without a reference)."""
    kl = curves[curves["metric"] == "kl"]
    measured = kl["value"].notna().groupby(kl["job"], sort=False).any()
    return measured.index[~measured.to_numpy()]


def health_bands(curves: pd.DataFrame, points: int = GRID) -> pd.DataFrame:
    """Per arm and metric, its jobs' curves on a common grid of `points` sample counts up to the fewest
    samples any of them drew (linear interpolation between steps): the mean over jobs and the band
    from the lowest to the highest. Columns: arm, metric, samples_total, mean, low, high, jobs."""
    out = []
    for (label, metric), part in curves.groupby(["arm", "metric"], sort=False):
        lines = [(run["samples_total"].to_numpy(float), run["value"].to_numpy(float))
                 for _, run in part.groupby("job", sort=False)]
        lines = [(x[~np.isnan(y)], y[~np.isnan(y)]) for x, y in lines]
        lines = [(x, y) for x, y in lines if len(x)]
        if not lines:
            continue
        grid = np.linspace(max(x[0] for x, _ in lines), min(x[-1] for x, _ in lines), points)
        values = np.array([np.interp(grid, x, y) for x, y in lines])  # (jobs, points)
        out.append(pd.DataFrame({"arm": label, "metric": metric, "samples_total": grid, "mean": values.mean(0),
                                 "low": values.min(0), "high": values.max(0), "jobs": len(lines)}))
    columns = ["arm", "metric", "samples_total", "mean", "low", "high", "jobs"]
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=columns)


def spikes(steps: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """The steps whose KL or gradient norm (SPIKE_METRICS) is above SPIKE times its arm's SPIKE_QUANTILE of that
    metric over all its jobs' steps (steps with no value, or a value of 0, left out). Columns: arm, job, step,
    samples_total, metric, value, usual (the arm's quantile), largest in each metric first."""
    columns = ["arm", "job", "step", "samples_total", "metric", "value", "usual"]
    out = []
    for label, rows in iter_arms(steps, list(arm)) if arm else [("all", steps)]:
        for metric in (m for m in SPIKE_METRICS if m in rows):
            values = rows[metric].astype(float)
            # the usual level from steps that measured something: a step without an update (or an all-tied batch
            # at beta 0) has a grad norm of exactly 0, and a quantile of zeros would make every real step a spike
            measured = values[values > 0]
            if len(measured) < 2:
                continue
            usual = float(measured.quantile(SPIKE_QUANTILE))
            high = rows[(values > SPIKE * usual).to_numpy() & (values > 0).to_numpy()]
            out += [(label, str(r.job), int(r.step), r.samples_total, metric, float(getattr(r, metric)), usual)
                    for r in high.itertuples(index=False)]
    found = pd.DataFrame(out, columns=columns)
    return found.sort_values(["metric", "value"], ascending=[True, False], kind="stable").reset_index(drop=True)


def axis_tops(steps: pd.DataFrame, spiked: pd.DataFrame, arm: Sequence[str], points: int = POINTS
              ) -> dict[str, float]:
    """Each spiked metric's axis top: HEADROOM times the highest point of any job's curve (`health_curves`: the
    rolling means the figure draws, and its bands lie within) with the spikes left out of it, so only what a spike
    lifts passes it. `spiked`: `spikes(steps, arm)`."""
    if spiked.empty:
        return {}
    quiet = steps.copy()
    every = pd.MultiIndex.from_arrays([steps["job"].astype(str), steps["step"]])
    for metric, rows in spiked.groupby("metric", sort=False):
        marked = every.isin(pd.MultiIndex.from_arrays([rows["job"].astype(str), rows["step"]]))
        quiet.loc[marked, metric] = np.nan
    curves = health_curves(quiet[[c for c in quiet.columns if c not in PANELS or c in set(spiked["metric"])]],
                           arm, points)
    highest = curves.groupby("metric")["value"].max()
    return {str(m): float(HEADROOM * highest[m]) for m in spiked["metric"].unique()
            if m in highest and pd.notna(highest[m]) and highest[m] > 0}


def mismatch_by_arm(steps: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """Per arm, the rollout/train mismatch over its jobs' steps (those that measured it): mean |Δ log-prob| a token
    (mean over steps), the largest |Δ| of any step, the mean k3 KL(rollout ‖ train), the lowest effective sample
    share and the mean share over the correction's cap. Empty when the steps table has no such columns."""
    columns = ["arm", "steps", "diff_mean", "diff_max", "kl", "ess_min", "capped"]
    if "rollout_logp_diff_mean" not in steps:
        return pd.DataFrame(columns=columns)
    out = []
    for label, rows in iter_arms(steps, list(arm)) if arm else [("all", steps)]:
        rows = rows[rows["rollout_logp_diff_mean"].notna()]
        if len(rows):
            out.append((label, len(rows), rows["rollout_logp_diff_mean"].mean(), rows["rollout_logp_diff_max"].max(),
                        rows["rollout_kl"].mean(), rows["rollout_ess"].min(), rows["rollout_capped"].mean()))
    return pd.DataFrame(out, columns=columns)
