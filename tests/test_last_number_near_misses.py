"""`last_number`'s near misses (grpo_lab/rewards/numbers.py rules 3, 5, 8): "0,046", "-+46",
"≈46" and "about 46" were read as 46. Each class is generated: a comma group that starts with 0, two signs, a
qualifier (approximation, bound, tolerance, negation, guess; every spelling the rule lists, in any case and dress)
before the gold, a "+" after it. None is ever the gold; and what the rule must not touch (tags, LaTeX ties,
operators) still reads right."""

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grpo_lab.rewards.numbers import last_number
from grpo_lab.rewards.rules import RewardWeights, score

W = RewardWeights(accuracy=1.0, format=0.5)


def right(reply: str, gold: int | str) -> bool:
    return score(reply, True, str(gold), "integer", W, "last_number").correct


WORDS = st.text(alphabet="abcdefghij ABC:=()'?\n", max_size=30)
QUALIFIERS = ["≈", "~", "∼", "≃", "≅", "<", ">", "≤", "≥", "≠", "<=", ">=", "!=", "±", "∓", "+/-", "\\approx",
              "\\sim", "\\le", "\\leq", "\\ge", "\\geq", "\\lt", "\\gt", "\\neq", "\\pm", "about", "around",
              "approximately", "approx", "approx.", "roughly", "nearly", "almost", "circa", "ca.", "close to", "over",
              "under", "above", "below", "at least", "at most", "more than", "less than", "fewer than", "greater than",
              "up to", "not", "maybe", "perhaps", "probably", "possibly"]
DRESS = ["{q} {n}", "{q}{n}", "{q}  {n}", "${q} {n}$", "**{q}** {n}", "{q} ${n}$", "({q} {n})", "{q} {n}."]


@settings(max_examples=500, deadline=None)
@given(words=WORDS, gold=st.integers(-10**9, 10**9), q=st.sampled_from(QUALIFIERS), dress=st.sampled_from(DRESS),
       case=st.sampled_from([str, str.upper, str.title]))
def test_a_qualified_number_is_never_the_answer(words, gold, q, dress, case):
    assume(not (q == "~" and dress.startswith("$")))  # in math mode "~" is a space (a tie), not "about"
    q = q if q.startswith("\\") else case(q)
    reply = f"{words} " + dress.format(q=q, n=gold)
    assert last_number(reply)[1] is None, reply  # qualified (or, "\\approx46", glued into a command's name)
    assert not right(reply, gold)
    assert right(f"{reply} So it is {gold}.", gold)  # an exact statement after it is read


@settings(max_examples=300, deadline=None)
@given(words=WORDS, groups=st.lists(st.integers(0, 999), min_size=1, max_size=3))
def test_a_comma_group_after_a_leading_zero_is_no_thousands(words, groups):
    digits = "".join(f"{g:03d}" for g in groups)
    reply = f"{words} 0," + ",".join(f"{g:03d}" for g in groups)  # "0,046", "0,046,000": a decimal comma, or a typo
    assert last_number(reply)[1] is None
    for gold in {int(digits), int("0" + digits), 46}:
        assert not right(reply, gold)
    assert right(f"{words} 1," + ",".join(f"{g:03d}" for g in groups), int("1" + digits))  # real thousands


@settings(max_examples=300, deadline=None)
@given(words=WORDS, gold=st.integers(0, 10**9), signs=st.text(alphabet="-+\u2212", min_size=2, max_size=3))
def test_two_signs_are_malformed(words, gold, signs):
    reply = f"{words} {signs}{gold}"
    assert last_number(reply) == (f"{signs}{gold}", None)
    assert not right(reply, gold) and not right(reply, -gold)


@settings(max_examples=200, deadline=None)
@given(words=WORDS, gold=st.integers(0, 10**9), tail=st.sampled_from(["", ".", " apples", "!", ")", " or more."]))
def test_a_plus_after_the_number_is_at_least_not_exactly(words, gold, tail):
    assert not right(f"{words} {gold}+{tail}", gold)


@pytest.mark.parametrize("reply,gold", [
    ("<answer>46</answer>", 46), ("<b>46</b>", 46), ("The sum is~46.", 46), ("46+x is not it: 46", 46),
    ("5 + 41 = 46", 46), ("5+41=46", 46), ("x > 3, so the answer is 46", 46), ("1,046", 1046),
    ("Not 45: 46", 46), ("it is 46 + 0 = 46", 46), ("about 40 people; exactly 46", 46), ("cannot be 45; 46", 46),
])
def test_what_the_rule_leaves_alone(reply, gold):
    assert right(reply, gold), reply


@pytest.mark.parametrize("reply", ["0,046", "-+46", "≈46", "about 46", "The answer is about 46.", "~46", "x ≥ 46",
                                   "46±2", "+/-46", "not 46", "46+", "roughly -46", "$\\approx 46$"])
def test_the_issue_cases_are_not_46(reply):
    assert not right(reply, 46) and not right(reply, -46)
