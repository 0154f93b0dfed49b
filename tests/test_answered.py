"""Whether the model answered at all: the warning of a run that cannot learn (its cause read from the data, two
replies quoted), all-wrong ties split into format and capability failures (recounted from the tables of a generated
sweep whose answer rates are known), and a real run whose model never answers in the task's format: warned at step
0, nothing trained, and the report's first Findings line says so."""

import itertools
import json
import logging
import re

import numpy as np
import pandas as pd
import pytest
from reference import both_pages, findings, in_words, raw

from analysis.measures.ties import all_wrong_split
from analysis.report import build_report
from fixtures.synthetic import job_config, write_sweep
from grpo_lab.config import TrainConfig
from grpo_lab.config.reads import unread, value_of
from grpo_lab.records import Group, Problem
from grpo_lab.rewards.rules import ANSWER_FORMATS
from grpo_lab.run.tables import read_table
from grpo_lab.tasks import TASKS
from grpo_lab.tasks.base import Remedies
from grpo_lab.train.cannot_learn import base_warning, first_step_warning
from grpo_lab.train.trainer import train


def rows(difficulty, correct, answered, texts=()):
    texts = list(texts) + [None] * (len(correct) - len(texts))
    return [dict(difficulty=difficulty, correct=c, answered=a, completion=t)
            for c, a, t in zip(correct, answered, texts)]


def remedies(task: str, answer_format: str = "bare", chat_template: bool = False, model: str = "hf") -> Remedies:
    """The remedies task `task` names for a run of these settings (a model=hf model unless `model` says)."""
    cfg = TrainConfig()
    cfg.task.name, cfg.task.path, cfg.task.answer_format, cfg.task.chat_template = (
        task, "math.jsonl" if task == "mathset" else None, answer_format, chat_template)
    cfg.model.name = model
    return TASKS[task].remedies(cfg)


def test_the_base_warning_names_the_cause_and_quotes_two_replies():
    unboxed = rows("1", [False] * 30, [False] * 29 + [True], ["The sum is 12", "12\nand then more text", "x"])
    said = base_warning(unboxed, "latex", "boxed", remedies("mathset"))
    assert said.startswith("the base model solves no held-out problem: it gave no `\\boxed{}` answer in 97% of 30 "
                           "replies, so every group will tie all-wrong and nothing trains; try task.shots (examples "
                           "that box their answers)")
    assert "Replies: 'The sum is 12' '12 and then more text'" in said and "\n" not in said
    # answered, but wrong, at one difficulty of two: a capability failure, named as such
    wrong = rows("1", [True, False], [True, True]) + rows("2", [False] * 4, [True] * 4, ["99"])
    said = base_warning(wrong, "integer", "bare", remedies("arithmetic"))
    assert "solves no held-out problem of difficulty 2: it gave no bare integer in 0% of 6 replies, so groups of " \
           "those prompts will tie all-wrong" in said and "task.levels" in said and "'99'" in said
    assert base_warning(rows("1", [True, False], [True, False]), "integer", "bare", remedies("arithmetic")) is None


KINDS = {"arithmetic": "integer", "gym": "graded", "mathset": "latex"}


@pytest.mark.parametrize("task,answer_format,chat,model,remedy,easier", [
    ("arithmetic", "boxed", False, "hf", "try task.answer_format=last_number or task.shots, or a format reward",
     "try easier problems (task.levels"),  # a base model: shots as plain text
    ("arithmetic", "boxed", False, "tiny", "try task.answer_format=last_number or task.shots (with model.name=hf), "
     "or a format reward", "(task.levels"),
    ("arithmetic", "last_number", True, "hf", "try task.shots, or a format reward", "(task.levels"),
    ("gym", "last_number", True, "hf", "try task.shots or task.gym.shots (worked examples), or a format reward",
     "try easier problems (task.gym.levels"),
    ("gym", "boxed", False, "tiny", "try task.answer_format=last_number or task.shots or task.gym.shots (with "
     "model.name=hf: worked examples),", "(task.gym.levels"),
    ("mathset", "bare", True, "hf", "try task.shots (examples that box their answers), or a format reward",
     "try easier problems in the file (task.path=math.jsonl"),
])
def test_the_remedy_names_what_the_run_does_not_already_do(task, answer_format, chat, model, remedy, easier):
    said = base_warning(rows("1", [False] * 4, [False] * 4), KINDS[task], answer_format,
                        remedies(task, answer_format, chat, model))
    assert remedy in said, said
    wrong = base_warning(rows("1", [False] * 4, [True] * 4), KINDS[task], answer_format,
                         remedies(task, answer_format, chat, model))
    assert easier in wrong, wrong


