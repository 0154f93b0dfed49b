"""The report: `REPORT.md` for a run or sweep directory, its figures beside it (`figures/*.png`)
and every table it shows as CSV (`tables/*.csv`), all computed from the run's tables."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import markdown, plots
from analysis.arms import arm_keys, iter_arms, job_arms, varying_keys
from analysis.budget import (ARM_TEST, BASE, FINAL, METRICS, at_k_curves, attach_samples, checkpoint_comparisons, checkpoint_rank,
                             job_checkpoints)
from analysis.config import launch_command
from analysis.coverage import coverage, coverage_section, coverage_sentence
from analysis.examples import examples_markdown, read_completions
from analysis.findings import findings, verdict
from analysis.group_size import best_sizes, expected_by_size, group_size_section, prompt_pass_rates
from analysis.health import BAND_JOBS, flat_metrics, health_curves, many_jobs
from analysis.health import POINTS as HEALTH_POINTS
from analysis.heldout import seed_bands, seed_scores
from analysis.informative import sample_counts
from analysis.labels import natural_sorted, sort_naturally
from analysis.load import Tables, load
from analysis.persistence import persistence, persistence_section, transitions, visits
from analysis.provenance import difficulty_names, experiment_name, provenance, relative
from analysis.ranking import (INFORMATIVE, PASS1, Ranking, informative_by_arm, pass1_by_arm, power, rank, resolved_text,
                              sentence)
from analysis.resampling import across_seeds, budget_curves, per_job_spend, spend
from analysis.seeds import ALPHA, SEED_TEST, compare_arms_by_seed, compare_values, with_holm
from analysis.ties import ASSUMPTION, predict_ties, tie_fractions

TIE_COLUMNS = ("difficulty", "group_size", "sampler", "groups", "prompts", "tie_frac", "all_correct_frac",
               "all_wrong_frac", "ci_low", "ci_high", "predicted_tie_frac", "observed_minus_predicted", "diff_ci_low",
               "diff_ci_high")
FAMILY_COLUMNS = ("metric", "a", "b", "paired", "seeds_a", "seeds_b", "mean_a", "mean_b", "difference", "ci_low",
                  "ci_high", "interval", "p_value", "p_holm", "smallest_p", "mde")
FOREST_PAIRS = 6  # arm pairs the forest plot shows in full; more: only those with the first arm
STEP_WINDOWS = 10  # windows over training: points per line in the ties-over-steps figure
BUDGET_POINTS = 20  # equal-budget points per curve


@dataclass
class _Writer:
    """Writes the report's tables and figures under `out` and returns the markdown that shows them."""

    out: Path

    def csv(self, name: str, frame: pd.DataFrame) -> str:
        """Write `tables/<name>.csv`; return a link to it."""
        path = self.out / "tables" / f"{name}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_csv(path, index=False)
        return f"[tables/{name}.csv](tables/{name}.csv) ({len(frame)} rows)"

    def table(self, name: str, frame: pd.DataFrame, shown: Sequence[str] | None = None) -> str:
        """Write the CSV; return the frame (its `shown` columns) as markdown, with the link."""
        return f"{markdown.table(frame if shown is None else frame[list(shown)])}\n\nAs CSV: {self.csv(name, frame)}"

    def figure(self, name: str, draw: Callable[[Path], Path]) -> str:
        draw(self.out / "figures" / f"{name}.png")
        return f"![{name}](figures/{name}.png)"


