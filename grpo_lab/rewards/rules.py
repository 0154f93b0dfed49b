"""Rule-based rewards: answer extraction, accuracy, format, and their weighted sum.

Completions are untrusted text. Nothing is ever evaluated as code, and nothing is read as an answer
that is not one:
- integer tasks: the whole completion (stripped) must be one integer in ASCII digits, with an
  optional sign; "46.5", "46e3", "46abc", "46,000", "46 no wait 47" and "46\\n47" are wrong for 46.
- LaTeX tasks: the last \\boxed{...}; equal when the text matches, else when math-verify finds the two
  equal with no numeric tolerance where the gold is exact: a decimal answer must equal the gold
  exactly (0.5 = 1/2; 0.50000001 and 0.4999999 are not), and other floats are rounded to
  FLOAT_DIGITS places, not math-verify's default 6.
LaTeX checks run in a small pool of worker processes (`Scorer`), each answer under its own
time limit and each step's checks under a budget; an answer not checked in time is wrong and
counted (`Scored.timed_out`, the steps table's `score_timeouts`), so hostile text cannot stall a step.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from fractions import Fraction

MAX_ANSWER_CHARS = 200  # longer answers are wrong unread: no int() of a huge digit string, no huge parse
_INT = re.compile(r"[+-]?[0-9]+")  # ASCII only: "٤٦" is not an answer
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
FLOAT_DIGITS = 12  # math-verify rounds floats inside expressions to this many places (its default: 6)
EXACT_DIGITS = 50  # exact golds: a difference must vanish at 50 digits (math-verify's default: 15)
# an exponent that holds another power, has 4+ digits, or a factorial of 4+ digits or of a group:
# numbers too large to build; a gold written that way still matches as text
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


def last_boxed(text: str) -> str | None:
    """Contents of the last \\boxed{...} in `text`, braces balanced; None if there is none."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, min(len(text), i + MAX_ANSWER_CHARS)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def extract_integer(completion: str) -> str | None:
    """The integer the whole completion is, normalised ("007" -> "7", "+3" -> "3"); None otherwise."""
    text = completion.strip()
    if len(text) > MAX_ANSWER_CHARS or not _INT.fullmatch(text):
        return None
    return str(int(text))


def integer_format_ok(completion: str, finished: bool) -> bool:
    """The whole completion is one integer and the model ended it itself (not truncated)."""
    return finished and extract_integer(completion) is not None


def _exact_number(text: str) -> Fraction | None:
    """A plain decimal or integer literal as an exact fraction ("0.5" -> 1/2); None for anything else."""
    text = text.strip()
    return Fraction(text) if len(text) <= 64 and _DECIMAL.fullmatch(text) else None


def _latex_equal(answer: str, gold: str) -> bool:
    """math-verify's equivalence, strict where the gold is exact. Call in a worker: it can be slow."""
    from math_verify import parse, verify  # imported lazily: sympy is slow to import
    from sympy import Number, Rational

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns that we time it ourselves
    g = parse(f"${gold}$", parsing_timeout=None)
    p = parse(f"${answer}$", parsing_timeout=None)
    if not (g and p):
        return False
    decimal = _exact_number(answer)
    gold_value = g[0]
    if decimal is not None and isinstance(gold_value, Number):  # a decimal answer to a number: exactly equal
        exact_gold = _exact_number(gold)
        if exact_gold is not None:
            return decimal == exact_gold
        return gold_value.is_Rational and Rational(decimal.numerator, decimal.denominator) == gold_value
    return bool(verify(g, p, float_rounding=FLOAT_DIGITS, numeric_precision=EXACT_DIGITS, timeout_seconds=None))


def _latex_answer(completion: str, gold: str) -> tuple[str | None, bool | None]:
    """(the boxed answer without spaces, verdict) where the verdict needs no math-verify, else (answer, None)."""
    boxed = last_boxed(completion)
    if boxed is None:
        return None, False
    answer = re.sub(r"\s+", "", boxed)
    if not answer or "\x00" in answer:
        return answer or None, False
    if answer == re.sub(r"\s+", "", gold):
        return answer, True
    if _HUGE.search(answer):  # cheap pre-filter: never build such a number
        return answer, False
    return answer, None


