"""Held-out results at equal samples drawn: each arm's scores against the samples drawn, and the
arms compared at every checkpoint they share (the held-out rows of the tests' family)."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import pandas as pd

from analysis.data.imported import missing_eval
from analysis.data.load import Tables
from analysis.data.settings import OtherSetting
from analysis.measures.comparisons import ARM_TEST, checkpoint_comparisons
from analysis.measures.scores import prompt_scores, seed_bands, seed_scores, smallest_n
from analysis.render import scores as figures
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.at_k import default_ks
from analysis.stats.seeds import ALPHA, compare_values

NO_EVAL = "## Held-out results\n\nNo eval tables were found: no pass@k or cons@k."


@dataclass(frozen=True, kw_only=True)
class HeldOut(Section):
    """`comparisons`: the arms at their final checkpoints on held-out pass@1, pass@k and cons@k at the
    largest k (rows of the tests' family; None when there are none); `scores`: each job's mean score
    at each checkpoint (`seed_scores`), which the ranking reads pass@1 from; `prompt_scores`: every
    prompt's scores at every k up to the largest (`prompt_scores`), which pass@k and cons@k read."""

    comparisons: pd.DataFrame | None = None
    scores: pd.DataFrame | None = None
    prompt_scores: pd.DataFrame | None = None


def section(tables: Tables, ctx: Context) -> HeldOut:
    """Scores against samples drawn, with the arm comparisons at equal samples; says so when there
    are no eval tables."""
    eval, arm = tables.eval, list(ctx.arm)
    if eval.empty:
        why = missing_eval(tables.jobs)  # an imported run's source may hold no held-out completions
        return HeldOut(text=NO_EVAL + (f" Not in the imported runs' sources: {why}." if why else ""))
    files = Files()
    largest = smallest_n(eval)
    points = [("pass@k", 1), ("pass@k", largest), ("cons@k", largest)]
    per_prompt = prompt_scores(eval, default_ks(largest))  # 1 and the largest k among them
    scores = seed_scores(eval, arm, points, per_prompt)
    bands = seed_bands(scores, arm)
    comparisons, per_seed = checkpoint_comparisons(eval, arm, points, scores=per_prompt)
    aligned = ("by the multiples of `eval.every_samples` each job crossed" if "eval.every_samples" in eval
               and pd.to_numeric(eval["eval.every_samples"], errors="coerce").fillna(0).gt(0).any()
               else "by exact samples drawn (set `eval.every_samples` so that arms drawing at different rates share "
               "checkpoints)")
    text = "\n".join([
        "## Held-out results at equal samples drawn", "",
        f"Held-out prompts never train. Each job's mean score over them at each checkpoint, against the samples "
        f"it had drawn there. Checkpoints are aligned across jobs by samples drawn, never by step number: "
        f"**base** (0 samples), **final** (each job's last evaluated step, the end of its budget) and intermediate "
        f"points, aligned {aligned}; a point is shown for an arm only where every job of it was evaluated there. "
        "Lines: mean over seeds; bands: lowest to highest seed.", "",
        files.figure("heldout", figures.heldout, bands, arm=arm, colours=ctx.colours), "",
        f"Per job: {files.csv('heldout_by_seed', scores)}; per arm: {files.csv('heldout', bands)}", "",
        "### Arms compared at equal samples", "",
        f"b − a at base, at each aligned point both arms have, at final, and each arm's final against its base; "
        f"k is 1 and {largest} (cons@1 is pass@1). {ARM_TEST}. A comparison is refused, with the reason, where k, "
        "the sampling temperature or the token limits differ.", "",
        files.table("at_k_comparisons", comparisons,
                    [c for c in comparisons.columns if c not in ("steps_a", "steps_b")]),
        "",
        f"Each seed's difference: {files.csv('at_k_per_seed', per_seed)}",
        *left_out(tables),
    ])
    return HeldOut(text=text, files=files, comparisons=final_comparisons(comparisons, per_seed), scores=scores,
                   prompt_scores=per_prompt)


def left_out(tables: Tables) -> list[str]:
    """The paragraph naming the evaluations left out of every statistic here (`analysis.data.settings`), each job's
    at other settings than those its results use; [] when there are none."""
    other = [s for s in tables.skipped if isinstance(s, OtherSetting)]
    if not other:
        return []
    return ["", "### Evaluations at other settings", "",
            "Each job's held-out results above are of one evaluation setting (the run's own where it has rows there, "
            "else the one most of its checkpoints were evaluated at); these evaluations of the same jobs were left out "
            "of every number here, never pooled or compared with them:", "",
            *(f"- `{s.name}`: step{'s' * (len(s.steps) > 1)} {', '.join(map(str, s.steps))}" for s in other)]


def interval_mde(low: float, high: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """The minimum detectable difference of an estimate whose (1 − alpha) interval runs low..high, read
    as a normal one: (z_{1−α/2} + z_power) × its standard error, the width / (2 z_{1−α/2})."""
    z = NormalDist().inv_cdf(1 - alpha / 2)
    return float((z + NormalDist().inv_cdf(power)) * (high - low) / (2 * z))


ALIGNED = {"steps": " (equal steps)", "tokens": " (equal tokens)"}  # the family rows at the other alignments


def final_comparisons(comparisons: pd.DataFrame, per_seed: pd.DataFrame) -> pd.DataFrame | None:
    """The tests' family rows: each comparison of two arms at their final checkpoints (equal samples: the end of
    the budget) and at the study's equal-steps and equal-tokens points (metrics named "... (equal steps)") that
    was not refused, its seed test redone on each seed's mean (`compare_values`), its estimate and interval
    kept from the prompts-and-seeds bootstrap, its minimum detectable difference read from that interval
    (`interval_mde`: the verdict needs it to exclude zero), and each side's steps there (`steps_a`, `steps_b`,
    as text); None when there is none."""
    aligned = comparisons["alignment"].isin(list(ALIGNED)) if "alignment" in comparisons else False
    final = comparisons[((comparisons["checkpoint"] == "final") | aligned) & comparisons["refused"].isna()]
    key = ["metric", "k", "checkpoint", "a", "b"]
    of = per_seed.groupby(key, sort=False).indices if len(final) else {}  # each comparison's seeds
    rows = []
    for _, row in final.iterrows():
        seeds = per_seed.iloc[of[tuple(row[key])]]
        a = seeds.dropna(subset=["seed_a"]).set_index("seed_a")["mean_a"]
        b = seeds.dropna(subset=["seed_b"]).set_index("seed_b")["mean_b"]
        result = compare_values(a, b)
        result |= {key: row[key] for key in ("mean_a", "mean_b", "difference", "ci_low", "ci_high", "prompts")}
        # the verdict needs this interval to exclude zero: what it can detect follows from its width
        result["mde"] = interval_mde(row["ci_low"], row["ci_high"])
        # a final row's `alignment` names the budget that ended the jobs; its metric keeps the plain name
        at = "" if row["checkpoint"] == "final" else ALIGNED.get(row.get("alignment"), "")
        name = f"held-out {row['metric'].replace('@k', '@' + str(row['k']))}{at}"
        rows.append({"metric": name, "a": row["a"].rsplit(" @ ", 1)[0], "b": row["b"].rsplit(" @ ", 1)[0], **result,
                     "interval": "prompts and seeds" + (f", {row['checkpoint']}" if at else ""),
                     "steps_a": row["steps_a"], "steps_b": row["steps_b"]})
    return pd.DataFrame(rows) if rows else None
