"""Training health: reward, KL, clip fraction, gradient norm and tie fraction against samples drawn, and the
rollout/train mismatch of the engine that sampled."""

from __future__ import annotations

from analysis.data.arms import short_label
from analysis.data.load import Tables
from analysis.measures.health import (
    BAND_JOBS,
    HEADROOM,
    MISMATCH,
    POINTS,
    SPIKE,
    SPIKE_QUANTILE,
    axis_tops,
    flat_metrics,
    health_curves,
    many_jobs,
    mismatch_by_arm,
    no_kl_jobs,
    spikes,
)
from analysis.render import curves as figures
from analysis.render.writer import Files
from analysis.sections.section import Context, Section


def section(tables: Tables, ctx: Context) -> Section | None:
    """The health section; None without steps tables."""
    if tables.steps.empty:
        return None
    files = Files()
    curves = health_curves(tables.steps, list(ctx.arm))
    flat = flat_metrics(curves)
    many = many_jobs(curves)
    spiked = spikes(tables.steps, list(ctx.arm))
    spiked = spiked[~spiked["metric"].isin(flat)]
    tops = axis_tops(tables.steps, spiked, list(ctx.arm))
    return Section(text="\n".join([
        "## Training health", "",
        "From the steps table: reward, KL to the reference, clip fraction, gradient norm (NaN on steps with no "
        "update, left out) and tie fraction of each step's groups, against samples drawn, each job's curve a "
        f"rolling mean over 1/{POINTS} of its steps; one colour per arm, "
        + (f"its mean over jobs with the band from the lowest to the highest job (more than {BAND_JOBS} jobs an arm)."
           if many else "one line per job.")
        + (" The clip fraction is left out: it is 0 at every step of every job (with mu = 1 a step's one pass has "
           "ratio exactly 1, so nothing is clipped)." if "clip_frac" in flat else "")
        + _unmeasured_kl(no_kl_jobs(curves), "kl" in flat)
        + _mismatch(mismatch_by_arm(tables.steps, list(ctx.arm)), drawn=MISMATCH[0] not in flat)
        + spikes_text(spiked, tops), "",
        files.figure("health", figures.health, curves, colours=ctx.colours, spikes=spiked, tops=tops),
    ]), files=files)


NAMES = {"kl": "KL", "grad_norm": "gradient norm"}


def spikes_text(spiked, tops: dict[str, float]) -> str:
    """The spikes (`measures.health.spikes`) named, job, step and value, and the axes they would have set; "" where
    there is none."""
    if spiked.empty:
        return ""
    parts = []
    for metric, rows in spiked.groupby("metric", sort=False):
        steps = "; ".join(f"job {r.job} ({short_label(r.arm)}) step {r.step:,}: {r.value:.3g}, "
                          f"{r.value / r.usual:.0f}x its arm's {SPIKE_QUANTILE:.0%} quantile {r.usual:.2g}"
                          for r in rows.itertuples(index=False))
        where = (f"; its panel's axis stops at {tops[metric]:.3g} ({HEADROOM:g}x the highest point of any curve "
                 "without the spikes), a spike past it marked at the edge with its value" if metric in tops else "")
        parts.append(f"{NAMES.get(str(metric), metric)}: {steps}{where}")
    return (f" **Spikes** (a step's KL or gradient norm above {SPIKE:g}x its arm's {SPIKE_QUANTILE:.0%} quantile over "
            "all its jobs' steps: a training blow-up, or the start of one; a KL or gradient-norm spike followed by "
            "falling reward usually means a learning rate too high for that arm): " + "; ".join(parts) + ".")


def _unmeasured_kl(jobs, left_out: bool) -> str:
    """What the KL panel lacks: `jobs` (`no_kl_jobs`) trained without a reference (algo.beta = 0) measure no KL."""
    if left_out:
        return " The KL is left out: no job measured it (algo.beta = 0 in every job: no reference)."
    if not len(jobs):
        return ""
    names = ", ".join(sorted(map(str, jobs), key=lambda job: (len(job), job)))  # 2 before 10
    one = len(jobs) == 1
    return (f" {len(jobs)} job{'' if one else 's'} ({names}) {'draws' if one else 'draw'} no KL line: trained "
            "with algo.beta = 0, without a reference.")


def _mismatch(by_arm, drawn: bool) -> str:
    """The rollout/train mismatch in a sentence an arm (`mismatch_by_arm`); "" for runs that did not measure it."""
    if by_arm.empty:
        return ""
    parts = [f"{r.arm}: mean |Δ| {r.diff_mean:.2g}, largest {r.diff_max:.2g}, KL {r.kl:.2g}, effective sample share "
             f"at least {r.ess_min:.3g}, over the cap {r.capped:.3g} ({r.steps} steps)" for r in by_arm.itertuples()]
    return (" Rollout/train mismatch (the engine's log-probs of its sampled tokens against the trainer's first pass, "
            "over the fresh samples that trained; rollout.engine, algo.rollout_correction): " + "; ".join(parts) + "."
            + (" Its panels show the largest |Δ log-prob| a step and the k3 KL(rollout ‖ train)." if drawn else
               " Its panels are left out: the largest |Δ log-prob| of any step is at float rounding (<= 1e-3)."))
