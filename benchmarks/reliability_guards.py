"""Reliability trials of the run's guards (benchmarks/reliability.py runs them after its own), each against a
known right outcome, as rows (trial, passed, detail):

- lock races: 60 processes start on one directory at once, on a fresh directory, a lock left by a holder
  killed with SIGKILL and garbage lock files; exactly one may hold it. Churn: 60 processes take and release it
  200 times each; no two may ever hold it together.
- refused starts: a resume with another config (through the command line and through the Hydra app past its
  preflight) and a start on a busy run, for a single run and a joblib sweep; every file must stay as it was.
- values that cannot work, broken model folders, a read-only run directory, a disk that fills during a
  checkpoint: one line naming the key, file or folder, and a non-zero exit; run.json `failed` on the full disk,
  the rows written before it intact, and the same command resuming to an uninterrupted run's rows.
- final answers: the named near misses and generated ones (another answer anywhere, or the gold hedged) must
  earn nothing in any format; generated right answers in any dress must earn the reward.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path

from fixtures import answers
from fixtures.races import HOLDS, LEFT_BEHIND, RACERS, churn, prepare, race
from fixtures.runs import (
    BROKEN_MODELS,
    CHAT,
    READ_ONLY,
    SMALL,
    app,
    bad_values,
    broken_copy,
    can_mount,
    cli,
    error_lines,
    full_disk,
    read_only,
    tables,
    tree,
)
from grpo_lab.run.lock import RunLock

Trial = tuple[str, bool, str]


def lock_trials(work: Path, rounds: int) -> list[Trial]:
    results = []
    for left in LEFT_BEHIND:
        one = 0
        for r in range(rounds):
            folder = work / f"lock-{left.replace(' ', '-')}-{r}"
            folder.mkdir(parents=True)
            prepare(folder, left)
            kinds = [k for k, _ in race(folder)]
            one += kinds.count("held") == 1 and kinds.count("busy") == RACERS - 1
        results.append((f"lock race: {left}", one == rounds, f"{rounds} races of {RACERS} starts: one holder in {one}"))
        print(f"  {results[-1]}", flush=True)
    (work / "churn").mkdir()
    held, overlaps, tries = churn(work / "churn")
    results.append(("lock churn", overlaps == 0 and held == HOLDS * RACERS,
                    f"{RACERS} processes taking it {HOLDS} times each: held {held} times in {tries} tries, {overlaps} "
                    "times with another holder inside"))
    return results


def _refused(out, expected: str) -> bool:
    lines = error_lines(out.stderr)
    return out.returncode != 0 and len(lines) == 1 and expected in lines[0]


def refused_start_trials(work: Path) -> list[Trial]:
    results, single = [], work / "single"
    args = ["max_steps=2", *SMALL]
    assert cli(*args, f"hydra.run.dir={single}").returncode == 0
    before = tree(single)
    mismatch = "holds a run started with another config (sampler.group_size 2 -> 4)"
    for how, run in (("command line", cli), ("Hydra app", app)):
        out = run(*args, "sampler.group_size=4", f"hydra.run.dir={single}")
        results.append((f"refused resume ({how}): every file unchanged",
                        _refused(out, mismatch) and tree(single) == before,
                        f"{len(before)} files hashed before and after"))
    with RunLock(single):
        out = cli(*args, "max_steps=3", f"hydra.run.dir={single}")
    results.append(("start on a busy run: every file unchanged", _refused(out, "is being written by pid")
                    and tree(single) == before, error_lines(out.stderr)[-1][:120] if out.stderr else "no message"))
    sweep = work / "sweep"
    sweep_args = ["-m", "launcher=joblib", "seed=0,1", *args, f"hydra.sweep.dir={sweep}"]
    assert cli(*sweep_args).returncode == 0
    before = tree(sweep)
    out = cli(*sweep_args, "sampler.group_size=4")
    results.append(("refused sweep resume: the whole sweep unchanged",
                    _refused(out, mismatch) and tree(sweep) == before,
                    f"{len(before)} files, multirun.yaml included"))
    out = app(*sweep_args, "sampler.group_size=4")
    jobs = {k: v for k, v in tree(sweep).items() if k != "multirun.yaml"}
    results.append(("refused sweep jobs past the preflight: job folders unchanged", out.returncode != 0 and jobs == {
        k: v for k, v in before.items() if k != "multirun.yaml"}, "each job refuses before writing"))
    return results


def input_trials(work: Path) -> list[Trial]:
    results = []
    for args, expected in bad_values(work):
        out = cli(*args, f"hydra.run.dir={work / 'never'}")
        lines = out.stderr.strip().splitlines()
        ok = out.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"config error: {expected}")
        results.append((f"refused value: {' '.join(args)[:40]}", ok, lines[0][:110] if lines else "no message"))
    from fixtures.models import build_chat_model

    model = build_chat_model(work / "model")
    for name, content, expected in BROKEN_MODELS:
        folder = broken_copy(model, work / "broken", name, content)
        out = cli("model=local", f"model.path={folder}", *CHAT, f"hydra.run.dir={work / 'never'}")
        lines = out.stderr.strip().splitlines()
        ok = out.returncode != 0 and len(lines) == 1 and expected in lines[0]
        results.append((f"broken model: {expected[:45]}", ok,
                        lines[0].split(": ", 1)[-1][-90:] if lines else "no message"))
    return results


def disk_trials(work: Path) -> list[Trial]:
    if not can_mount():
        return [("read-only and full filesystems", False, "skipped: no private mount namespace (unshare -rm) here")]
    done = work / "done"
    assert cli("max_steps=1", *SMALL, f"hydra.run.dir={done}").returncode == 0
    got, unchanged = read_only(done, work / "ro")
    results = []
    for name in READ_ONLY:
        rc, lines, folder = got[name]
        ok = rc != 0 and len(lines) == 1 and lines[0].startswith(f"error: {folder}") and "read-only" in lines[0]
        results.append((f"read-only run directory: {name}", ok and unchanged,
                        lines[0][-80:] if lines else "no message"))
    args = ["max_steps=3", "checkpoint_every=1", *SMALL]
    reference = work / "reference"
    assert cli(*args, f"hydra.run.dir={reference}").returncode == 0
    full = full_disk(args, work / "full")
    lines, saved = full["lines"], full["saved"]
    step = re.search(r"\.step-(\d{6})\.", lines[0]) if len(lines) == 1 else None
    record = json.loads((saved / "run.json").read_text())
    whole = tables(reference)
    ok = (full["rc"] != 0 and step is not None and "(ENOSPC)" in lines[0] and record["status"] == "failed"
          and tables(saved)["steps"] == whole["steps"][:int(step.group(1))] and full["again_rc"] == 0
          and tables(full["resumed"]) == whole)
    results.append(("disk full during a checkpoint", ok, f"failed at step {int(step.group(1)) if step else '?'}: "
                    f"run.json {record['status']}, rows before it intact, resumed to an uninterrupted run's rows"))
    shutil.rmtree(work / "full", ignore_errors=True)
    return results


def answer_trials(rng: random.Random, n: int) -> list[Trial]:
    from grpo_lab.rewards.rules import ANSWER_FORMATS, RewardWeights, score

    w = RewardWeights()
    kinds = [("integer", f) for f in ANSWER_FORMATS] + [("latex", "bare")]
    named = sum(score(t, True, "46", kind, w, fmt).correct for t in answers.NAMED for kind, fmt in kinds)
    results = [("answers: named near misses", named == 0, f"{len(answers.NAMED)} completions x {len(kinds)} formats, "
                                                          f"{named} rewarded")]
    pick, integer = rng.choice, rng.randint
    misses = [answers.near_miss(pick, integer) for _ in range(n)]
    rewarded = sum(score(t, True, g, "integer", w, f).correct for t, g in misses for f in ANSWER_FORMATS)
    latex = sum(score(t, True, g, "latex", w).correct for t, g in misses[: n // 10])
    results.append(("answers: generated near misses", rewarded + latex == 0,
                    f"{n} x {len(ANSWER_FORMATS)} integer formats and {n // 10} as LaTeX: {rewarded + latex} rewarded"))
    rights = [answers.right_answer(pick, integer) for _ in range(n)]
    missed = sum((not score(t, True, g, "integer", w, "boxed").correct)
                 + (not score(ln, True, g, "integer", w, "answer_line").correct) for t, ln, g in rights)
    missed_latex = sum(not score(ln, True, g, "latex", w).correct for _, ln, g in rights[: n // 10])
    results.append(("answers: generated right answers", missed + missed_latex == 0,
                    f"{n} x (boxed, answer_line) and {n // 10} as LaTeX, in any dress: {missed + missed_latex} "
                    "not rewarded"))
    return results
