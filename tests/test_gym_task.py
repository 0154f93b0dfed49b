"""task=gym: reasoning-gym generators as a task. Pools recounted from the questions' own text (chain_sum's terms and
digits per level, each answer recomputed by hand), disjoint and seeded; the reward is the generator's check on the
one final answer read, never its leniency on a whole reply; bad settings are one line naming the key; a training
run records the generator, its version, config and seed."""

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.rewards.rules import RewardWeights, stated_answer
from grpo_lab.rewards.scorer import judges_for, score_all
from grpo_lab.run.tables import read_table
from grpo_lab.tasks import build_task
from grpo_lab.tasks.gym import SAFE_ANSWER, check_gym

reasoning_gym = pytest.importorskip("reasoning_gym")  # the dev extra installs it: CI runs every test here
ROOT = Path(__file__).resolve().parent.parent
W = RewardWeights()


def gym_cfg(**task) -> TrainConfig:
    cfg = TrainConfig()
    cfg.task.name = "gym"
    for key, value in task.items():
        target = cfg.task.gym if key in ("generator", "config", "levels", "template", "shots") else cfg.task
        setattr(target, key, value)
    return cfg


def score(texts, problem, task, answer_format=None):
    return score_all(texts, [True] * len(texts), [problem.answer] * len(texts), "graded", W,
                     answer_format=answer_format or task.answer_format,
                     judges=judges_for([problem], len(texts), "graded", task.grader))


def test_chain_sum_levels_recount_from_the_questions():
    """Each level's problems have exactly its terms and digits, and each answer is the expression's value worked
    out here; the pools are disjoint, distinct, seeded (the same config, the same problems) and sized as asked."""
    cfg = gym_cfg(train_per_level=40, eval_per_level=20)
    validate(cfg)
    task = build_task(cfg.task)
    assert (len(task.train), len(task.held_out)) == (160, 80)
    questions = [p.prompt for p in task.train + task.held_out]
    assert len(set(questions)) == len(questions)
    assert not {p.prompt_id for p in task.train} & {p.prompt_id for p in task.held_out}
    for p in task.train + task.held_out:
        level = cfg.task.gym.levels[int(p.difficulty) - 1]
        expression = re.fullmatch(r"State the final answer to the following arithmetic problem: (.*) =", p.prompt)[1]
        tokens = expression.split(" ")
        terms, ops = tokens[::2], tokens[1::2]
        assert len(terms) == level["min_terms"] == level["max_terms"]
        digits = level["min_digits"]
        assert all(len(t) == digits and (digits == 1 or t[0] != "0") for t in terms), p.prompt
        value = int(terms[0])
        for op, term in zip(ops, terms[1:]):
            value = value + int(term) if op == "+" else value - int(term)
        assert p.answer == str(value)
    assert task.difficulty_labels["3"] == "min_terms=3, max_terms=3, min_digits=2, max_digits=2"
    assert build_task(cfg.task).train == task.train  # seeded
    other = gym_cfg(train_per_level=40, eval_per_level=20, seed=7)
    assert not {p.prompt for p in build_task(other.task).train[80:]} & set(questions[80:160])


