"""Rule-based rewards: answer extraction, accuracy, format, and their weighted sum.

Completions are untrusted text. Nothing is ever evaluated as code, and nothing is read as an answer
that is not one. A careful grader's rule: **one final answer, whole.**
- integer tasks: the answer the format names (ANSWER_FORMATS) must be, whole, one integer in ASCII digits
  with an optional sign; "46.5", "46e3", "46abc", "46,000", "46 no wait 47" and "46\\n47" are wrong for 46.
  `last_number` reads the last number of a finished reply instead (grpo_lab/rewards/numbers.py: "5 + 8 = 13."
  is 13; "1,000" and "13.0" are read whole; a truncated reply has none).
- LaTeX tasks: the last box; equal when the text matches, else when math-verify finds the two
  equal with no numeric tolerance where the gold is exact: a decimal answer must equal the gold
  exactly (0.5 = 1/2; 0.50000001 and 0.4999999 are not), and other floats are rounded to
  FLOAT_DIGITS places, not math-verify's default 6; a qualifier the gold lacks (\\approx, \\%, \\ldots,
  a line break, "or") makes it another answer. An undefined value is never right, whatever the gold: NaN
  spelled out ("nan", "\\text{NaN}": NaN equals nothing, though sympy's NaN equals itself), a fraction over
  zero ("\\frac{0}{0}", "1/0"), or what math-verify reads as undefined.
- every other final-answer statement of the completion (each box, answer line and "answer is N":
  grpo_lab/rewards/answers.py) must say the same answer, else the completion is wrong: two answers
  that disagree are a hedge, whichever comes last. The same answer stated twice is right (its format
  reward needs exactly one statement). Under `last_number` each statement must be, whole, one number (its
  dress taken off) with the reply's value: "The answer is 12. No: 5 + 8 = 13" is a hedge, and
  "\\boxed{13\\%}. So 13" carries a qualifier: both wrong.
LaTeX checks run in a small pool of worker processes (`Scorer`), each answer under its own
time limit and each step's checks under a budget; an answer not checked in time is wrong and
counted (`Scored.timed_out`, the steps table's `score_timeouts`), so hostile text cannot stall a step.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from grpo_lab.rewards.answers import (
    MAX_ANSWER_CHARS,
    MAX_STATEMENTS,
    answer_line,
    clean,
    hedges,
    last_boxed,
    statements,
)
from grpo_lab.rewards.numbers import last_number, number_alone, number_text

__all__ = ["ANSWER_FORMATS", "MAX_ANSWER_CHARS", "RewardWeights", "Scored", "extract_integer", "final_answer",
           "last_boxed", "score", "undefined"]

_INT = re.compile(r"[+-]?[0-9]+")  # ASCII only: "٤٦" is not an answer
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
FLOAT_DIGITS = 12  # math-verify rounds floats inside expressions to this many places (its default: 6)
EXACT_DIGITS = 50  # exact golds: a difference must vanish at 50 digits (math-verify's default: 15)
# an exponent that holds another power, has 4+ digits, or a factorial of 4+ digits or of a group:
# numbers too large to build; a gold written that way still matches as text
# a value (its dress and spaces off) that spells an undefined one: NaN, a fraction over zero (math-verify finds the
# rest, e.g. 0/0 written otherwise); checked on the text, as a text-equal answer never reaches math-verify
_UNDEFINED = re.compile(r"[+-]?(?:nan|\\[dt]?frac\{[^{}]*\}\{[+-]?0+(?:\.0*)?\}|[^/]+/[+-]?0+(?:\.0*)?)", re.IGNORECASE)
_HUGE = re.compile(r"\^\s*\{[^{}]*\^|\^\s*[0-9]+\s*\^|\^\s*\{?\s*[0-9]{4,}|\*\*|[0-9]{4,}\s*!|[)}\]]\s*!")


@dataclass(frozen=True)
class RewardWeights:
    accuracy: float = 1.0
    # 0 keeps the reward binary (1 = correct, 0 = wrong), so a tie means "all right" or "all
    # wrong"; set > 0 for DeepSeek-style format shaping (ties then also need equal format).
    format: float = 0.0


@dataclass(frozen=True)
class Scored:
    answer: str | None  # extracted and normalised; None when nothing could be extracted
    correct: bool
    formatted: bool
    reward: float
    timed_out: bool = False  # the check ran out of time: scored wrong, and counted


def extract_integer(completion: str) -> str | None:
    """The integer the whole completion is, normalised ("007" -> "7", "+3" -> "3"); None otherwise."""
    text = completion.strip()
    if len(text) > MAX_ANSWER_CHARS or not _INT.fullmatch(text):
        return None
    return str(int(text))


def undefined(value: str) -> bool:
    """Whether a LaTeX value spells an undefined number (NaN, a fraction over zero), its dress and spaces off."""
    return bool(_UNDEFINED.fullmatch(re.sub(r"\s+", "", clean(value))))


def _exact_number(text: str) -> Fraction | None:
    """A plain decimal or integer literal as an exact fraction ("0.5" -> 1/2); None for anything else."""
    text = text.strip()
    return Fraction(text) if len(text) <= 64 and _DECIMAL.fullmatch(text) else None


def latex_equal(answer: str, gold: str) -> bool:
    """math-verify's equivalence, strict where the gold is exact. Call in a worker: it can be slow."""
    from math_verify import parse, verify  # imported lazily: sympy is slow to import
    from sympy import Basic, Number, Rational, nan, zoo

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that we time it ourselves
    g = parse(f"${gold}$", parsing_timeout=None)
    p = parse(f"${answer}$", parsing_timeout=None)
    if not (g and p):
        return False
    if any(isinstance(x, Basic) and x.has(nan, zoo) for x in (g[0], p[0])):  # undefined: equal to nothing
        return False
    decimal = _exact_number(answer)
    gold_value = g[0]
    if decimal is not None and isinstance(gold_value, Number):  # a decimal answer to a number: exactly equal
        exact_gold = _exact_number(gold)
        if exact_gold is not None:
            return decimal == exact_gold
        return gold_value.is_Rational and Rational(decimal.numerator, decimal.denominator) == gold_value
    return bool(verify(g, p, float_rounding=FLOAT_DIGITS, numeric_precision=EXACT_DIGITS, timeout_seconds=None))


