"""Held-out results at equal samples drawn: each arm's scores against the samples drawn, and the
arms compared at every checkpoint they share (the held-out rows of the tests' family)."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.data.imported import missing_eval
from analysis.data.load import Tables
from analysis.data.resources import RESOURCES
from analysis.data.settings import SETTINGS, OtherSetting, setting_text
from analysis.measures.comparisons import ARM_TEST, checkpoint_comparisons
from analysis.measures.scores import (
    SCORES,
    evaluation_scores,
    prompt_scores,
    seed_bands,
    seed_scores,
    smallest_n,
)
from analysis.render import markdown
from analysis.render import scores as figures
from analysis.render.writer import Files
from analysis.sections.section import Context, Section
from analysis.stats.at_k import default_ks
from analysis.stats.seeds import compare_values

NO_EVAL = "## Held-out results\n\nNo eval tables were found: no pass@k or cons@k."
COMPARED = ("mean_a", "mean_b", "difference", "ci_low", "ci_high")  # a comparison's figures (all 0: no table)


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
        f"k is 1 and {largest} (cons@1 is pass@1). {ARM_TEST}. `ci_low`, `ci_high`: that 95% interval, for new "
        "seeds on these held-out prompts. A comparison is refused, with the reason, where k, the sampling "
        "temperature or the token limits differ.", "",
        files.table("at_k_comparisons", comparisons,
                    [c for c in comparisons.columns if c not in ("steps_a", "steps_b")], figures=COMPARED),
        "",
        f"Each seed's difference: {files.csv('at_k_per_seed', per_seed)}",
        *left_out(tables, files),
    ])
    return HeldOut(text=text, files=files, comparisons=final_comparisons(comparisons, per_seed), scores=scores,
                   prompt_scores=per_prompt)


def left_out(tables: Tables, files: Files | None = None) -> list[str]:
    """The paragraph naming the evaluations left out of every statistic here (`analysis.data.settings`), each job's
    at other settings than those its results use, and every evaluation of those jobs with what it measured, each
    under its settings (`evaluation_table`); [] when there are none."""
    other = [s for s in tables.skipped if isinstance(s, OtherSetting)]
    if not other:
        return []
    table = evaluation_table(tables.eval, other)
    shown = markdown.table(table) if files is None else files.table("evaluations", table)
    return ["", "### Evaluations at other settings", "",
            "Each job's held-out results above are of one evaluation setting (the run's own where it has rows there, "
            "else the one most of its checkpoints were evaluated at); these evaluations of the same jobs were left out "
            "of every number here, never pooled or compared with them:", "",
            *(f"- `{s.name}`: step{'s' * (len(s.steps) > 1)} {', '.join(map(str, s.steps))}" for s in other), "",
            "What every evaluation of those jobs measured, each under its own settings (`used`: the one the results "
            "above are of, or left out; k: the fewest samples a prompt had there; pass@1, pass@k and cons@k the means "
            "over the held-out prompts):", "", shown]


def evaluation_table(eval: pd.DataFrame, other: list[OtherSetting]) -> pd.DataFrame:
    """Every evaluation of the jobs that have one left out: the one used (from `eval`) and each left out (from its
    rows), a row a step: job, settings, used, then `SCORES`."""
    frames = []
    for job in dict.fromkeys(s.job for s in other):
        rows = eval[eval["job"].astype(str) == job] if len(eval) else eval
        if len(rows):
            used = setting_text(*rows[list(SETTINGS)].iloc[0].to_numpy(float))
            frames.append(evaluation_scores(rows).assign(job=job, settings=used, used="used"))
        for s in (s for s in other if s.job == job and s.rows is not None and len(s.rows)):
            frames.append(evaluation_scores(s.rows).assign(job=job, settings=s.setting, used="left out"))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["job", *SCORES])
    return table[["job", "settings", "used", *SCORES]].astype({"step": int, "prompts": int, "k": int})


ALIGNED = {"updates": " (equal updates)", "tokens": " (equal tokens)"}  # the family rows at the other alignments
# each side's resources at the compared point, carried into the tests' family (the ordering's attribution)
RESOURCE_COLUMNS = tuple(f"{r}_{side}" for r in RESOURCES for side in "ab") + ("a_had_more", "b_had_more")


def final_comparisons(comparisons: pd.DataFrame, per_seed: pd.DataFrame) -> pd.DataFrame | None:
    """The tests' family rows: each comparison of two arms at their final checkpoints (equal samples: the end of
    the budget) and at the study's equal-updates and equal-tokens points (metrics named "... (equal updates)") that
    was not refused, compared over each seed's mean over the held-out prompts (`compare_values`: the exact
    test, Student's t interval and the minimum detectable difference, inf where these seeds cannot reject; the
    interval is the comparison's own, one computation), its estimate kept from the comparison, and each side's
    steps there (`steps_a`, `steps_b`, as text); `interval` "seeds" (", <checkpoint>" at another alignment): for
    new seeds on these prompts, as the test. None when there is none."""
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
        # a final row's `alignment` names the budget that ended the jobs; its metric keeps the plain name
        at = "" if row["checkpoint"] == "final" else ALIGNED.get(row.get("alignment"), "")
        name = f"held-out {row['metric'].replace('@k', '@' + str(row['k']))}{at}"
        rows.append({"metric": name, "a": row["a"].rsplit(" @ ", 1)[0], "b": row["b"].rsplit(" @ ", 1)[0], **result,
                     "interval": "seeds" + (f", {row['checkpoint']}" if at else ""),
                     "steps_a": row["steps_a"], "steps_b": row["steps_b"], "alignment": row.get("alignment"),
                     **{column: row[column] for column in RESOURCE_COLUMNS if column in row}})
    return pd.DataFrame(rows) if rows else None
