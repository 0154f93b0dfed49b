"""The report: `REPORT.md` for a run or sweep directory, its figures beside it (`figures/*.png`)
and every table it shows as CSV (`tables/*.csv`), all computed from the run's tables."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis import markdown, plots
from analysis.arms import arm_keys, varying_keys
from analysis.budget import METRICS, at_k_curves, checkpoint_comparisons, checkpoint_rank, job_checkpoints
from analysis.config import launch_command
from analysis.labels import natural_sorted, sort_naturally
from analysis.load import Tables, load
from analysis.resampling import TEST, across_seeds, budget_curves, compare_at_budget, spend
from analysis.ties import predict_ties, tie_fractions

TIE_COLUMNS = ("difficulty", "group_size", "sampler", "groups", "tie_frac", "all_correct_frac", "all_wrong_frac",
               "ci_low", "ci_high", "predicted_tie_frac")
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
    tables = load(root, tables=("groups", "eval"))
    arm = arm_keys(tables.jobs, tables.config_columns) if len(tables.jobs) else []
    parts = [_header(root, tables, arm, command or launch_command(root)), _jobs(tables, writer)]
    if tables.groups.empty:
        parts.append("No group tables were found: no tie or equal-budget analysis.")
    else:
        parts += [_spend(tables.groups, arm, writer), _ties(tables, arm, writer),
                  *(_equal_budget(tables.groups, arm, budget, writer) for budget in ("samples", "tokens"))]
    if tables.eval.empty:
        parts.append("No eval tables were found: no pass@k or cons@k.")
    else:
        parts.append(_at_k(tables, arm, writer))
    report = writer.out / "REPORT.md"
    report.write_text("\n\n".join(parts) + "\n")
    return report


def _header(root: Path, tables: Tables, arm: Sequence[str], command: str | None) -> str:
    return "\n".join([
        f"# Report: {root.resolve().name}", "",
        f"- Source: `{root.resolve()}`",
        f"- Command: `{command}`" if command else "- Command: not recorded (no multirun.yaml or .hydra/hydra.yaml)",
        f"- Jobs: {len(tables.jobs)} loaded, {len(tables.skipped)} jobs or parts skipped",
        f"- Made on: {_machines(tables.jobs)}",
        f"- Arms are told apart by: {', '.join(f'`{k}`' for k in arm) or '–'} (seeds are replicates)",
    ])


def _machines(jobs: pd.DataFrame) -> str:
    """Where the jobs ran, from their run.json (machine and torch device)."""
    if jobs.empty or "machine" not in jobs:
        return "not recorded"
    hosts = (jobs["machine"].fillna("unknown machine").astype(str) + " (device " +
             jobs["device"].fillna("unknown").astype(str) + ")")
    return "; ".join(f"{h}: {n} job{'s' * (n > 1)}" for h, n in hosts.value_counts().items())


def _jobs(tables: Tables, writer: _Writer) -> str:
    jobs = tables.jobs
    varying = varying_keys(jobs, tables.config_columns) if len(jobs) else []
    rows = {name: jobs["job"].map(frame["job"].value_counts()).fillna(0).astype(int)
            for name, frame in (("groups", tables.groups), ("eval_rows", tables.eval))}
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


def _spend(groups: pd.DataFrame, arm: Sequence[str], writer: _Writer) -> str:
    return "\n".join([
        "## Budget of each arm", "",
        "Summed over each arm's jobs (seeds). A group is informative when it is not tied and entered the "
        "gradient (`used`); every other group's samples are wasted.", "",
        writer.table("budget_by_arm", spend(groups, arm)),
    ])


def _ties(tables: Tables, arm: Sequence[str], writer: _Writer) -> str:
    groups = tables.groups
    by = ["group_size", "sampler", *(k for k in arm if k not in ("group_size", "sampler"))]
    window = max(1, math.ceil((int(groups["step"].max()) + 1) / STEP_WINDOWS))
    predicted = predict_ties(groups, window=window, eval=tables.eval)
    by_difficulty = tie_fractions(groups, by, predicted=predicted)
    by_step = tie_fractions(groups, by, window=window, predicted=predicted)
    return "\n".join([
        "## Ties by difficulty", "",
        "Fraction of groups tied (zero reward spread, so zero advantage), with all_correct and all_wrong "
        "apart; `ci_low`–`ci_high` is tie_frac's exact (Clopper–Pearson) 95% interval. `predicted_tie_frac` "
        "is the mean of p^G + (1−p)^G over groups, each prompt's p^G estimated without the group itself: "
        f"unbiasedly, from its first-round groups at other steps of the same job within {window}-step windows, "
        f"else from its latest eval checkpoint. {int(predicted.notna().sum())} of {len(groups)} groups have a "
        "prediction.", "",
        writer.figure("ties_by_difficulty", lambda p: plots.ties_by_difficulty(by_difficulty, p, by)), "",
        writer.table("ties_by_difficulty", by_difficulty, [*TIE_COLUMNS, *by[2:]]), "",
        "## Ties over training", "",
        f"The same, per {window}-step window (`step_window` is its first step).", "",
        writer.figure("ties_over_steps", lambda p: plots.ties_over_steps(by_step, p, by)), "",
        f"As CSV: {writer.csv('ties_by_step', by_step)}",
    ])


def _equal_budget(groups: pd.DataFrame, arm: Sequence[str], budget: str, writer: _Writer) -> str:
    curves = budget_curves(groups, arm, budget, BUDGET_POINTS)
    bands = across_seeds(curves, arm)
    final = bands[bands["budget"] == bands["budget"].max()]
    tests = compare_at_budget(curves, arm)
    return "\n".join([
        f"## At equal {budget}", "",
        f"Each job at {BUDGET_POINTS} equal budgets up to the common budget, the most {budget} every job drew "
        f"({markdown.cell(final['budget'].iloc[0])}). Lines: mean over seeds; bands: lowest to highest seed. "
        "Accuracy is the fraction of samples correct within each budget window, over every sample drawn "
        "(redraws included).", "",
        writer.figure(f"budget_{budget}", lambda p: plots.budget_curves(bands, p, arm, budget)), "",
        f"Per job and budget point: {writer.csv(f'budget_curves_{budget}', curves)}", "",
        f"### At the common budget ({budget})", "",
        writer.table(f"common_budget_{budget}", final.drop(columns="budget")), "",
        f"Each pair of arms, {TEST}, not corrected for multiple comparisons "
        "(p is – where an arm has fewer than two seeds):", "",
        writer.table(f"tests_{budget}", tests, shown=tests.columns.drop(["budget", "test"])) if len(tests)
        else "Only one arm: nothing to compare.",
    ])


def _at_k(tables: Tables, arm: Sequence[str], writer: _Writer) -> str:
    eval = tables.eval
    curves = at_k_curves(eval, arm)
    pooled = curves[curves["difficulty"] == "all"].drop(columns="difficulty")
    k_max = int(pooled["k"].max())
    jobs = _job_checkpoints(tables, arm)
    comparisons = checkpoint_comparisons(eval, arm, [("pass@k", 1), ("pass@k", k_max), ("cons@k", k_max)])
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
        "of the n samples; a missing answer never wins; tied top answers split the win), as means over prompts "
        "with 95% percentile bootstrap intervals over prompts.", "",
        "### Checkpoints", "",
        "Jobs that train to an equal sample budget stop at different optimizer steps, so checkpoints are aligned "
        "by what they are rather than by step number: **base** is step 0 (the model before any update); "
        "**final** is each job's last evaluated step, which is the end of its sample budget when the job "
        "finished and was evaluated at its last step (`final_step` ≥ `last_trained_step` below); an "
        "intermediate checkpoint, named by its step, is shown for an arm only where every job of the arm "
        "evaluated that step. `steps` columns list each job's step, in job order. Steps and samples per job:", "",
        writer.table("checkpoints", jobs), "",
        ends, "",
        "### Curves per difficulty", "",
        "pass@k (top row) and cons@k (bottom row) against k, one column per difficulty and one for all prompts "
        "pooled. A colour per arm; solid: final (the legend gives each job's step); dashed: base, one black line "
        "when every arm's base scores the same (one base model); bands: 95% bootstrap intervals over prompts.", "",
        writer.figure("at_k", lambda p: plots.at_k(curves, p, arm)), "",
        "All difficulties pooled:", "",
        markdown.table(_by_k(pooled, arm)), "",
        f"As CSV: {writer.csv('at_k', curves)}, per difficulty and pooled (`all`).", "",
        "### Comparisons at equal k", "",
        "Each pair of arms at base, at final (each job at the end of its own budget, whatever its step) and at "
        "every intermediate step that all jobs of both arms evaluated; then each arm's final against its base. "
        "An arm's score averages its seeds per prompt; differences (b − a) are paired over the prompts both were "
        f"scored on, with a 95% bootstrap interval; k is 1 and {k_max} (cons@1 is pass@1). A comparison is "
        "refused, with the reason, where k, the sampling temperature or the token limits differ.", "",
        writer.table("at_k_comparisons", comparisons),
    ])


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
    wide = curves.assign(text=text).pivot(index=[*arm, "checkpoint", "steps", "metric"], columns="k", values="text")
    wide = wide.rename(columns=lambda k: f"k={k}").reset_index()
    return sort_naturally(wide, [*arm, "checkpoint", "metric"], {"checkpoint": checkpoint_rank, "metric": METRICS.index})