def build_report(path: str | Path, out_dir: str | Path | None = None, command: str | None = None) -> Path:
    """Build the report of a run or sweep directory; returns the path of REPORT.md.

    It goes to `<path>/report/` unless `out_dir` is given. `command` is quoted as the command
    that produced the runs; by default it is rebuilt from Hydra's multirun.yaml or hydra.yaml.
    Jobs and parts that cannot be used are skipped with a warning and named in the report.
    """
    root = Path(path)
    writer = _Writer(Path(out_dir) if out_dir is not None else root / "report")
    for old in (*writer.out.glob("figures/*.png"), *writer.out.glob("tables/*.csv")):
        old.unlink()  # a figure or table this build does not make would otherwise outlive its data
    tables = load(root, tables=("groups", "eval", "steps"))
    names = difficulty_names(tables.jobs)  # what each difficulty label is, as the task recorded it
    arm = arm_keys(tables.jobs, tables.config_columns) if len(tables.jobs) else []
    groups = tables.groups
    eval = attach_samples(tables.eval, groups) if not tables.eval.empty else tables.eval
    family: list[pd.DataFrame] = []  # the comparisons between arms that Holm's correction covers
    calibration: dict = {}
    held, trained, ties, tokens = [], [], [], []
    if eval.empty:
        held.append("## Held-out results\n\nNo eval tables were found: no pass@k or cons@k.")
    else:
        sections, held_scores = _heldout(tables, eval, arm, writer, family, names)
        held += sections
    if groups.empty:
        trained.append("No group tables were found: no tie or equal-budget analysis.")
    else:
        trained.append(_trained(tables, arm, writer, family))
        ties.append(_ties(tables, arm, writer, family, calibration, names))
        tokens.append(_equal_budget(groups, arm, "tokens", writer))
    tests = with_holm(pd.concat(family, ignore_index=True)) if family else pd.DataFrame(columns=FAMILY_COLUMNS)
    rankings: list[Ranking] = []
    if len(list(iter_arms(tables.jobs, arm))) > 2:  # two arms: their one comparison per metric says it all
        if not eval.empty:
            rankings.append(rank(PASS1, pass1_by_arm(held_scores, arm), tests))
        if not groups.empty:
            rankings.append(rank(INFORMATIVE, informative_by_arm(groups, arm), tests))
    ranked = [sentence(r) for r in rankings]
    if ranked:
        ranked[0] += f" Power: {power(rankings[0])}"
    covered = None
    if not eval.empty and _base_and_trained(eval):
        curves, crossings = coverage(eval, arm)
        covered = coverage_sentence(curves, crossings, arm)
        held.append(f"{coverage_section(eval, arm, computed=(curves, crossings))}\n\nAs CSV: "
                    f"{writer.csv('coverage_crossings', crossings)}, "
                    f"every k: {writer.csv('coverage', curves)}")
    if not groups.empty:
        if not transitions(visits(groups, arm)).empty:
            table = persistence(groups, arm)
            ties.append(f"{persistence_section(groups, arm, table)}\n\nAs CSV: {writer.csv('persistence', table)}")
        rates = prompt_pass_rates(groups, eval)
        ties.append(f"{group_size_section(groups, eval)}\n\nAs CSV: {writer.csv('group_size', expected_by_size(rates))}"
                    f", {writer.csv('group_size_best', best_sizes(rates))}")
    health = [_health(tables, arm, writer)] if not tables.steps.empty else []
    completions = read_completions(root)
    examples = [_examples(completions, names)] if not completions.empty else []
    parts = [_header(root, tables, arm), findings(tests, calibration, _unit_weight(tables.jobs), ranked, covered),
             provenance(tables, arm, writer.out, command or launch_command(root)),
             *([_ranking(rankings, writer)] if rankings else []), *held, *trained,
             _tests(tests, writer), *ties, *tokens, *health, *examples, _jobs(tables, writer)]
    report = writer.out / "REPORT.md"
    report.write_text(_relative_paths("\n\n".join(parts) + "\n", root, writer.out))
    return report


UNIT_WEIGHTS = {"prompt": "a unit of several rounds weighs in the loss as one prompt (the paper's mean over prompts)",
                "sample": "every sample weighs the same in the loss, so a unit of r rounds weighs r groups"}


def _ranking(rankings: list[Ranking], writer: _Writer) -> str:
    parts = [
        "## Ranking", "",
        "Each arm at the end of its sample budget, best first: held-out pass@1 (mean over held-out prompts and "
        "seeds) and informative samples per 1,000 drawn (1000 × (1 − wasted_frac), each job's own rate), each with "
        "Student's t 95% interval over seeds (the trained models; every arm is scored on the same held-out prompts, "
        "so the pass@1 interval is for these prompts, while the tests' intervals resample prompts too). An "
        "ordering of two arms is **resolved** when their comparison under Tests across seeds is a detectable difference: its interval excludes zero and the exact "
        f"test across seeds rejects after Holm's correction over every pair of arms on that measure (α = {ALPHA}). "
        "`ranks` is the range of places an arm can hold given the resolved orderings alone (1–n: none involves "
        "it); `above` lists the arms it is resolved above, `below` those resolved above it. A place in the "
        f"order of the means that no resolved ordering backs is not a finding. Power: {power(rankings[0])}", "",
        writer.figure("ranking", lambda p: plots.ranking(rankings, p)), ""]
    for r in rankings:
        name = "ranking_" + ("pass1" if r.measure == PASS1 else "informative")
        text = resolved_text(r)
        parts += [f"### {r.measure}", "", writer.table(name, r.table), "", f"{text[0].upper()}{text[1:]}.", ""]
    return "\n".join(parts).rstrip()