def test_held_out_skips_training_questions_when_a_level_is_small():
    """Level 1 of two one-digit terms has 200 questions: 150 train, and the 50 held out are the rest, found
    through the held-out stream's own seed; asking more than exist is refused naming the key."""
    levels = [{"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}]
    task = build_task(gym_cfg(levels=levels, train_per_level=150, eval_per_level=50).task)
    assert len({p.prompt for p in task.train + task.held_out}) == 200
    with pytest.raises(ConfigError, match=r"^task.eval_per_level=51 is too large: level 1 of chain_sum gave 50 "):
        build_task(gym_cfg(levels=levels, train_per_level=150, eval_per_level=51).task)


@pytest.mark.parametrize("answer_format,right,wrong", [
    ("boxed", ["\\boxed{57}", "so 50 + 7 = \\boxed{57}", "\\boxed{57.0}"],
     ["\\boxed{57} or \\boxed{58}", "\\boxed{57 or 58}", "\\boxed{58}", "57", "\\boxed{5 7}", "\\boxed{(57)}"]),
    ("last_number", ["50 + 7 = 57.", "The answer is 57", "57"],
     ["57 or 58", "The answer is 57. No: 58", "\\boxed{57%}. So 57", "57th"]),
    ("answer_line", ["50 + 7 = 57\nAnswer: 57"], ["Answer: 57\nAnswer: 58", "Answer: 57 or 58", "Answer: about 57"]),
])
def test_one_final_answer_whole_is_checked_by_the_generator(answer_format, right, wrong):
    """gsm_symbolic's own check reads the first number of what it is given ("57 or 58" scores 1.0 there); here it
    only ever sees the one final answer, which for a number's answer must be one number, whole."""
    cfg = gym_cfg(generator="gsm_symbolic", levels=[{}], train_per_level=8, eval_per_level=0,
                  answer_format=answer_format)
    task = build_task(cfg.task)
    problem = next(p for p in task.train if p.answer.isdigit())
    gold = problem.answer
    sub = [t.replace("57", gold).replace("58", str(int(gold) + 1)) for t in right + wrong]
    scored = score(sub, problem, task)
    assert [s.correct for s in scored] == [True] * len(right) + [False] * len(wrong), list(zip(sub, scored))
    check = reasoning_gym.create_dataset("gsm_symbolic", seed=1, size=1)
    entry = {"answer": gold, "metadata": {}}
    assert check.score_answer(f"{gold} or {int(gold) + 1}", entry) == 1.0  # the leniency our reading never asks


def test_partial_credit_is_wrong_and_hostile_answers_never_reach_the_check():
    """A check's partial credit (chain_sum gives len(gold)/len(answer) where the gold is inside the answer) is a
    wrong answer: the reward stays 1 or 0. Text that could run code or build a huge number under a sympy parse is
    wrong without being checked."""
    task = build_task(gym_cfg(train_per_level=4, eval_per_level=0, answer_format="boxed").task)
    problem = task.train[0]
    gold = problem.answer
    hostile = ["__import__('os')", "eval(chr(49))", "9**9**9", "2^1000000", "a[0]", "x\\y", '"1"', "{1}"]
    assert not any(SAFE_ANSWER.fullmatch(h) and "**" not in h for h in hostile)
    scored = score([f"\\boxed{{{gold}0}}", *(f"\\boxed{{{h}}}" for h in hostile), f"\\boxed{{{gold}}}"], problem, task)
    assert [s.correct for s in scored] == [False] * (1 + len(hostile)) + [True]
    assert {s.reward for s in scored} == {0.0, 1.0}


def test_stated_answer_reads_the_format_and_refuses_hedges():
    assert stated_answer("It is \\boxed{ 3/4 }", True, "boxed") == ("3/4", True)
    assert stated_answer("\\boxed{3/4} and \\boxed{3/4}", True, "boxed") == ("3/4", False)  # one answer, twice
    assert stated_answer("\\boxed{3/4} or \\boxed{1/2}", True, "boxed") == (None, False)
    assert stated_answer("1 + 2 = 3", False, "last_number") == (None, False)  # cut off: no last number
    assert stated_answer("1,000", True, "last_number") == ("1000", True)


@pytest.mark.parametrize("set_task,message", [
    (dict(generator="no_such"), r"^task.gym.generator='no_such' is invalid: is not a reasoning-gym generator"),
    (dict(levels=[]), r"^task.gym.levels=\[\] is invalid"),
    (dict(levels=[{"min_term": 2}]), r"^task.gym.levels\[0\]='min_term' is invalid: is not a key of chain_sum"),
    (dict(config={"seed": 3}), r"^task.gym.config='seed' is invalid: is set by the task"),
    (dict(levels=[{"min_terms": 3, "max_terms": 2}]), r"^task.gym.levels\[0\]=\{'min_terms': 3, 'max_terms': 2\} "
                                                      r"is invalid for chain_sum: max_terms must be >= min_terms"),
    (dict(template="Q:"), r"^task.gym.template='Q:' is invalid: must contain \{question\}"),
    (dict(template="{question} {answer}"), r"^task.gym.template=.* only \{question\} and \{instruction\}"),
    (dict(shots=2), r"^task.gym.shots=2 is invalid: needs a model=hf tokenizer"),
    (dict(generator="word_sorting", levels=[{}], answer_format="last_number"),
     r"^task.answer_format='last_number' is invalid: reads a number, but word_sorting's answers are not all numbers"),
])
def test_bad_settings_are_one_line_naming_the_key(set_task, message):
    with pytest.raises(ConfigError, match=message) as e:
        validate(gym_cfg(**set_task))
    assert "\n" not in str(e.value)


def test_shots_are_worked_answers_stating_the_answer_in_the_format():
    """gsm_symbolic's answer_cot, its "#### N" line replaced by the format's statement of N; a generator with no
    worked answers is refused."""
    cfg = gym_cfg(generator="gsm_symbolic", levels=[{}], shots=2, chat_template=True, answer_format="boxed")
    shots = build_task(cfg.task).shots
    assert len(shots) == 2 and all(q.endswith("Put the final answer in \\boxed{}.") for q, _ in shots)
    for _, worked in shots:
        assert "####" not in worked and stated_answer(worked, True, "boxed")[0] is not None
    lacking = gym_cfg(shots=1, chat_template=True)
    lacking.model.name = "hf"
    with pytest.raises(ConfigError, match=r"^task.gym.shots=1 is invalid: chain_sum gives no worked answer"):
        check_gym(lacking)


def test_a_gym_run_trains_and_records_its_generator(tmp_path):
    """Through Hydra on the built-in model: groups by the generator's levels, the run's record names the
    generator, reasoning-gym's version, its levels and the pools' seed."""
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "experiments.train", "task=gym", "task.train_per_level=4",
                          "task.eval_per_level=2", "task.answer_format=bare", "max_steps=2", "prompts_per_step=4",
                          "sampler.group_size=4", "eval.n=2", "rollout.max_new_tokens=6", f"hydra.run.dir={run}"],
                         cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, text=True, capture_output=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "done"
    assert record["task_source"]["generator"] == "chain_sum" and record["task_source"]["seed"] == 1234
    assert record["task_source"]["reasoning_gym"] == metadata.version("reasoning-gym")
    groups = read_table(run, "groups").to_pandas()
    assert len(groups) == 8 and groups["prompt_id"].str.startswith("gym-chain_sum-L").all()
    assert set(groups["difficulty"]) <= {"1", "2", "3", "4"}
    assert record["difficulty_labels"]["1"] == "min_terms=2, max_terms=2, min_digits=1, max_digits=1"


def test_generator_keys_set_on_the_command_line_reach_the_task():
    """task.gym.config is a dict of the generator's own keys: an entry added on the command line
    (+task.gym.config.KEY=VALUE) is taken, not refused as an unknown config key, and reaches the generator; a
    mistyped key of the schema beside it is still refused."""
    from experiments.common import compose_jobs, preflight, register_configs

    register_configs()
    args = ["task=gym", "task.gym.generator=basic_arithmetic", "+task.gym.config.allow_negation=false",
            "+task.gym.config.allow_parentheses=false", "task.gym.levels=[{operators:['+','-']}]",
            "task.answer_format=last_number", "task.train_per_level=20", "task.eval_per_level=4"]
    (cfg,) = compose_jobs("train", args)
    assert cfg.task.gym.config == {"allow_negation": False, "allow_parentheses": False}
    task = build_task(cfg.task)
    assert task.source["config"] == cfg.task.gym.config
    assert not any("(" in p.prompt or "-(" in p.prompt or " -" in p.prompt.replace(" - ", " ") for p in task.train)
    _, error = preflight("train", [*args, "+task.gym.confg.allow_negation=false"])
    assert error.startswith("task.gym.confg.allow_negation is not a config key") and "\n" not in error
