"""Reports that say no more than their data allow: unequal budgets named first in the
Findings with the numbers, a sweep of two code versions named with what changed between them, a
single job not told apart from anything, and no prediction text where nothing was predicted."""

import json
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest

from analysis.report import build_report
from fixtures.synthetic import job_config, prompt_pool, write_sweep

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = prompt_pool(levels=("1", "2"), per_level=6)


def build(root: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_report(root).read_text()


def findings(text: str) -> list[str]:
    """The Findings' bullets (the caveats among them, each whole where it is short)."""
    start = text.index("## Findings")
    return [line[2:] for line in text[start:text.index("\n## ", start + 1)].splitlines() if line.startswith("- ")]


def caveat(text: str, lead: str) -> str:
    return next(line for line in findings(text) if line.startswith(f"**{lead}**"))


def test_unequal_budgets_are_said_first_with_the_numbers(tmp_path):
    configs = [job_config(s, group_size=4, seed=seed, max_steps=8, prompts_per_step=4, max_rounds=4)
               for s in ("fixed", "resample_on_tie") for seed in (0, 1)]
    root = write_sweep(tmp_path / "sweep", configs, PROMPTS)  # no max_samples: resampling draws more
    first = caveat(build(root), "Unequal budgets")
    groups = pd.concat([pd.read_parquet(p).assign(job=p.parent.parent.name) for p in root.glob("*/groups/*.parquet")])
    per_job = groups.groupby("job")["group_size"].sum()  # samples drawn, recounted from the rows
    fixed, resample = per_job[["0", "1"]].mean(), per_job[["2", "3"]].mean()
    assert resample > 1.05 * fixed
    amount = lambda v: f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"  # noqa: E731
    assert first.startswith(f"**Unequal budgets**: samples per job {amount(fixed)} (fixed) to {amount(resample)} "
                            f"(resample_on_tie), {resample / fixed:.2f}x"), first
    assert "not at an equal budget" in first and "aligned checkpoints" in first and "`max_samples` ends" in first


def test_equal_budgets_say_nothing(tmp_path):
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=8, prompts_per_step=4) for seed in (0, 1)]
    configs[1]["algo"]["beta"] = 0.0
    root = write_sweep(tmp_path / "sweep", configs, PROMPTS)
    assert not any("Unequal budgets" in line for line in findings(build(root)))


def _commits() -> tuple[str, str] | None:
    """(a commit whose change from its parent is docs only, one that changes grpo_lab/), from this history."""
    log = subprocess.run(["git", "-C", str(ROOT), "log", "--format=%H", "-n", "200", "--no-merges"],
                         capture_output=True, text=True)
    docs = code = None
    for commit in log.stdout.split():
        files = subprocess.run(["git", "-C", str(ROOT), "diff", "--name-only", f"{commit}^", commit],
                               capture_output=True, text=True).stdout.split()
        if files and docs is None and all(f.startswith("docs/") or f.endswith(".md") for f in files):
            docs = commit
        if code is None and any(f.startswith("grpo_lab/") for f in files):
            code = commit
        if docs and code:
            return docs, code
    return None


@pytest.mark.skipif(_commits() is None, reason="not a git checkout with both kinds of commit")
def test_a_sweep_of_two_code_versions_says_which_jobs_ran_which_and_what_changed(tmp_path):
    docs, code = _commits()
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=4, prompts_per_step=4) for seed in range(4)]
    root = write_sweep(tmp_path / "sweep", configs, PROMPTS)

    def commits(first: str, second: str) -> str:
        for job in range(4):
            record = json.loads((root / str(job) / "run.json").read_text())
            record["git"] = {"commit": first if job < 3 else second, "dirty": False}
            (root / str(job) / "run.json").write_text(json.dumps(record))
        return next(line for line in findings(build(root)) if "code versions" in line)

    said = commits(f"{docs}^", docs)
    assert said.startswith(f"**2 code versions in one sweep**: `{said.split('`')[1]}` ran jobs 0-2; `{docs[:12]}` ran "
                           "job 3.")
    assert "none is run by a job" in said and "the numbers are comparable" in said
    said = commits(f"{code}^", code)
    assert "are run by a job (" in said and "grpo_lab/" in said and "rebuild the sweep from one version" in said
    assert "cannot be told here" in commits("0" * 40, code)


def test_one_job_is_not_told_apart_and_no_prediction_is_not_explained(tmp_path):
    root = write_sweep(tmp_path / "sweep", [job_config("fixed", group_size=4, max_steps=2, prompts_per_step=4)],
                       prompt_pool(levels=("1", "2"), per_level=40))  # 2 steps of 4 of 80 prompts: none recurs
    text = build(root / "0")
    assert "Arms are told apart by" not in text and "- Arms: one job, nothing to compare" in text
    assert "No prediction p^G + (1−p)^G: no prompt recurred" in text and "`predicted_tie_frac` is the mean" not in text