def _relative_paths(text: str, root: Path, out: Path) -> str:
    """The report's text with the sweep's absolute path (as given and resolved) replaced by its path
    relative to the report, so no machine's folders are named (error messages quote them)."""
    for absolute in sorted({str(root.absolute()), str(root.resolve())}, key=len, reverse=True):
        # only where the path starts: a relative path that ends with it ("../../tmp/x") is left alone
        text = re.sub(r"(?<![\w./-])" + re.escape(absolute), lambda _: relative(root, out), text)
    return text


def _base_and_trained(eval: pd.DataFrame) -> bool:
    """Whether some job was evaluated both at the base model (step 0) and after training."""
    steps = eval.groupby("job", observed=True)["step"].agg(["min", "max"])
    return bool(((steps["min"] == 0) & (steps["max"] > 0)).any())


def _health(tables: Tables, arm: Sequence[str], writer: _Writer) -> str:
    curves = health_curves(tables.steps, arm)
    flat = flat_metrics(curves)
    many = many_jobs(curves)
    return "\n".join([
        "## Training health", "",
        "From the steps table: reward, KL to the reference, clip fraction, gradient norm (NaN on steps with no "
        "update, left out) and tie fraction of each step's groups, against samples drawn, each job's curve a "
        f"rolling mean over 1/{HEALTH_POINTS} of its steps; one colour per arm, "
        + (f"its mean over jobs with the band from the lowest to the highest job (more than {BAND_JOBS} jobs an arm)."
           if many else "one line per job.")
        + (" The clip fraction is left out: it is 0 at every step of every job (with mu = 1 a step's one pass has "
           "ratio exactly 1, so nothing is clipped)." if flat else ""), "",
        writer.figure("health", lambda p: plots.health(curves, p)),
    ])


def _examples(completions: pd.DataFrame, names: dict[str, str]) -> str:
    return "\n".join([
        "## Example completions", "",
        "Kept by `log_completions=N` (the first N completions of each step, whole groups): per difficulty the "
        "latest mixed group, all-correct tie and all-wrong tie, with every kept completion and its reward. "
        "Completions are untrusted model output, shown as code, cut at 60 characters.", "",
        examples_markdown(completions, names=names),
    ])


def _unit_weight(jobs: pd.DataFrame) -> str:
    """How a training unit of several rounds weighs in the loss (`algo.unit_weight`), as the jobs say."""
    if "algo.unit_weight" not in jobs or jobs["algo.unit_weight"].isna().all():
        return f"{UNIT_WEIGHTS['prompt']} (the default; `algo.unit_weight` is not in these configs)"
    values = natural_sorted(jobs["algo.unit_weight"].dropna().astype(str).unique())
    return "; ".join(f"`algo.unit_weight={v}`: {UNIT_WEIGHTS.get(v, 'unknown')}" for v in values)


def _header(root: Path, tables: Tables, arm: Sequence[str]) -> str:
    """The title (the experiment's name) and one line on what was compared."""
    arms = list(dict.fromkeys(label for label, _ in iter_arms(tables.jobs, arm))) if len(tables.jobs) else []
    seeds = tables.jobs["seed"].nunique() if "seed" in tables.jobs else 1
    compared = " vs ".join(arms) if 1 < len(arms) <= 4 else f"{len(arms)} arm{'s' * (len(arms) != 1)}"
    return "\n".join([
        f"# Report: {experiment_name(root, tables.jobs)}", "",
        f"{compared}; {len(tables.jobs)} job{'s' * (len(tables.jobs) != 1)} ({seeds} seed{'s' * (seeds != 1)} per "
        "arm). Findings first; the "
        "command, code, packages, machine and config are in the collapsed block below them.",
    ])