def _integer_score(completion: str, finished: bool, gold: str, weights: RewardWeights,
                   answer_format: str = "bare") -> Scored:
    if answer_format in DELIMITED:
        return score_delimited(completion, finished, gold, weights, answer_format)
    answer = extract_integer(completion)
    correct = answer is not None and answer == extract_integer(gold)
    formatted = finished and answer is not None
    return Scored(answer, correct, formatted, weights.accuracy * correct + weights.format * formatted)


def _latex_formatted(completion: str, finished: bool) -> bool:
    return finished and last_boxed(completion) is not None and completion.count("\\boxed{") == 1


def _check_kind(kind: str) -> None:
    if kind not in ("integer", "latex"):
        raise ValueError(f"answer kind {kind!r} is not supported. Must be one of 'integer', 'latex'.")


def score(completion: str, finished: bool, gold: str, kind: str, weights: RewardWeights,
          answer_format: str = "bare") -> Scored:
    """Score one completion against the reference answer, in this process. kind: "integer" or "latex";
    answer_format: where an integer answer is read (ANSWER_FORMATS).
    For many completions, or text that may be hostile, use `score_all` (LaTeX checks in workers)."""
    _check_kind(kind)
    if kind == "integer":
        return _integer_score(completion, finished, gold, weights, answer_format)
    answer, verdict = _latex_answer(completion, gold)
    if verdict is None:
        try:
            verdict = _latex_equal(answer, gold)
        except Exception:  # noqa: BLE001 - an answer math-verify cannot handle is a wrong answer, not a crash
            verdict = False
    formatted = _latex_formatted(completion, finished)
    return Scored(answer, verdict, formatted, weights.accuracy * verdict + weights.format * formatted)


# --- Answer formats for chat models' free text: the task states the format, only its delimited final
# answer is read, whole (never a prefix), and the format reward checks the format.
# bare: the whole completion is the answer (the built-in model's "a+b=" prompts); number: the same, asked in
# words; boxed: the last \\boxed{...}; answer_line: a last line "Answer: ...".
ANSWER_FORMATS = ("bare", "number", "boxed", "answer_line")
DELIMITED = ("boxed", "answer_line")
_ANSWER_LINE = re.compile(r"answer\s*:\s*(.*?)", re.IGNORECASE)


def final_answer(completion: str, answer_format: str) -> str | None:
    """The delimited final answer of a free-text completion, stripped, or None when it has none."""
    if answer_format == "boxed":
        boxed = last_boxed(completion)
        return boxed.strip() if boxed is not None else None
    if answer_format == "answer_line":
        last = completion.rstrip().rsplit("\n", 1)[-1].strip()  # the last non-empty line, whole
        m = _ANSWER_LINE.fullmatch(last) if len(last) <= MAX_ANSWER_CHARS else None
        return m.group(1).strip().removesuffix(".") if m else None  # "Answer: 7." ends a sentence: 7
    raise ValueError(f"answer_format {answer_format!r} has no delimiter. Must be one of {', '.join(map(repr, DELIMITED))}.")


def score_delimited(completion: str, finished: bool, gold: str, weights: RewardWeights, answer_format: str) -> Scored:
    """An integer answer in a delimited final answer: correct only when the delimited text is, whole, the
    integer (\\boxed{46abc} and "Answer: 46.5" are wrong); formatted when the model ended its turn with
    exactly one such answer holding an integer."""
    text = final_answer(completion, answer_format)
    answer = extract_integer(text) if text is not None else None  # the delimited text, whole, as a bare answer
    correct = answer is not None and answer == extract_integer(gold)
    single = answer_format != "boxed" or completion.count("\\boxed{") == 1
    formatted = finished and answer is not None and single
    reward = weights.accuracy * float(correct) + weights.format * float(formatted)
    return Scored(answer if answer is not None else text, correct, formatted, reward)
