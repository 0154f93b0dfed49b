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

import atexit
import json
import logging
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

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


class _AnswerTimeout(BaseException):
    """Raised by the worker's alarm. A BaseException, so math-verify's `except Exception` lets it through."""


def _on_alarm(signum, frame):
    raise _AnswerTimeout()


def worker_main(answer_timeout_s: float) -> None:
    """A scoring process: JSON lines [index, answer, gold] on stdin, [index, correct, timed_out] on
    stdout. It ends when stdin closes (its trainer exited or was killed)."""
    out = os.fdopen(os.dup(1), "w")  # the answers' channel; anything a library prints goes to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's to handle
    signal.signal(signal.SIGALRM, _on_alarm)
    for answer in ("0.5", "x^2"):  # before the first alarm: sympy and its parts load slowly on first use
        _latex_equal(answer, "\\frac{1}{2}")
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        index, answer, gold = json.loads(line)
        correct, timed_out = False, False
        try:
            signal.setitimer(signal.ITIMER_REAL, answer_timeout_s)
            try:
                correct = bool(_latex_equal(answer, gold))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _AnswerTimeout:
            timed_out = True
        except Exception:  # noqa: BLE001 - unparseable text is a wrong answer
            pass
        out.write(json.dumps([index, correct, timed_out]) + "\n")
        out.flush()


class Scorer:
    """Scores completions; LaTeX checks go to `workers` worker processes (plain `python -c`
    subprocesses: nothing of the caller's __main__ or torch is imported), started on first need and
    reused across steps. Each answer has `answer_timeout_s` (an alarm in the worker); each
    `score_all` call has `step_budget_s` in all: then the workers still busy are killed (a computation
    no signal interrupts) and restarted on the next call, and the answers not checked are wrong and
    marked timed out. Integer checks are a regex here, with no time risk."""

    def __init__(self, workers: int = 2, answer_timeout_s: float = 2.0, step_budget_s: float = 10.0):
        self.workers, self.answer_timeout_s, self.step_budget_s = workers, answer_timeout_s, step_budget_s
        self._procs: list[subprocess.Popen] = []

    def _spawn(self) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parent.parent)  # this grpo_lab, whatever the caller's sys.path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        code = f"from grpo_lab.rewards import worker_main; worker_main({self.answer_timeout_s!r})"
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, bufsize=1, env=env, encoding="utf-8", errors="surrogateescape")

    def _start_workers(self) -> None:
        """Top the pool up to `workers` live processes; wait until each new one has imported math-verify,
        so start-up never counts against a step's budget."""
        self._procs = [p for p in self._procs if p.poll() is None]
        new = [self._spawn() for _ in range(self.workers - len(self._procs))]
        for p in new:
            if p.stdout.readline().strip() != "ready":
                p.kill()
                raise RuntimeError("a reward worker failed to start (is math-verify installed?)")
        self._procs += new

    def _verify(self, jobs: dict[int, tuple[str, str]]) -> tuple[dict[int, bool], set[int]]:
        """{index: (answer, gold)} -> ({index: correct}, indices that timed out)."""
        if not jobs:
            return {}, set()
        self._start_workers()
        todo = deque(jobs.items())
        verdicts: dict[int, bool] = {}
        timed_out: set[int] = set()
        busy: dict[subprocess.Popen, int] = {}
        deadline = time.monotonic() + self.step_budget_s
        with selectors.DefaultSelector() as sel:
            for p in self._procs:
                sel.register(p.stdout, selectors.EVENT_READ, p)
            while todo or busy:
                for p in self._procs:
                    if todo and p not in busy and p.poll() is None:
                        index, (answer, gold) = todo.popleft()
                        try:
                            p.stdin.write(json.dumps([index, answer, gold]) + "\n")
                            p.stdin.flush()
                            busy[p] = index
                        except OSError:  # a worker that died: its answer waits for the others
                            todo.appendleft((index, (answer, gold)))
                            sel.unregister(p.stdout)
                            p.kill()
                if not busy:  # every worker died
                    break
                ready = sel.select(timeout=max(0.0, deadline - time.monotonic()))
                if not ready and time.monotonic() >= deadline:
                    for p in busy:  # stuck where no alarm reaches (one huge C-level computation)
                        p.kill()
                        p.wait()
                    break
                for key, _ in ready:
                    p = key.data
                    line = p.stdout.readline()
                    index = busy.pop(p, None)
                    if not line:  # it died mid-answer: that answer is wrong
                        sel.unregister(p.stdout)
                        p.kill()
                        continue
                    try:
                        index, correct, late = json.loads(line)
                    except ValueError:  # not our protocol: treat that answer as unchecked
                        continue
                    verdicts[index] = bool(correct)
                    if late:
                        timed_out.add(index)
        timed_out |= set(jobs) - set(verdicts)
        self._procs = [p for p in self._procs if p.poll() is None]
        return {i: verdicts.get(i, False) for i in jobs}, timed_out

    def score_all(self, completions: list[str], finished: list[bool], golds: list[str], kind: str,
                  weights: RewardWeights, answer_format: str = "bare") -> list[Scored]:
        """score() over parallel lists (one entry per completion), within the step budget."""
        _check_kind(kind)
        if kind == "integer":
            return [_integer_score(c, f, g, weights, answer_format) for c, f, g in zip(completions, finished, golds)]
        answers, verdicts, pairs = [], [], {}
        for c, g in zip(completions, golds):
            answer, verdict = _latex_answer(c, g)
            answers.append(answer)
            verdicts.append(verdict)
            if verdict is None:  # each distinct (answer, gold) is checked once: a group often repeats one
                pairs.setdefault((answer, g), len(pairs))
        checked, timed_out = self._verify({k: pair for pair, k in pairs.items()})
        out = []
        for c, f, g, answer, verdict in zip(completions, finished, golds, answers, verdicts):
            k = pairs.get((answer, g)) if verdict is None else None
            correct = checked[k] if k is not None else verdict
            formatted = _latex_formatted(c, f)
            out.append(Scored(answer, correct, formatted, weights.accuracy * correct + weights.format * formatted,
                              timed_out=k in timed_out))
        return out

    def close(self) -> None:
        """Stop the workers: close their input (they exit), kill any that does not."""
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self._procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        self._procs = []

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: Scorer | None = None


def score_all(completions: list[str], finished: list[bool], golds: list[str], kind: str,
              weights: RewardWeights, scorer: Scorer | None = None, answer_format: str = "bare") -> list[Scored]:
    """score() over parallel lists, through `scorer` or a process-wide default one (its workers
    start on first LaTeX check and stop when the process exits)."""
    global _shared
    if scorer is None:
        if _shared is None:
            _shared = Scorer()
            atexit.register(_shared.close)
        scorer = _shared
    return scorer.score_all(completions, finished, golds, kind, weights, answer_format)


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