def _jobs(tables: Tables, writer: _Writer) -> str:
    jobs = tables.jobs
    varying = varying_keys(jobs, tables.config_columns) if len(jobs) else []
    rows = {name: jobs["job"].map(frame["job"].value_counts()).fillna(0).astype(int)
            for name, frame in (("groups", tables.groups), ("eval_rows", tables.eval))}
    if "truncated" in tables.groups:  # samples cut at max_new_tokens (runs before the column have none counted)
        cut = tables.groups.groupby("job", observed=True)["truncated"].sum()
        rows["truncated"] = jobs["job"].map(cut).fillna(0).astype(int)
    listing = jobs[["job", "status", *varying]].assign(**rows)
    vary = [f"- `{k}`: {', '.join(map(str, natural_sorted(jobs[k].astype(str).unique())))}" for k in varying]
    skipped = [f"- `{s.name}`: {s.reason}" for s in tables.skipped]
    unfinished = [f"- `{j}`: status {s}" for j, s in zip(jobs["job"], jobs["status"]) if s != "done"]
    return "\n".join([
        "## Jobs", "", writer.table("jobs", listing), "",
        "### Configs that vary", "", *(vary or ["None: every job has the same config."]), "",
        "### Skipped or failed", "", *(skipped or ["None."]), "",
        "### Not marked done", "", *(unfinished or ["None: every loaded job's run.json says done."]),
    ])


def _trained(tables: Tables, arm: Sequence[str], writer: _Writer, family: list[pd.DataFrame]) -> str:
    groups = tables.groups
    _, how = sample_counts(groups)
    by_arm, by_difficulty = spend(groups, arm), spend(groups, arm, by_difficulty=True)
    curves = budget_curves(groups, arm, "samples", BUDGET_POINTS)
    bands = across_seeds(curves, arm)
    per_job = per_job_spend(groups, arm)
    family.append(compare_arms_by_seed(per_job, arm, ["wasted_frac"]).assign(interval="seeds"))
    counted = ("read from the groups table's `n_informative`, which the trainer takes from the advantages the "
               "update used" if how == "recorded" else
               "**recounted** (these runs predate the `n_informative` column): the used groups of a prompt at one "
               "step are its unit, informative when their pooled rewards are not all equal"
               if how == "recounted" else f"{how} (some jobs predate the `n_informative` column)")
    return "\n".join([
        "## What trained: informative and wasted samples", "",
        "A sample is **informative** when its advantage in its training unit was nonzero; every other sample "
        "drawn is **wasted** (its unit tied, or it never entered the update). A training unit is the samples "
        "that shared one baseline: one group, or under `resample_on_tie` with `pool=all` all rounds of a prompt "
        "(a tied round pooled with a later mixed one trains). `wasted_frac` = wasted / drawn is the one number "
        "reported (the informative fraction is 1 − it). Counts here are " + counted + ". "
        f"Under `pool=all`, {_unit_weight(tables.jobs)}.", "",
        "Per arm, summed over its jobs (seeds):", "",
        writer.table("budget_by_arm", by_arm), "",
        "Per arm and difficulty:", "",
        writer.table("budget_by_difficulty", by_difficulty), "",
        f"The wasted fraction against samples drawn ({BUDGET_POINTS} equal budgets up to the common budget, the most "
        "samples every job drew). Lines: mean over seeds; bands: lowest to highest seed. The CSV adds "
        "`train_accuracy_round0`, a secondary measure on *training* prompts: the fraction correct of the "
        "first-round samples drawn in each window (redraws go to prompts that just tied, so they are left out; "
        "the training-health figure's reward shows the same trend); held-out results above come first.", "",
        writer.figure("budget_samples", lambda p: plots.budget_curves(bands, p, arm, "samples")), "",
        f"Per job and budget point: {writer.csv('budget_curves_samples', curves)}",
    ])


