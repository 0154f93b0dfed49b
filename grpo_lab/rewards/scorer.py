"""Scoring many completions within a time budget: LaTeX checks run in worker processes (started once,
reused every step), each answer under its own alarm and each call under a budget."""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from grpo_lab.rewards.rules import (
    RewardWeights,
    Scored,
    check_kind,
    graded_score,
    integer_score,
    latex_answer,
    latex_equal,
    latex_formatted,
)

if TYPE_CHECKING:
    from grpo_lab.records import Problem, Rollout


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
        latex_equal(answer, "\\frac{1}{2}")
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        index, answer, gold = json.loads(line)
        correct, timed_out = False, False
        try:
            signal.setitimer(signal.ITIMER_REAL, answer_timeout_s)
            try:
                correct = bool(latex_equal(answer, gold))
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
        code = f"from grpo_lab.rewards.scorer import worker_main; worker_main({self.answer_timeout_s!r})"
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
                  weights: RewardWeights, answer_format: str = "bare",
                  judges: Sequence[Callable[[str], bool]] | None = None) -> list[Scored]:
        """score() over parallel lists (one entry per completion), within the step budget. kind "graded": each
        completion's judge (its task's grader bound to its problem) checks the answer, in this process."""
        check_kind(kind)
        if kind == "graded":
            if judges is None or len(judges) != len(completions):
                raise ValueError("graded answers need one judge a completion (the task's grader)")
            return [graded_score(c, f, j, weights, answer_format) for c, f, j in zip(completions, finished, judges)]
        if kind == "integer":
            return [integer_score(c, f, g, weights, answer_format) for c, f, g in zip(completions, finished, golds)]
        read = [latex_answer(c, g) for c, g in zip(completions, golds)]  # (answer, verdict, still to check)
        pairs: dict[tuple[str, str], int] = {}
        for (_, verdict, pending), g in zip(read, golds):
            for value in pending if verdict is None else ():  # each distinct (answer, gold) is checked once
                pairs.setdefault((value, g), len(pairs))
        checked, timed_out = self._verify({k: pair for pair, k in pairs.items()})
        out = []
        for c, f, g, (answer, verdict, pending) in zip(completions, finished, golds, read):
            keys = [pairs[(value, g)] for value in pending] if verdict is None else []
            correct = all(checked[k] for k in keys) if verdict is None else verdict  # every stated answer right
            formatted = latex_formatted(c, f)
            out.append(Scored(answer, correct, formatted, weights.accuracy * correct + weights.format * formatted,
                              timed_out=any(k in timed_out for k in keys)))
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
              weights: RewardWeights, scorer: Scorer | None = None, answer_format: str = "bare",
              judges: Sequence[Callable[[str], bool]] | None = None) -> list[Scored]:
    """score() over parallel lists, through `scorer` or a process-wide default one (its workers
    start on first LaTeX check and stop when the process exits)."""
    global _shared
    if scorer is None:
        if _shared is None:
            _shared = Scorer()
            atexit.register(_shared.close)
        scorer = _shared
    return scorer.score_all(completions, finished, golds, kind, weights, answer_format, judges)


def judges_for(problems: Sequence[Problem], n: int, kind: str, grader) -> list[Callable[[str], bool]] | None:
    """A graded task's judge for each of the n completions of each problem (its grader bound to the problem);
    None for the other kinds."""
    if kind != "graded":
        return None
    if grader is None:
        raise ValueError("answer kind 'graded' needs the task's grader")
    return [partial(grader, problem=p) for p in problems for _ in range(n)]


def score_rollout(ro: Rollout, problems: list[Problem], kind: str, weights: RewardWeights, scorer: Scorer,
                  answer_format: str = "bare", grader=None):
    """Rewards, correctness and the answer read (None: none in the task's format) as (B, G) arrays, and how many
    answers' checks ran out of time."""
    import numpy as np  # here: the scoring workers import this module and need no numpy

    g = ro.group_size
    assert isinstance(g, int), "score_rollout takes a sampled rollout (one G), not a training batch"
    golds = [p.answer for p in problems for _ in range(g)]
    scored = scorer.score_all(ro.texts, (~ro.truncated).tolist(), golds, kind, weights, answer_format,
                              judges_for(problems, g, kind, grader))
    rewards = np.array([s.reward for s in scored], dtype=np.float32).reshape(-1, g)
    correct = np.array([s.correct for s in scored], dtype=bool).reshape(-1, g)
    answers = np.empty(len(scored), dtype=object)
    answers[:] = [s.answer for s in scored]
    return rewards, correct, answers.reshape(-1, g), sum(s.timed_out for s in scored)