KEY = re.compile(r"\b(?:task|sampler|reward|algo|model|rollout|eval|checkpoint|logger)(?:\.[a-z_]+)+")


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_remedy_names_only_keys_its_task_reads(task):
    """Issue 56: the capability remedy said "try easier problems (task.levels)" under task=mathset, which refuses
    task.levels. Each task owns its remedies (TaskKind.remedies): every key a warning names is one the running task
    reads (grpo_lab/config/reads.py), or one read under a choice the same remedy names (task.shots, with
    model.name=hf)."""
    formats = ANSWER_FORMATS if task != "mathset" else ("bare",)
    for answer_format, chat in itertools.product(formats, (False, True)):
        cfg = TrainConfig()
        cfg.task.name, cfg.task.path, cfg.task.answer_format, cfg.task.chat_template = (
            task, "math.jsonl", answer_format, chat)
        kind = TASKS[task]
        for answered in (False, True):  # a format failure, a capability failure
            said = base_warning(rows("1", [False] * 4, [answered] * 4), KINDS[task], answer_format,
                                kind.remedies(cfg))
            named = KEY.findall(said.split("; try ", 1)[1])
            assert named, said
            for key in named:
                value_of(cfg, key)  # a key of the config
                readers = unread(key, cfg)
                assert not readers or any(o.key in named for o in readers), (task, answer_format, chat, key, said)


def group(correct, answered, texts=None):
    g = Group(Problem("p", "q", "1", "1"), 0, None, np.zeros(len(correct), np.float32), np.array(correct), True,
              answered=np.array(answered))
    return g


def test_the_first_step_warning_needs_every_group_tied():
    tied = [group([False] * 4, [False] * 4), group([True] * 4, [True] * 4)]
    said = first_step_warning(tied, "integer", "last_number", remedies("arithmetic", "last_number"))
    assert said.startswith("every group of the first step tied (1 of 2 all wrong), so nothing trained: the model "
                           "gave no number in 50% of 8 replies")
    mixed = tied + [Group(Problem("r", "q", "1", "1"), 0, None, np.zeros(4, np.float32),
                          np.array([True, False, False, False]), False, answered=np.ones(4, bool))]
    assert first_step_warning(mixed, "integer", "last_number", remedies("arithmetic", "last_number")) is None


G = 4
LEVELS = {"1": (0.05, 0.2), "2": (0.05, 0.9)}  # level: (pass rate p, answer rate q)


def answer_sweep(root, answer_learn=0.0, steps=40, levels=LEVELS):
    prompts = pd.DataFrame({"prompt_id": [f"L{lv}-{i}" for lv in levels for i in range(16)],
                            "difficulty": [lv for lv in levels for _ in range(16)],
                            "p": [levels[lv][0] for lv in levels for _ in range(16)],
                            "q": [levels[lv][1] for lv in levels for _ in range(16)]})
    configs = [job_config("fixed", group_size=G, seed=s, max_steps=steps, prompts_per_step=8) for s in (0, 1)]
    return write_sweep(root, configs, prompts, overrides=["seed=0,1"], answer_learn=answer_learn)


def idle_sweep(root):
    """fixed against resample_on_tie, 3 seeds each, on prompts no sample ever solves (5% of replies answer): no
    group was untied, nothing trained; evaluated at the start and the end, where every score is 0."""
    prompts = pd.DataFrame({"prompt_id": [f"L{lv}-{i}" for lv in "12" for i in range(8)],
                            "difficulty": [lv for lv in "12" for _ in range(8)], "p": 0.0, "q": 0.05})
    configs = [job_config(s, group_size=G, seed=seed, max_steps=6, prompts_per_step=4)
               for s in ("fixed", "resample_on_tie") for seed in (0, 1, 2)]
    return write_sweep(root, configs, prompts, overrides=["sampler=fixed,resample_on_tie", "seed=0,1,2"],
                       eval_prompts=prompts, eval_n=4)