def _samples_by_window(groups: pd.DataFrame, by: Sequence[str], window: int) -> pd.DataFrame:
    """Per `by` and step window: samples_drawn, the mean over the jobs of the samples each had drawn by
    the window's last group (where arms draw at different rates, steps are not comparable; this is)."""
    frame = groups[["job", *by, "samples_total"]].assign(step_window=groups["step"].to_numpy() // window * window)
    per_job = frame.groupby(["job", *by, "step_window"], observed=True)["samples_total"].max().reset_index()
    out = per_job.groupby([*by, "step_window"], observed=True)["samples_total"].mean().rename("samples_drawn")
    return out.reset_index()


def _ties(tables: Tables, arm: Sequence[str], writer: _Writer, family: list[pd.DataFrame], calibration: dict,
          names: dict[str, str]) -> str:
    groups = tables.groups
    by = ["group_size", "sampler", *(k for k in arm if k not in ("group_size", "sampler"))]
    window = max(1, math.ceil((int(groups["step"].max()) + 1) / STEP_WINDOWS))
    predicted = predict_ties(groups, window=window)
    first = groups["round"].to_numpy() == 0
    round0, redraws = groups[first], groups[~first]
    by_difficulty = tie_fractions(round0, by, predicted=predicted[first])
    by_step = tie_fractions(round0, by, window=window, predicted=predicted[first])
    by_step = by_step.merge(_samples_by_window(round0, by, window), on=[*by, "step_window"], how="left")
    shown_by, shown_difficulty, shown_step, pooled = by, by_difficulty, by_step, ""
    if "group_size" not in arm and round0.groupby(list(arm), observed=True)["group_size"].nunique().max() > 1:
        # an arm drawing groups of many sizes (knapsack) would be a bar and a line per size: pool them
        shown_by = list(arm)
        shown_difficulty = tie_fractions(round0, shown_by, predicted=predicted[first])
        shown_step = tie_fractions(round0, shown_by, window=window, predicted=predicted[first]).merge(
            _samples_by_window(round0, shown_by, window), on=[*shown_by, "step_window"], how="left")
        pooled = (" Arms that draw first-round groups of several sizes (knapsack's allocations, Reinforce-Ada's "
                  "rounds) are pooled over their sizes in the figures (the prediction is per group, so it pools "
                  "alike); the tables split them by `group_size`.")
    seed = ["seed"] if "seed" in round0 and "seed" not in arm else []
    per_job = round0.groupby("job", observed=True).agg(tie_frac=("tie", "mean")).join(
        job_arms(round0, [*arm, *seed])).reset_index()
    family.append(compare_arms_by_seed(per_job, arm, ["tie_frac"])
                  .assign(metric="tie_frac (first rounds)", interval="seeds"))
    overall = tie_fractions(round0.assign(difficulty="all"), [], predicted=predicted[first])
    calibration.update(overall.iloc[0].to_dict() if len(overall) else {})
    redraw_text = (writer.table("ties_redraws", tie_fractions(redraws, by)[[*TIE_COLUMNS[:10], *by[2:]]])
                   if len(redraws) else "No redraws: every group is a first round.")
    return "\n".join([
        "## Ties", "",
        "A group *ties* when its rewards have zero spread (zero advantage). Arms are compared on **first-round "
        "groups only** (round 0): a redraw happens only because the round before it tied, so counting redraws "
        "would charge one arm for its own rule. Redraws are shown apart below. Intervals are 95% percentile "
        "bootstraps clustered by prompt (all groups of a prompt, in every job of the row, move together)."
        + pooled, "",
        f"`predicted_tie_frac` is the mean of p^G + (1−p)^G over groups, each prompt's term estimated from its "
        f"first-round groups at the other steps of the same job within {window}-step windows. It assumes "
        f"{ASSUMPTION}. `observed_minus_predicted` is tie_frac − predicted over the groups that have a "
        f"prediction ({int(predicted[first].notna().sum())} of {int(first.sum())} first-round groups). A prompt "
        "seen at exactly two steps of a window adds nothing to the mean gap (each of its groups predicts the "
        "other), so the check has power only where prompts recur three times or more per window.", "",
        "### First-round ties by difficulty", "",
        "Each bar is an arm's first-round groups at one difficulty, pooled over training: all-correct ties "
        "(solid) under all-wrong ties (hatched); the black bar is the 95% interval of their sum (the tie fraction) "
        "and the hollow diamond the prediction p^G + (1−p)^G. Pooled over training, a level whose pass rate moves "
        "shows its average; the next figure follows it over samples drawn.", "",
        writer.figure("ties_by_difficulty", lambda p: plots.ties_by_difficulty(shown_difficulty, p, shown_by, names)),
        "",
        writer.table("ties_by_difficulty", by_difficulty, [*TIE_COLUMNS, *by[2:]]), "",
        "### Redraws (rounds after a tie), apart", "",
        redraw_text, "",
        "### Observed against predicted over training", "",
        f"First-round groups per {window}-step window (`step_window` is its first step), placed at the samples "
        "the arm's jobs had drawn by the window's end (`samples_drawn`, mean over jobs), so arms that draw at "
        "different rates line up. Columns: difficulties; rows: all-correct ties, all-wrong ties (learning moves "
        "groups from the second to the first; collapse fills the second) and all ties with the prediction "
        "(diamonds). Bands: 95% intervals clustered by prompt. The table adds observed − predicted with its "
        "interval.", "",
        writer.figure("ties_over_samples", lambda p: plots.ties_over_samples(shown_step, p, shown_by, names)), "",
        writer.table("ties_by_step", by_step, ["difficulty", *by[1:], "step_window", "samples_drawn", "groups",
                                                "all_correct_frac", "all_wrong_frac", "tie_frac", "ci_low",
                                                "ci_high", "predicted_tie_frac", "observed_minus_predicted",
                                                "diff_ci_low", "diff_ci_high"]),
    ])


TOKENS_SAME = 0.05  # arms whose tokens per sample differ by less than this (relative) get no tokens figure


def _tokens_per_sample(groups: pd.DataFrame, arm: Sequence[str]) -> pd.Series:
    """Each arm's tokens generated per sample drawn, over all its jobs."""
    per_job = groups.groupby("job", observed=True)[["samples_total", "tokens_total"]].max().join(job_arms(groups, arm))
    sums = per_job.groupby(list(arm), observed=True)[["samples_total", "tokens_total"]].sum()
    return sums["tokens_total"] / sums["samples_total"]


def _equal_budget(groups: pd.DataFrame, arm: Sequence[str], budget: str, writer: _Writer) -> str:
    curves = budget_curves(groups, arm, budget, BUDGET_POINTS)
    bands = across_seeds(curves, arm)
    final = bands[bands["budget"] == bands["budget"].max()]
    rate = _tokens_per_sample(groups, arm)
    same = budget == "tokens" and rate.max() <= rate.min() * (1 + TOKENS_SAME)
    shown = (f"Every arm generated about the same tokens per sample ({markdown.cell(rate.min(), 3)} to "
             f"{markdown.cell(rate.max(), 3)}), so its curves against tokens repeat those against samples: no figure."
             if same else writer.figure(f"budget_{budget}", lambda p: plots.budget_curves(bands, p, arm, budget)))
    return "\n".join([
        f"## At equal {budget}", "",
        f"The measures of the section on what trained, at {BUDGET_POINTS} equal budgets of {budget} up to the most "
        f"every job drew ({markdown.cell(final['budget'].iloc[0])})."
        + ("" if same else " Lines: mean over seeds; bands: lowest to highest seed."), "",
        shown, "",
        writer.table(f"common_budget_{budget}", final.drop(columns="budget")), "",
        f"Per job and budget point: {writer.csv(f'budget_curves_{budget}', curves)}",
    ])


def _tests(tests: pd.DataFrame, writer: _Writer) -> str:
    if tests.empty:
        return "## Tests across seeds\n\nOnly one arm: nothing to compare."
    pairs = tests[["a", "b"]].astype(str).drop_duplicates()
    forest, shown_note = tests, ""
    if len(pairs) > FOREST_PAIRS:  # one row per pair and metric would run off the page: against one arm
        first = str(tests["a"].iloc[0])
        forest = tests[(tests["a"].astype(str) == first) | (tests["b"].astype(str) == first)]
        shown_note = f" With {len(pairs)} pairs of arms, the figure shows those with {first} only; the table has all."
    return "\n".join([
        "## Tests across seeds", "",
        "The family of comparisons: every pair of arms at the end of the budget, on held-out pass@1, pass@k and "
        "cons@k at the largest k, on wasted_frac and on the first-round tie fraction. Differences are b − a. "
        f"Tests: {SEED_TEST}; the held-out rows' intervals resample prompts as well as seeds (as above). "
        "`p_holm` is Holm's "
        f"adjustment within each metric (α = {ALPHA}): a metric is one family, every pair of arms on it, since each "
        "metric answers its own question. `smallest_p` is the smallest p the exact test can give "
        "with these seeds (at or above α nothing can be detected, however large); `mde` is the minimum detectable "
        "effect, the difference found with 80% power at α by the t approximation from the spread of per-seed "
        "differences (inf: not reachable with these seeds).", "",
        writer.table("tests", tests[list(FAMILY_COLUMNS)]), "",
        "The same differences with their 95% intervals (dashed: no difference); a filled dot where the findings "
        "call it a detectable difference" + (", one panel per metric (each on its own scale)" if len(pairs) > 1 else "")
        + ". Signs differ in meaning: higher is better for held-out scores, lower for "
        f"wasted_frac.{shown_note}", "",
        writer.figure("differences", lambda p: plots.forest(
            forest, p, [verdict(row) == "a detectable difference" for _, row in forest.iterrows()])),
    ])


def _heldout(tables: Tables, eval: pd.DataFrame, arm: Sequence[str], writer: _Writer,
             family: list[pd.DataFrame], names: dict[str, str]) -> tuple[list[str], pd.DataFrame]:
    """The held-out sections: scores against samples drawn with the arm comparisons, then pass@k and
    cons@k against k; and the per-job scores (`seed_scores`, pass@1 among them) for the ranking."""
    k_max = int(eval.groupby(["job", "step", "prompt_id"], observed=True).size().min())
    points = [("pass@k", 1), ("pass@k", k_max), ("cons@k", k_max)]
    scores = seed_scores(eval, arm, points)
    bands = seed_bands(scores, arm)
    comparisons, per_seed = checkpoint_comparisons(eval, arm, points)
    final = comparisons[(comparisons["checkpoint"] == "final") & comparisons["refused"].isna()]
    rows = []
    for _, row in final.iterrows():
        seeds = per_seed[(per_seed["metric"] == row["metric"]) & (per_seed["k"] == row["k"])
                         & (per_seed["a"] == row["a"]) & (per_seed["b"] == row["b"])]
        a = seeds.dropna(subset=["seed_a"]).set_index("seed_a")["mean_a"]
        b = seeds.dropna(subset=["seed_b"]).set_index("seed_b")["mean_b"]
        result = compare_values(a, b)
        result |= {key: row[key] for key in ("mean_a", "mean_b", "difference", "ci_low", "ci_high")}
        name = f"held-out {row['metric'].replace('@k', '@' + str(row['k']))}"
        rows.append({"metric": name, "a": row["a"].removesuffix(" @ final"), "b": row["b"].removesuffix(" @ final"),
                     **result, "interval": "prompts and seeds"})
    if rows:
        family.append(pd.DataFrame(rows))
    aligned = ("by the multiples of `eval.every_samples` each job crossed" if "eval.every_samples" in eval
               and pd.to_numeric(eval["eval.every_samples"], errors="coerce").fillna(0).gt(0).any()
               else "by exact samples drawn (set `eval.every_samples` so that arms drawing at different rates share "
               "checkpoints)")
    heldout = "\n".join([
        "## Held-out results at equal samples drawn", "",
        f"Held-out prompts never train. Each job's mean score over them at each checkpoint, against the samples "
        f"it had drawn there. Checkpoints are aligned across jobs by samples drawn, never by step number: "
        f"**base** (0 samples), **final** (each job's last evaluated step, the end of its budget) and intermediate "
        f"points, aligned {aligned}; a point is shown for an arm only where every job of it was evaluated there. "
        "Lines: mean over seeds; bands: lowest to highest seed.", "",
        writer.figure("heldout", lambda p: plots.heldout(bands, p, arm)), "",
        f"Per job: {writer.csv('heldout_by_seed', scores)}; per arm: {writer.csv('heldout', bands)}", "",
        "### Arms compared at equal samples", "",
        f"b − a at base, at each aligned point both arms have, at final, and each arm's final against its base; "
        f"k is 1 and {k_max} (cons@1 is pass@1). {ARM_TEST}. A comparison is refused, with the reason, where k, "
        "the sampling temperature or the token limits differ.", "",
        writer.table("at_k_comparisons", comparisons, [c for c in comparisons.columns if c not in ("steps_a", "steps_b")]),
        "",
        f"Each seed's difference: {writer.csv('at_k_per_seed', per_seed)}",
    ])
    return [heldout, _at_k(tables, eval, arm, writer, names)], scores


def _at_k(tables: Tables, eval: pd.DataFrame, arm: Sequence[str], writer: _Writer, names: dict[str, str]) -> str:
    curves = at_k_curves(eval, arm)
    pooled = curves[curves["difficulty"] == "all"].drop(columns="difficulty")
    jobs = _job_checkpoints(tables, arm)
    status = tables.jobs.set_index(tables.jobs["job"].astype(str))["status"]
    early = [f"`{j}` (last eval at step {f}, trained to step {t:.0f}, status {status[j]})"
             for j, f, t in zip(jobs["job"], jobs["final_step"], jobs["last_trained_step"])
             if f < t or status[j] != "done"]
    if early:
        ends = ("**Not at the end of its budget**: " + ", ".join(early) + ". For these jobs `final` is an earlier "
                "checkpoint, not the end of the budget.")
    elif jobs["last_trained_step"].isna().any():
        ends = "Some jobs have no group tables: whether their final checkpoint is their last training step is unknown."
    else:
        ends = "Every job is done and its final checkpoint is its last training step."
    return "\n".join([
        "## pass@k and cons@k", "",
        "Unbiased pass@k, 1 − C(n−c, k)/C(n, k), and exact majority-vote cons@k (expected over every k-subset "
        "of the n samples; a missing answer never wins; tied top answers split the win), as means over prompts, "
        "with 95% percentile bootstrap intervals clustered by prompt: a prompt's scores in every job of the arm "
        "are averaged and resampled together (at base the jobs are one model on the same prompts).", "",
        "### Checkpoints", "",
        "**final** is each job's last evaluated step, which is the end of its sample budget when the job "
        "finished and was evaluated at its last step (`final_step` ≥ `last_trained_step` below). Steps and "
        "samples per job:", "",
        writer.table("checkpoints", jobs), "",
        ends, "",
        "### Curves per difficulty", "",
        "pass@k (top row) and cons@k (bottom row) against k, one column per difficulty and one for all prompts "
        "pooled. A colour per arm; solid: final (the legend gives each job's step); dashed: base, one black line "
        "when every arm's base scores the same (one base model); bands: the finals' 95% intervals. Arm "
        "differences at equal k, with intervals, are in the tables below and the forest plot under the tests.", "",
        _saturated_note(curves, names),
        writer.figure("at_k", lambda p: plots.at_k(curves, p, arm, names)), "",
        "All difficulties pooled:", "",
        markdown.table(_by_k(pooled, arm)), "",
        f"As CSV: {writer.csv('at_k', curves)}, per difficulty and pooled (`all`).",
    ])


def _saturated_note(curves: pd.DataFrame, names: dict[str, str]) -> str:
    flat = plots.saturated(curves[curves["checkpoint"].isin([BASE, FINAL])])
    if not flat:
        return ""
    shown = ", ".join(f"{d} ({names[d]})" if d in names else str(d) for d in flat)
    return (f"Difficulties left out of the figure (every score within 0.05 of 0 or 1 at every k, base and final): "
            f"{shown}; their numbers are in the CSV.\n")


def _job_checkpoints(tables: Tables, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job with eval rows: its arm, seed, evaluated steps, the final step, the last step
    it trained (groups), and the samples and tokens it had drawn by its final checkpoint."""
    steps = job_checkpoints(tables.eval)
    per_job = steps.groupby("job", sort=False).agg(
        evaluated_steps=("step", lambda s: ", ".join(map(str, sorted(s.astype(int))))),
        final_step=("step", "max"))
    keys = [k for k in (*arm, "seed") if k in tables.jobs.columns]
    out = tables.jobs.assign(job=tables.jobs["job"].astype(str))[["job", *dict.fromkeys(keys)]]
    out = out.join(per_job, on="job", how="inner")
    groups = tables.groups
    if groups.empty:
        return out.assign(last_trained_step=math.nan, samples_at_final=math.nan, tokens_at_final=math.nan)
    job = groups["job"].cat.rename_categories(lambda name: str(name))  # load's categorical: names as text
    # (groups,) each group's job's final step, through the category codes; NaN: the job has no eval rows
    final = job.cat.categories.to_series().map(per_job["final_step"]).to_numpy(float)[job.cat.codes.to_numpy()]
    drawn = groups[["samples_total", "tokens_total"]][groups["step"].to_numpy() <= final]
    drawn = drawn.groupby(job[drawn.index], observed=True).max()
    trained = groups["step"].groupby(job, observed=True).max()
    return out.assign(last_trained_step=out["job"].map(trained), samples_at_final=out["job"].map(drawn["samples_total"]),
                      tokens_at_final=out["job"].map(drawn["tokens_total"]))


def _by_k(curves: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per arm, checkpoint and metric; one column per k holding "mean [ci_low, ci_high]"."""
    text = [f"{markdown.cell(m, 3)} [{markdown.cell(lo, 3)}, {markdown.cell(hi, 3)}]"
            for m, lo, hi in zip(curves["mean"], curves["ci_low"], curves["ci_high"])]
    wide = curves.assign(text=text).pivot(index=[*arm, "checkpoint", "steps", "samples", "metric"], columns="k",
                                          values="text")
    wide = wide.rename(columns=lambda k: f"k={k}").reset_index()
    return sort_naturally(wide, [*arm, "checkpoint", "metric"], {"checkpoint": checkpoint_rank, "metric": METRICS.index})
