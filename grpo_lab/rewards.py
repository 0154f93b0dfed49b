"""Rule-based rewards: answer extraction, accuracy, format, and their weighted sum.

Completions are untrusted text: they are matched with regular expressions and, for LaTeX,
parsed by math-verify under a time limit; nothing is ever evaluated as code. Inputs are
truncated to MAX_ANSWER_CHARS so a pathological answer cannot stall a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_ANSWER_CHARS = 200
_INT = re.compile(r"[+-]?\d+")
VERIFY_TIMEOUT_S = 2


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
    """The integer a completion starts with, normalised ("007" -> "7", "+3" -> "3")."""
    m = _INT.match(completion.strip()[:MAX_ANSWER_CHARS])
    return str(int(m.group(0))) if m else None


def integer_format_ok(completion: str, finished: bool) -> bool:
    """The whole completion is one integer and the model ended it itself (not truncated)."""
    return finished and _INT.fullmatch(completion.strip()) is not None


def _latex_equal(answer: str, gold: str) -> bool:
    from math_verify import parse, verify  # imported lazily: sympy is slow to import

    try:
        g = parse(f"${gold}$", parsing_timeout=VERIFY_TIMEOUT_S)
        p = parse(f"${answer}$", parsing_timeout=VERIFY_TIMEOUT_S)
        return bool(g and p and verify(g, p, timeout_seconds=VERIFY_TIMEOUT_S))
    except Exception:  # noqa: BLE001 - an answer math-verify cannot handle is a wrong answer, not a crash
        return False


def score(completion: str, finished: bool, gold: str, kind: str, weights: RewardWeights) -> Scored:
    """Score one completion against the reference answer. kind: "integer" or "latex"."""
    if kind == "integer":
        answer = extract_integer(completion)
        correct = answer is not None and answer == extract_integer(gold)
        formatted = integer_format_ok(completion, finished)
    elif kind == "latex":
        boxed = last_boxed(completion)
        answer = re.sub(r"\s+", "", boxed) if boxed is not None else None
        correct = answer is not None and (answer == re.sub(r"\s+", "", gold) or _latex_equal(answer, gold))
        formatted = finished and boxed is not None and completion.count("\\boxed{") == 1
    else:
        raise ValueError(f"answer kind {kind!r} is not supported. Must be one of 'integer', 'latex'.")
    reward = weights.accuracy * float(correct) + weights.format * float(formatted)
    return Scored(answer, correct, formatted, reward)


def score_all(completions: list[str], finished: list[bool], golds: list[str], kind: str,
              weights: RewardWeights) -> list[Scored]:
    """score() over parallel lists (one entry per completion)."""
    return [score(c, f, g, kind, weights) for c, f, g in zip(completions, finished, golds)]
