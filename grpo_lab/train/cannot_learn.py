"""A run that cannot learn says so before it spends its budget: after the base evaluation (or, without one, after
the first step), one warning line naming the likely cause from the data, with two of the model's replies quoted.

Two causes look alike in the tables (every group ties all wrong) and have different remedies: the model gave no
answer in the task's format (a format failure: a looser answer format, shots, a format reward) or answered wrongly
(a capability failure: easier problems, larger groups). The task says, in keys it reads, what gives either
(`TaskKind.remedies`: task.levels is arithmetic's, a math set's problems are its file's)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from grpo_lab.tasks.base import Remedies

log = logging.getLogger(__name__)

QUOTED = 2  # replies quoted in the warning
QUOTE_CHARS = 60  # each cut to this, on one line
FORMAT_SHARE = 0.5  # at least this share of replies without an answer: the format is the likely cause


def answer_phrase(answer_kind: str, answer_format: str) -> str:
    """What the task's answer format asks for, in words."""
    if answer_kind == "latex" or answer_format == "boxed":
        return "`\\boxed{}` answer"
    return {"answer_line": "'Answer:' line", "number": "final number", "last_number": "number",
            "bare": "bare integer"}.get(answer_format, "answer")


def quote(text: str) -> str:
    """A reply as one short quoted line (untrusted text: shown, never run)."""
    line = " ".join(str(text).split())
    return repr(line if len(line) <= QUOTE_CHARS else line[:QUOTE_CHARS] + "…")


def _remedy(unanswered: float, phrase: str, remedies: Remedies) -> str:
    if unanswered >= FORMAT_SHARE:
        return (f"try {remedies.answer}, or a format reward (reward.format): the {phrase} is what it lacks (README, "
                "Your own study)")
    return f"try {remedies.easier} or larger groups (sampler.group_size) (README, Your own study)"


def base_warning(rows: Sequence[dict], answer_kind: str, answer_format: str, remedies: Remedies) -> str | None:
    """The warning for base-evaluation rows (difficulty, correct, answered, completion) where the model answers no
    held-out problem of some difficulty; None where it answers some of every difficulty. `remedies`: the task's."""
    if not rows:
        return None
    right: dict[str, int] = {}
    for r in rows:
        right[str(r["difficulty"])] = right.get(str(r["difficulty"]), 0) + bool(r["correct"])
    zero = sorted(d for d, c in right.items() if c == 0)
    if not zero:
        return None
    unanswered = sum(not r.get("answered", True) for r in rows) / len(rows)
    phrase = answer_phrase(answer_kind, answer_format)
    where = "held-out problem" if len(zero) == len(right) else f"held-out problem of difficulty {', '.join(zero)}"
    outcome = "every group will tie all-wrong and nothing trains" if len(zero) == len(right) else \
        "groups of those prompts will tie all-wrong and train nothing"
    texts = [r for r in rows if r.get("completion") is not None]
    texts = sorted(texts, key=lambda r: bool(r.get("answered", True)) == (unanswered >= FORMAT_SHARE))
    replies = " ".join(quote(r["completion"]) for r in texts[:QUOTED])
    return (f"the base model solves no {where}: it gave no {phrase} in {unanswered:.0%} of {len(rows):,} "
            f"replies, so {outcome}; {_remedy(unanswered, phrase, remedies)}"
            + (f". Replies: {replies}" if replies else ""))


def first_step_warning(groups: Sequence, answer_kind: str, answer_format: str, remedies: Remedies) -> str | None:
    """The warning for a first step (its drawn Groups) whose every group tied; None where one did not. `remedies`:
    the task's."""
    drawn = [g for g in groups if not g.reused]
    if not drawn or not all(g.tie for g in drawn):
        return None
    wrong = [g for g in drawn if not g.correct.any()]
    known = [g for g in drawn if g.answered is not None]
    replies = sum(len(g.rewards) for g in known)
    unanswered = sum(int((~g.answered).sum()) for g in known) / replies if replies else 0.0
    phrase = answer_phrase(answer_kind, answer_format)
    texts = [(t, bool(a)) for g in drawn if g.samples is not None and g.answered is not None
             for t, a in zip(g.samples.texts, g.answered)]
    texts = sorted(texts, key=lambda ta: ta[1] == (unanswered >= FORMAT_SHARE))
    quoted = " ".join(quote(t) for t, _ in texts[:QUOTED])
    return (f"every group of the first step tied ({len(wrong)} of {len(drawn)} all wrong), so nothing trained: "
            f"the model gave no {phrase} in {unanswered:.0%} of {replies:,} replies; "
            f"{_remedy(unanswered, phrase, remedies)}" + (f". Replies: {quoted}" if quoted else ""))


def announce(said: str, stop: bool) -> str | None:
    """Logs the check's warning with what `stop_untrainable` does about it; returns it where the run stops on it."""
    if stop:
        log.warning("%s. Stopping here (stop_untrainable=true)", said)
        return said
    log.warning("%s. (stop_untrainable=true ends a run here instead of spending its budget)", said)
    return None