def test_a_sweep_in_which_nothing_trained_says_only_that_and_prints_no_table_of_zeros(tmp_path):
    built = build_report(idle_sweep(tmp_path / "sweep"), tmp_path / "report")
    said = findings(built)
    assert len(said) == 2 and all(b.startswith("**Nothing trained in ") for b in said), said
    first_screen = built.read_text().split("## Findings", 1)[1].split("\n## ", 1)[0]
    assert not any(word in first_screen for word in ("Resolved", "p = ", "Power", "detectable", "Unequal"))
    text = both_pages(built)
    for figures in ("`mean_a`, `mean_b`, `difference`, `ci_low`, `ci_high`", "`mean`, `ci_low`, `ci_high`",
                    "`gain_at_1`", "`base`, `trained`, `gain`, `gain_low`, `gain_high`", "`informative_frac_at_max`",
                    "`informative_frac`, `informative_groups_per_1k`"):
        assert f"Every figure here ({figures}) is 0: the table is left out." in text, figures
    assert "| metric | k | checkpoint |" not in text  # the held-out comparisons, 12 rows of zeros
    comparisons = pd.read_csv(tmp_path / "report" / "tables" / "at_k_comparisons.csv")
    assert len(comparisons) == 12 and (comparisons[["mean_a", "mean_b", "difference"]] == 0).all().all()


def test_the_nothing_trained_line_counts_every_figure_over_the_groups_and_steps_it_names(tmp_path):
    """"91% without an answer" beside 128 groups was the first round's 29 of 32: every number of the line is now
    over the arm's drawn groups, redraws included, the steps named and the denominator said; recounted here."""
    sweep = idle_sweep(tmp_path / "sweep")
    said = findings(build_report(sweep, tmp_path / "report"))
    g = raw(sweep, "groups")
    g["arm"] = np.where(g["job"].astype(int) < 3, "fixed", "resample_on_tie")
    for arm, rows in g.groupby("arm"):
        wrong = rows[rows["n_correct"] == 0]
        none = int((wrong["n_answered"] == 0).sum())
        line = (f"**Nothing trained in {arm}**: {len(rows):,} of {len(rows):,} groups drawn in steps "
                f"{rows['step'].min()}–{rows['step'].max()} tied (all-wrong: {len(wrong):,}, {none:,} of the "
                f"{len(wrong):,} ({none / len(wrong):.0%}) without an answer); every advantage was 0")
        assert any(b.startswith(line) for b in said), (line, said)
    redrawn = g[g["arm"] == "resample_on_tie"]
    assert (redrawn["round"] > 0).sum() > len(redrawn) / 2  # the first round alone would be another count


def test_the_split_recounts_from_the_tables_and_matches_the_known_rates(tmp_path):
    sweep = answer_sweep(tmp_path / "sweep")
    frames = [pd.read_parquet(p).assign(job=str(j)) for j in (0, 1) for p in (sweep / str(j) / "groups").glob("*")]
    g = pd.concat(frames, ignore_index=True)
    split = all_wrong_split(g, [], window=4).set_index(["difficulty", "phase"])
    for level, (p, q) in LEVELS.items():
        counts = {"unanswered": 0, "answered": 0, "mixed": 0}
        for r in g[g["difficulty"] == level].itertuples():  # a plain recount
            if r.round == 0 and r.n_correct == 0:
                counts["unanswered" if r.n_answered == 0 else "answered" if r.n_answered == G else "mixed"] += 1
        row = split.loc[(level, "all")]
        assert {k: row[k] for k in counts} == counts and row["all_wrong"] == sum(counts.values())
        # the known shares among all-wrong groups: ((1 - q) / (1 - p))^G none answered, ((q - p) / (1 - p))^G all
        n = row["all_wrong"]
        for kind, share in (("unanswered", ((1 - q) / (1 - p)) ** G), ("answered", ((q - p) / (1 - p)) ** G)):
            assert abs(row[kind] / n - share) <= 4 * np.sqrt(share * (1 - share) / n) + 1e-9, (level, kind)
    assert split.loc[("1", "all"), "unanswered_share"] > 0.4 > split.loc[("2", "all"), "unanswered_share"]


def test_the_ties_figure_draws_the_unanswered_share_of_each_bar_as_recounted(tmp_path):
    """The ties-by-difficulty figure's cross-hatched part is, per difficulty, the first-round groups in which every
    sample was wrong and none answered, over the first-round groups: recounted by a plain loop."""
    from analysis.measures.ties import tie_fractions
    from analysis.sections.ties import with_unanswered

    sweep = answer_sweep(tmp_path / "sweep")
    g = pd.concat([pd.read_parquet(p).assign(job=str(j)) for j in (0, 1)
                   for p in (sweep / str(j) / "groups").glob("*")], ignore_index=True)
    round0 = g[g["round"] == 0]
    drawn = with_unanswered(tie_fractions(round0, ["group_size"]), round0, ["group_size"]).set_index("difficulty")
    for level in LEVELS:
        first = [r for r in round0.itertuples() if str(r.difficulty) == level]
        want = sum(r.n_correct == 0 and r.n_answered == 0 for r in first) / len(first)
        assert drawn.loc[level, "unanswered_frac"] == pytest.approx(want)
        assert drawn.loc[level, "unanswered_frac"] <= drawn.loc[level, "all_wrong_frac"]
    report = build_report(sweep, tmp_path / "report")
    assert "cross-hatched, the all-wrong ties in which no sample gave an answer" in report.read_text()
    assert (report.parent / "figures" / "ties_by_difficulty.png").is_file()