# --- Answer formats: where each reads the final answer of an integer task (the task's prompt states it). One
# small function each, (completion) -> the answer text or None; a new format is one more entry. The rule over
# all of them (every other statement agrees; the answer is one integer, whole) is `integer_answer`'s.
def _whole(completion: str) -> str | None:
    return completion  # bare ("a+b="), number ("Reply with only the final number"): the whole completion


def _last_box(completion: str) -> str | None:
    return last_boxed(completion)  # boxed: "Put the final number in \\boxed{}"


def _last_number(completion: str) -> str | None:
    return last_number(completion)[0]  # last_number: "What is a + b?", answered in the model's own words


ANSWER_FORMATS: dict[str, Callable[[str], str | None]] = {
    "bare": _whole,
    "number": _whole,
    "boxed": _last_box,
    "answer_line": answer_line,  # 'End your reply with a last line "Answer: N"': the last line, whole
    "last_number": _last_number,  # the last number of a finished reply, read whole (grpo_lab/rewards/numbers.py)
}


def final_answer(completion: str, answer_format: str) -> str | None:
    """The final answer a format reads, without its dress ("\\boxed{ 7 }" -> "7"); None when it has none."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format {answer_format!r} is not supported. Must be one of "
                         f"{', '.join(map(repr, ANSWER_FORMATS))}.")
    read = ANSWER_FORMATS[answer_format]
    text = read(completion)
    if text is None or len(text) > MAX_ANSWER_CHARS:
        return None
    return text.strip() if read in (_whole, _last_number) else clean(text)  # "46." whole is not 46


def integer_answer(completion: str, answer_format: str) -> tuple[str | None, int]:
    """(the integer the completion answers, normalised, or None; how many final-answer statements it makes).
    None when the format's answer is not one integer, whole, or another statement says something else."""
    text = final_answer(completion, answer_format)
    answer = extract_integer(text) if text is not None else None
    said = statements(completion)
    if said is None:
        return None, MAX_STATEMENTS + 1
    if answer is not None and any(v is None or extract_integer(clean(v)) != answer for v in said):
        return None, len(said)
    return answer, len(said)


def _last_number_read(completion: str, finished: bool) -> tuple[str | None, Fraction | None, bool]:
    """last_number: (the reply's last number as shown, its value, whether it is the one final answer). None when
    the reply was cut off; not the answer when a final-answer statement, read by the same rule, says another value
    or is not one number whole ("\\boxed{13\\%}" is not 13)."""
    shown, value = last_number(completion) if finished else (None, None)
    said = statements(completion)
    values = None if said is None else [None if v is None else clean(v).rstrip(",") for v in said]  # "is 13," ends
    agree = values is not None and all(v is not None and number_alone(v) and last_number(v)[1] == value
                                       for v in values)
    return shown, value, value is not None and agree