def test_a_tiny_run_says_too_little_data_instead_of_printing_numbers(tmp_path):
    """Two groups, four eval samples per prompt, one seed: no tie interval from two prompts, no group size
    beyond the samples measured, no spread across one seed."""
    held = prompt_pool(levels=("1", "2"), per_level=4, seed=3)
    root = write_sweep(tmp_path / "sweep", [job_config("fixed", group_size=4, max_steps=2, prompts_per_step=1)],
                       PROMPTS, eval_prompts=held, eval_n=4)
    text = build(root)
    out = root / "report"
    ties = pd.read_csv(out / "tables" / "ties_by_difficulty.csv")
    assert (ties["prompts"] < 5).all() and ties[["ci_low", "ci_high"]].isna().all().all()
    assert f"{len(ties)} of the {len(ties)} rows by difficulty have fewer than 5 prompts: no interval" in text
    sizes = pd.read_csv(out / "tables" / "group_size.csv")
    assert sizes["group_size"].max() == 4  # the eval's n: a group of G is G of a prompt's samples
    details = (out / "DETAILS.md").read_text()
    assert "for G up to the fewest samples any prompt has (4; larger G would be extrapolated)" in details
    tokens = pd.read_csv(out / "tables" / "common_budget_tokens.csv")
    assert not any(c.endswith(("_low", "_high")) for c in tokens.columns)
    assert "One seed per arm: no spread across seeds to show." in details


@pytest.mark.parametrize("report, predicted", [("smollm2", False), ("main", True)])
def test_the_ties_figure_names_a_prediction_only_where_one_is_drawn(report, predicted, tmp_path, monkeypatch):
    """The committed SmolLM2 study has no first-round group with a prediction (no prompt recurs within a step
    window): its ties figure once had a 'predicted' legend entry beside nothing. The real figure is drawn
    from each committed report's table; its legend is read as it is handed to matplotlib."""
    from analysis.render import ties as figures

    shown = {}
    real = figures.legend_below
    monkeypatch.setattr(figures, "legend_below", lambda fig, entries, **kw: (shown.update(entries),
                                                                               real(fig, entries, **kw)))
    table = pd.read_csv(ROOT / "reports" / report / "tables" / "ties_by_step.csv")
    assert table["predicted_tie_frac"].notna().any() == predicted
    figures.ties_over_samples(table, tmp_path / "ties.png", ["group_size", "sampler"])
    assert any(label.startswith("predicted") for label in shown) == predicted
    assert {label for label in shown if not label.startswith(("predicted", "partial window"))} == \
        {f"sampler={s}" for s in table["sampler"].unique()}


def _longer_answers(job: Path, factor: int) -> None:
    """Rewrite a job's parts as if each answer it trained on were `factor` times as long: the same samples, more
    tokens (its eval rows' tokens generated before each checkpoint too)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for table, columns in (("groups", ("tokens", "tokens_total")), ("steps", ("tokens_total",)),
                           ("eval", ("tokens_total",))):
        for part in (job / table).glob("*.parquet"):
            rows = pq.read_table(part)
            for name in (c for c in columns if c in rows.column_names):
                i = rows.column_names.index(name)
                column = pa.compute.multiply(rows.column(name), pa.scalar(factor, rows.schema.field(name).type))
                rows = rows.set_column(i, rows.schema.field(name), column)
            pq.write_table(rows, part)


@pytest.mark.parametrize("every_tokens", [0, 200])
def test_equal_samples_unequal_tokens_are_said_first_with_where_tokens_are_equal(tmp_path, every_tokens):
    """Arms that draw the same samples but one with answers twice as long: the first line says the tokens, that
    aligning by samples does not equalise them, and where the comparisons at equal tokens are (a token schedule),
    or that there are none and how to get them."""
    configs = [job_config("fixed", group_size=4, seed=seed, max_steps=8, prompts_per_step=4)
               for beta in (0.04, 0.0) for seed in (0, 1)]
    for i, cfg in enumerate(configs):
        cfg["eval"]["every_tokens"] = every_tokens
        cfg["algo"]["beta"] = 0.04 if i < 2 else 0.0
    root = write_sweep(tmp_path / "sweep", configs, PROMPTS, eval_prompts=prompt_pool(levels=("1", "2"), per_level=4,
                                                                                      seed=5), eval_n=4)
    for job in ("2", "3"):
        _longer_answers(root / job, 2)
    first = caveat(build(root), "Unequal tokens")
    groups = pd.concat([pd.read_parquet(p).assign(job=p.parent.parent.name) for p in root.glob("*/groups/*.parquet")])
    tokens = groups.groupby("job")["tokens"].sum()  # recounted from the rows
    fixed, longer = tokens[["0", "1"]].mean(), tokens[["2", "3"]].mean()
    amount = lambda v: f"{v:,.0f}" if float(v).is_integer() else f"{v:,.1f}"  # noqa: E731
    assert first.startswith(f"**Unequal tokens**: equal samples, but generated tokens per job range {amount(fixed)} "
                            f"(0.04) to {amount(longer)} (0.0), {longer / fixed:.2f}x, more than 5% apart"), first
    if every_tokens:
        assert "the held-out comparisons at " in first and " tokens are at equal tokens" in first, first
    else:
        assert "no checkpoint is at equal tokens" in first and "`eval.every_tokens`" in first, first