def test_format_failures_that_fall_away_are_in_the_findings(tmp_path):
    # at first most replies give no answer (q 0.02-0.03), by the end most do: the format is learned first
    sweep = answer_sweep(tmp_path / "sweep", answer_learn=0.03, steps=60, levels={"1": (0.01, 0.02), "2": (0.01, 0.03)})
    built = build_report(sweep, tmp_path / "report")
    report = both_pages(built)
    findings = "\n".join(in_words(built))
    assert "**Format failures** among all-wrong ties" in findings
    assert "(the model learned the answer format before the task)" in findings
    assert "### All-wrong ties: answered or not" in report


def test_a_run_whose_model_never_answers_in_its_format_warns_and_trains_nothing(tmp_path, caplog):
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=3, prompts_per_step=4, checkpoint_every=3)
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1, 2], 8, 4
    cfg.task.answer_format = "boxed"  # the built-in model answers bare: never in a box
    cfg.sampler.group_size, cfg.eval.n = 4, 4
    with caplog.at_level(logging.WARNING):
        run = train(cfg)
    warned = [r.getMessage() for r in caplog.records if "base model solves no" in r.getMessage()]
    assert len(warned) == 1 and "no `\\boxed{}` answer in 100% of 32 replies" in warned[0]
    assert warned[0].count("'") >= 4  # two replies quoted
    g = read_table(run, "groups").to_pandas()
    assert (g["n_answered"] == 0).all() and g["tie"].all() and (g["n_informative"] == 0).all()
    e = read_table(run, "eval").to_pandas()
    assert not e["answered"].any() and e["answer"].isna().all()
    base = e[e["step"] == 0]
    assert (base.groupby("difficulty")["completion"].count() == 4).all() and e[e["step"] > 0]["completion"].isna().all()
    c = read_table(run, "completions").to_pandas()  # log_completions=0: the first step's group of each difficulty
    assert sorted(c["difficulty"].unique()) == ["1", "2"] and (c["step"] == 1).all() and not c["answered"].any()
    assert (c.groupby("group").size() == 4).all()
    report = build_report(run, tmp_path / "report")
    text = report.read_text()
    first = text.split("## Findings", 1)[1].split("\n- ", 1)[1].splitlines()[0]
    assert first.startswith("**Nothing trained**: 12 of 12 groups drawn in steps 1–3 tied (all-wrong: 12, 12 of "
                            "the 12 (100%) without an answer); every advantage was 0"), first
    assert "Ranking" not in text.split("## Findings", 1)[1].split("\n## ", 1)[0]
    details = (report.parent / "DETAILS.md").read_text()
    assert "### The base model's replies" in details and "### Training groups" in details


@pytest.mark.parametrize("eval_n", [4, 0])
def test_stop_untrainable_ends_the_run_where_the_check_says_it_cannot_train(tmp_path, caplog, eval_n):
    """After the base evaluation (eval.n > 0) or after the first step (eval.n = 0): the run ends there, done, with
    run.json saying why, and the warning names the key either way."""
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=5, prompts_per_step=4, checkpoint_every=5)
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [1, 2], 8, 4
    cfg.task.answer_format = "boxed"  # the built-in model answers bare: never in a box
    cfg.sampler.group_size, cfg.eval.n, cfg.stop_untrainable = 4, eval_n, True
    with caplog.at_level(logging.WARNING):
        run = train(cfg)
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "done" and record["stopped"].startswith("stop_untrainable: ")
    steps = read_table(run, "steps").to_pandas() if (run / "steps").exists() else pd.DataFrame({"step": []})
    assert steps["step"].tolist() == ([] if eval_n else [1])
    assert [r.getMessage().endswith("Stopping here (stop_untrainable=true)") for r in caplog.records
            if "stop_untrainable" in r.getMessage()] == [True]
    cfg.out_dir, cfg.stop_untrainable = str(tmp_path / "on"), False
    cfg.max_steps = 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        train(cfg)
    assert [r.getMessage() for r in caplog.records if "stop_untrainable=true ends a run here" in r.getMessage()]