def _last_number_score(completion: str, finished: bool, gold: str, weights: RewardWeights) -> Scored:
    """last_number: the one final answer `_last_number_read` finds. A hedge's answer is None: it casts no vote in
    cons@k."""
    shown, value, ok = _last_number_read(completion, finished)
    correct = ok and extract_integer(gold) is not None and value == int(gold)
    formatted = ok and number_alone(completion)  # the number alone: no statement, nothing else said
    answer = number_text(value) if ok else (None if value is not None else shown)
    return Scored(answer, correct, formatted, weights.accuracy * correct + weights.format * formatted)


def integer_score(completion: str, finished: bool, gold: str, weights: RewardWeights,
                   answer_format: str = "bare") -> Scored:
    if answer_format == "last_number":
        return _last_number_score(completion, finished, gold, weights)
    answer, said = integer_answer(completion, answer_format)
    correct = answer is not None and answer == extract_integer(gold)
    # well formed: the turn ended with the one answer its format names (a bare answer makes no statement)
    formatted = finished and answer is not None and said <= (0 if ANSWER_FORMATS[answer_format] is _whole else 1)
    shown = answer if answer is not None else final_answer(completion, answer_format)
    return Scored(shown, correct, formatted, weights.accuracy * correct + weights.format * formatted)


def stated_answer(completion: str, finished: bool, answer_format: str) -> tuple[str | None, bool]:
    """(the one final answer a graded task's completion states, or None; whether it is well formed: the turn
    ended with that answer in its format and no other statement), for a check the task owns (`Task.grader`).
    `last_number`: the reply's last number as `_last_number_read` finds it ("1,000" is 1000); the others: the text
    the format names, its dress off, every other final-answer statement saying the same (a hedge has none)."""
    if answer_format == "last_number":
        _, value, ok = _last_number_read(completion, finished)
        return (number_text(value), number_alone(completion)) if ok else (None, False)
    said = statements(completion)
    text = final_answer(completion, answer_format)
    if said is None or not text or any(v is None or clean(v).strip() != text for v in said):
        return None, False
    return text, finished and len(said) <= (0 if ANSWER_FORMATS[answer_format] is _whole else 1)


def graded_score(completion: str, finished: bool, judge: Callable[[str], bool], weights: RewardWeights,
                 answer_format: str = "bare") -> Scored:
    """A graded task's score: `judge` (its grader, bound to the problem) on the one stated answer, if any."""
    answer, formatted = stated_answer(completion, finished, answer_format)
    correct = answer is not None and bool(judge(answer))
    return Scored(answer, correct, formatted, weights.accuracy * correct + weights.format * formatted)


def latex_answer(completion: str, gold: str) -> tuple[str | None, bool | None, list[str]]:
    """(the last box without spaces, a verdict that needs no math-verify or None, the distinct stated answers
    math-verify must still find equal to the gold: all of them, for the completion to be right)."""
    boxed = last_boxed(completion)
    said = statements(completion)
    if boxed is None or said is None:
        return boxed, False, []
    answer = re.sub(r"\s+", "", clean(boxed))
    gold_text = re.sub(r"\s+", "", gold)
    if undefined(gold):  # no answer equals it
        return answer or None, False, []
    values = {re.sub(r"\s+", "", clean(v)) if v is not None else "" for v in said}
    pending = []
    for value in sorted(values):
        if not value or "\x00" in value or _UNDEFINED.fullmatch(value) or hedges(value) - hedges(gold_text):
            return answer or None, False, []
        if value != gold_text:
            if _HUGE.search(value):  # cheap pre-filter: never build such a number
                return answer, False, []
            pending.append(value)
    return answer, (None if pending else True), pending


def latex_formatted(completion: str, finished: bool) -> bool:
    said = statements(completion)
    return finished and last_boxed(completion) is not None and said is not None and len(said) == 1


KINDS = ("integer", "latex", "graded")


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"answer kind {kind!r} is not supported. Must be one of {', '.join(map(repr, KINDS))}.")


def score(completion: str, finished: bool, gold: str, kind: str, weights: RewardWeights,
          answer_format: str = "bare") -> Scored:
    """Score one completion against the reference answer, in this process. kind: "integer" or "latex";
    answer_format: where an integer answer is read (ANSWER_FORMATS).
    For many completions, or text that may be hostile, use `score_all` (LaTeX checks in workers)."""
    check_kind(kind)
    if kind == "integer":
        return integer_score(completion, finished, gold, weights, answer_format)
    answer, verdict, pending = latex_answer(completion, gold)
    if verdict is None:
        try:
            verdict = all(latex_equal(value, gold) for value in pending)
        except Exception:  # noqa: BLE001 - an answer math-verify cannot handle is a wrong answer, not a crash
            verdict = False
    formatted = latex_formatted(completion, finished)
    return Scored(answer, verdict, formatted, weights.accuracy * verdict + weights.format * formatted)
