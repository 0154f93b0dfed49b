"""Rewards under generated hostile text: no exception, no code run, every call bounded by the scorer's
budget, and no near miss ever rewarded."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpo_lab.rewards.rules import MAX_ANSWER_CHARS, RewardWeights, extract_integer, score
from grpo_lab.rewards.scorer import Scorer

W = RewardWeights(accuracy=1.0, format=0.5)
CODE = [  # text that would do something if anything evaluated it
    "__import__('os').system('touch {marker}')",
    "open('{marker}', 'w').write('x')",
    "\\boxed{{__import__('os').system('touch {marker}')}}",
    "eval(\"open('{marker}','w')\")",
]
LATEX_BITS = ["\\frac{", "}{", "}", "{", "\\sqrt{", "^{", "_{", "\\boxed{", "\\left(", "\\right)", "!", "10", "x",
              "\\pi", "0.5", "\\infty", "\\cdot", "\\\\", "$", "\x00", "\u200b", "é", "\U0001f600", "e", "\n"]
text = st.one_of(
    st.text(max_size=300),  # any unicode, NUL bytes and lone surrogates included
    st.lists(st.sampled_from(LATEX_BITS), max_size=60).map("".join),  # nested, unbalanced LaTeX
    st.builds(lambda n, c: c * n, st.integers(0, 20_000), st.sampled_from(["9", "{", "\\boxed{", "^{10", "\x00"])),
    st.integers(-10**30, 10**30).map(str),
)


def near_misses(g: int) -> list[str]:
    return [f"{g}.5", f"{g}e3", f"{g}abc", f"{g},000", f"{g} no wait {g + 1}", f"{g}\n{g + 1}", f"{g}/1", f"{g}.0",
            f"{g + 1}", f"0x{g:x}", f"{g}!", f"{g}%", f"({g})", f"{g} {g}", f"{g}_000", f"{g}\x00", f"{g}\u0660"]


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=text, gold=st.integers(-10**6, 10**6), finished=st.booleans())
def test_integer_scoring_never_fails_and_rewards_only_the_integer(completion, gold, finished):
    s = score(completion, finished, str(gold), "integer", W)
    stripped = completion.strip()
    body = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    integer = body != "" and all(c in "0123456789" for c in body) and len(stripped) <= MAX_ANSWER_CHARS
    assert s.correct == (integer and int(stripped) == gold)
    assert s.reward == 1.0 * s.correct + 0.5 * s.formatted


@settings(max_examples=300, deadline=None)
@given(gold=st.integers(-10**6, 10**6))
def test_no_integer_near_miss_is_rewarded(gold):
    for miss in near_misses(gold):
        assert not score(miss, True, str(gold), "integer", W).correct, miss
    assert score(f" {gold}\n", True, str(gold), "integer", W).correct


@pytest.fixture(scope="module")
def scorer():
    with Scorer(workers=2, answer_timeout_s=1.0, step_budget_s=5.0) as s:
        yield s


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(text, min_size=1, max_size=25), gold=st.sampled_from(["\\frac{1}{2}", "3", "\\sqrt{2}", "x+1"]))
def test_latex_scoring_of_hostile_batches_returns_within_the_budget(scorer, batch, gold, tmp_path_factory):
    marker = tmp_path_factory.getbasetemp() / "pwned"
    batch = batch + [c.format(marker=marker) for c in CODE] + [f"\\boxed{{{b}}}" for b in batch[:5]]
    out = scorer.score_all(batch, [True] * len(batch), [gold] * len(batch), "latex", W)
    assert len(out) == len(batch)
    for s in out:
        assert s.correct in (True, False) and not (s.correct and s.timed_out)
    assert not marker.exists()


TOWER = r"\boxed{((999^{999})^{999})^{999}}"  # a 3e9-digit integer: no machine builds it in seconds
PREFILTERED = [r"\boxed{10^{10^{10}}}", r"\boxed{(10^{100})!}", r"\boxed{9^9^9}", r"\boxed{2^{100000}}"]


def test_the_step_budget_ends_a_stuck_check_and_the_pool_recovers():
    with Scorer(workers=1, answer_timeout_s=600.0, step_budget_s=1.0) as quick:  # the budget, not the alarm
        out = quick.score_all([TOWER, *PREFILTERED, r"\boxed{5}"], [True] * 6, ["5"] * 6, "latex", W)
        assert [s.correct for s in out] == [False] * 5 + [True]
        assert [s.timed_out for s in out] == [True] + [False] * 5  # pre-filtered: wrong at once, not timed out
        again = quick.score_all([r"\boxed{\frac{10}{2}}", r"\boxed{4}"], [True] * 2, ["5"] * 2, "latex", W)
        assert [(s.correct, s.timed_out) for s in again] == [(True, False), (False, False)]


def test_the_answer_alarm_ends_a_slow_check_and_keeps_the_worker():
    with Scorer(workers=1, answer_timeout_s=0.5, step_budget_s=600.0) as quick:
        quick.score_all([r"\boxed{4}"], [True], ["5"], "latex", W)
        pid = quick._procs[0].pid
        out = quick.score_all([TOWER, r"\boxed{\frac{10}{2}}"], [True] * 2, ["5"] * 2, "latex", W)
        assert [(s.correct, s.timed_out) for s in out] == [(False, True), (True, False)]
        assert quick._procs[0].pid == pid


def test_latex_near_misses_are_not_rewarded(scorer):
    misses = ["0.50000001", "0.4999999", r"\frac{1}{2}+10^{-9}", r"\frac{1}{2}+10^{-30}", r"\frac{1}{3}", "0.51",
              r"\frac{1}{2.0000001}", "1/2.000001", r"0.5\cdot 1.0000001"]
    out = scorer.score_all([rf"\boxed{{{m}}}" for m in misses], [True] * len(misses), [r"\frac{1}{2}"] * len(misses),
                           "latex", W)
    assert [s.correct for s in out] == [False] * len(misses)
    hits = ["0.5", r"\frac{2}{4}", r"\dfrac{1}{2}", "1/2", r"\frac12"]
    out = scorer.score_all([rf"\boxed{{{h}}}" for h in hits], [True] * len(hits), [r"\frac{1}{2}"] * len(hits),
                           "latex", W)
    assert [s.correct for s in out] == [True] * len(hits)


def test_extract_integer_is_bounded():
    assert extract_integer("7" * (MAX_ANSWER_CHARS + 1)) is None and extract_integer("7" * MAX_ANSWER_CHARS)
