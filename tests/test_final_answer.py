"""One final answer, whole: a completion that states two answers that disagree, or dresses its answer in a
qualifier (approximately, a percentage, "and so on", a second line), earns no accuracy reward, in every
answer format and for LaTeX answers; a plain right answer, however it is dressed, still does. The named near
misses, the decided edge cases, and generated ones (hypothesis) of both kinds."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import answers
from fixtures.answers import NAMED
from grpo_lab.rewards.rules import ANSWER_FORMATS, RewardWeights, score
from grpo_lab.rewards.scorer import Scorer

W = RewardWeights(accuracy=1.0, format=0.5)


def verdicts(text: str, gold: str = "46") -> dict[str, tuple[bool, bool]]:
    """(correct, formatted) in every integer format and as a LaTeX answer."""
    out = {f: score(text, True, gold, "integer", W, f) for f in ANSWER_FORMATS}
    out["latex"] = score(text, True, gold, "latex", W)
    return {k: (s.correct, s.formatted) for k, s in out.items()}


@pytest.mark.parametrize("text", NAMED)
def test_the_named_near_misses_earn_nothing_anywhere(text):
    assert not any(correct for correct, _ in verdicts(text).values()), verdicts(text)
    assert not any(correct for correct, _ in verdicts(text.replace("\\boxed{", "Answer: ").replace("}", "\n")).values())


@pytest.mark.parametrize("text,right_in,formatted_in", [
    # the same answer twice: right (nothing disagrees), but two statements are not the one the format asks for
    (r"\boxed{46} so \boxed{46}", {"boxed", "latex", "last_number"}, set()),
    ("Answer: 46\nAnswer: 46", {"answer_line", "last_number"}, set()),
    # dress a reader takes off: spaces, leading zeros, math delimiters, bold, a sentence's period
    (r"\boxed{ 46 }", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    (r"\boxed{046}", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    (r"\boxed{46.}", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    (r"$\boxed{46}$", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    (r"\boxed{\textbf{46}}", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    # one statement, not two
    (r"The final answer is $\boxed{46}$.", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    ("Answer: 46.", {"answer_line", "last_number"}, {"answer_line"}),
    ("**Answer:** $46$", {"answer_line", "last_number"}, {"answer_line"}),
    # a sentence after the answer that states no other answer
    (r"\boxed{46} because 40 + 6 = 46 and nothing else fits.", {"boxed", "latex", "last_number"}, {"boxed", "latex"}),
    # a LaTeX answer may be an equal expression; an integer format wants the integer
    (r"\boxed{\frac{92}{2}}", {"latex"}, {"latex"}),
    # another answer anywhere, in any form, makes it wrong
    ("The answer is 47.\n" + r"\boxed{46}", set(), set()),
    ("Final answer: 47\n" + r"\boxed{46}", set(), set()),
    (r"\boxed{47}" + "\nAnswer: 46", set(), set()),
    ("Answer: 47\nAnswer: 46", set(), set()),
    (r"\boxed 46", set(), set()),  # a box without braces boxes one token: unreadable
    (r"\boxed{46 or 47}", set(), {"latex"}),  # one box, well formed: the format reward is for the format
    (r"\boxed{\approx 46}", set(), {"latex"}),
    (r"\boxed{46}" + "\n" + r"\boxed{4 7}", set(), set()),
    ("46", {"bare", "number", "last_number"}, {"bare", "number", "last_number"}),
    ("46.", {"last_number"}, {"last_number"}),  # bare/number: the whole completion, no dress to take off;
    # last_number: a sentence's period after the number
    ("6 + 40 = 46", {"last_number"}, set()),  # the model's own words: only last_number reads them
])
def test_decided_cases(text, right_in, formatted_in):
    got = verdicts(text)
    assert {k for k, (c, _) in got.items() if c} == right_in, got
    assert {k for k, (_, f) in got.items() if f} == formatted_in, got


def test_plain_right_answers_still_earn_the_reward():
    for gold in ("46", "-3", "0", "1000"):
        assert verdicts(gold, gold)["bare"] == (True, True) and verdicts(gold, gold)["number"] == (True, True)
        assert verdicts(rf"So the sum is \boxed{{{gold}}}.", gold)["boxed"] == (True, True)
        assert verdicts(f"Adding them.\nAnswer: {gold}", gold)["answer_line"] == (True, True)
        assert verdicts(rf"\boxed{{{gold}}}", gold)["latex"] == (True, True)
    with Scorer(workers=1, answer_timeout_s=5.0, step_budget_s=60.0) as scorer:
        golds = [r"\frac{1}{2}", r"\sqrt{2}", "x+1", r"(-\infty, 3]", r"\{1, 2\}", "1, 2", r"46\%", r"3\pi"]
        answers = [r"\frac12", r"\sqrt{2}", "1+x", r"(-\infty,3]", r"\{2, 1\}", "2, 1", r"46\%", r"3 \pi"]
        out = scorer.score_all([rf"Thus \boxed{{{a}}}." for a in answers], [True] * len(answers), golds, "latex", W)
        assert [s.correct for s in out] == [True] * len(golds)


# --- generated (fixtures/answers.py): statements in every dress, filler between them
def _drivers(draw):
    return (lambda seq: draw(st.sampled_from(list(seq)))), (lambda lo, hi: draw(st.integers(lo, hi)))


near_miss = st.composite(lambda draw: answers.near_miss(*_drivers(draw)))
right_answer = st.composite(lambda draw: answers.right_answer(*_drivers(draw)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=near_miss())
def test_generated_near_misses_earn_nothing(case):
    text, gold = case
    for fmt in ANSWER_FORMATS:
        assert not score(text, True, gold, "integer", W, fmt).correct, (fmt, text)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=near_miss())
def test_generated_near_misses_earn_nothing_as_latex(case):
    text, gold = case
    assert not score(text, True, gold, "latex", W).correct, text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=right_answer())
def test_generated_right_answers_earn_the_reward(case):
    text, line, gold = case
    assert score(text, True, gold, "integer", W, "boxed").correct, text
    assert score(line, True, gold, "integer", W, "answer_line").correct, line
    assert score(line, True, gold, "latex", W).correct, line
