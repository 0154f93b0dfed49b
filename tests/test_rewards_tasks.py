"""Rewards on untrusted text, the arithmetic task's pools, and the local math-set loader."""

import json

import pytest

from grpo_lab.rewards.rules import RewardWeights, extract_integer, last_boxed, score
from grpo_lab.tasks import ArithmeticTask, load_math_task
from grpo_lab.tasks.arithmetic import LEVELS


@pytest.mark.parametrize("text,finished,correct,formatted", [
    ("46", True, True, True),
    (" 046", True, True, True),
    ("46", False, True, False),  # right but truncated: accuracy yes, format no
    ("46+1", True, False, False),  # only the whole completion is an answer, never a prefix
    ("45", True, False, True),
    ("46.5", True, False, False),
    ("46e3", True, False, False),
    ("46abc", True, False, False),
    ("46,000", True, False, False),
    ("46 no wait 47", True, False, False),
    ("46\n47", True, False, False),
    ("٤٦", True, False, False),  # Arabic-Indic digits: int() would read 46
    ("4" * 5000, True, False, False),  # past MAX_ANSWER_CHARS: wrong unread (no int() of 5000 digits)
    ("", True, False, False),
    ("__import__('os').system('echo pwned')", True, False, False),
])
def test_integer_scoring(text, finished, correct, formatted):
    s = score(text, finished, "46", "integer", RewardWeights(accuracy=1.0, format=0.5))
    assert (s.correct, s.formatted) == (correct, formatted)
    assert s.reward == 1.0 * correct + 0.5 * formatted


def test_extraction_normalises_and_never_evaluates():
    assert extract_integer("+007") == "7" and extract_integer(" -3\n") == "-3"
    assert extract_integer("2*3") is None and extract_integer("x") is None
    assert last_boxed(r"so \boxed{\frac{1}{2}} and \boxed{3}") == "3"
    assert last_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}" and last_boxed(r"\boxed{open") is None


def test_latex_answers_use_math_verify():
    w = RewardWeights()
    assert score(r"The answer is \boxed{0.5}", True, r"\frac{1}{2}", "latex", w).correct
    assert score(r"\boxed{ \frac12 }", True, r"\frac{1}{2}", "latex", w).correct
    assert not score(r"\boxed{0.6}", True, r"\frac{1}{2}", "latex", w).correct
    for near in ("0.50000001", "0.4999999", r"\frac{1}{2}+10^{-9}", r"\frac{1}{3}", "0.5000000000000000001"):
        assert not score(rf"\boxed{{{near}}}", True, r"\frac{1}{2}", "latex", w).correct, near  # exact gold: exact
    assert score(r"\boxed{0.25}", True, "0.25", "latex", w).correct
    assert not score(r"\boxed{0.2500001}", True, "0.25", "latex", w).correct
    assert not score(r"\boxed{0.3333333}", True, r"\frac{1}{3}", "latex", w).correct
    assert not score("no box here", True, "1", "latex", w).correct
    with pytest.raises(ValueError, match="'integer', 'latex'"):
        score("1", True, "1", "python", w)


def test_arithmetic_pools_are_seeded_disjoint_and_stable():
    a = ArithmeticTask.build(seed=7)
    b = ArithmeticTask.build(seed=7)
    assert a == b and len(a.train) == 32 * len(LEVELS) and len(a.held_out) == 16 * len(LEVELS)
    assert not {p.prompt_id for p in a.train} & {p.prompt_id for p in a.held_out}
    assert {p.difficulty for p in a.train} == {str(lv) for lv in LEVELS}
    for p in a.train:
        x, y = p.prompt.rstrip("=").split("+")
        assert int(p.answer) == int(x) + int(y) and p.prompt_id.endswith(f"{x}+{y}")
    assert ArithmeticTask.build(seed=8).train != a.train
    with pytest.raises(ValueError, match="task.eval_per_level=30 is too large: level 1"):
        ArithmeticTask.build(eval_per_level=30)
    with pytest.raises(ValueError, match=r"task.levels=\[1, 9\] is invalid: unknown level 9"):
        ArithmeticTask.build(levels=[1, 9])


def test_math_set_loader(tmp_path):
    rows = [{"problem": f"What is {i}/2?", "solution": rf"It is \boxed{{\frac{{{i}}}{{2}}}}",
             "level": f"Level {i % 5 + 1}", "unique_id": f"p{i}"} for i in range(50)]
    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    task = load_math_task(str(path))
    assert len(task.train) + len(task.held_out) == 50 and task.held_out and task.answer_kind == "latex"
    p = next(p for p in task.train + task.held_out if p.prompt_id == "p3")
    assert p.answer == r"\frac{3}{2}" and p.difficulty == "4" and "What is 3/2?" in p.prompt
    assert load_math_task(str(path)) == task  # the hash split is stable

    plain = tmp_path / "plain.jsonl"  # no level field: every problem is one difficulty, "all"
    plain.write_text("\n".join(json.dumps({"problem": f"{i}+1", "answer": str(i + 1)}) for i in range(20)))
    assert {p.difficulty for p in (lambda t: t.train + t.held_out)(load_math_task(str(plain)))} == {"all"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "1+1"}))
    with pytest.raises(ValueError, match=r"bad.jsonl:1: no field 'answer'"):
        load_math_task(str(bad))
    with pytest.raises(FileNotFoundError, match="task.path: no such file"):
        load_math_task(str(tmp_path / "missing.parquet"))


GOOD = {"problem": "1+1", "answer": "2", "level": 1}


@pytest.mark.parametrize("line,message", [
    (b'{"problem": "1+1", "answer": "\xff2", "level": 1}', r"bad.jsonl:2: not UTF-8 \(byte 0xff at column 31\)"),
    (b'["1+1", "2"]', r"bad.jsonl:2: not a JSON object \(a list\)"),
    (b'{"problem": null, "answer": "2", "level": 1}', r"bad.jsonl:2: field 'problem' is null"),
    (b'{"problem": "1+1", "answer": "2", "level": null}', r"bad.jsonl:2: field 'level' is null"),
    (b'{"problem": "1+1", "answer": " ", "level": 1}', r"bad.jsonl:2: field 'answer' is empty"),
    (b'{"problem": {"a": 1}, "answer": "2", "level": 1}', r"bad.jsonl:2: field 'problem' must be text"),
    (b'{"problem": "1+1", "answer": "2", "level": 1', r"bad.jsonl:2: not a JSON line"),
    (b'{"problem": "1+1", "solution": "no box", "level": 1}', r"bad.jsonl:2: no field 'answer' and no \\boxed"),
])
def test_math_set_errors_name_file_line_and_field(tmp_path, line, message):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(json.dumps(GOOD).encode() + b"\n" + line + b"\n")
    with pytest.raises(ValueError, match=message) as caught:
        load_math_task(str(bad))
    assert "\n" not in str(caught.value)


def test_data_and_model_folder_errors_come_before_any_model_loads(tmp_path):
    """validate() reads the data file and looks into a local model folder: one line, the key named."""
    from grpo_lab.config import TrainConfig
    from grpo_lab.config.checks import validate
    from grpo_lab.errors import ConfigError, InputError

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "problem": None}) + "\n")
    cfg = TrainConfig()
    cfg.task.name, cfg.task.path = "mathset", str(bad)
    with pytest.raises(InputError, match=r"bad.jsonl:2: field 'problem' is null"):
        validate(cfg)
    cfg = TrainConfig()
    cfg.model.name, cfg.model.path = "hf", str(tmp_path)
    with pytest.raises(ConfigError, match=r"model.path=.* the folder has no model/tokenizer"):
        validate(cfg)
