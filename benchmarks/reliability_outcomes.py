"""How a reliability trial's command ended, judged on the trial's own folder hashed before and after (hidden files,
modes, links never followed): the outcomes of benchmarks/reliability_writers.py's trials, counted by
benchmarks/reliability.py over every trial that reports one.

- refused: a non-zero exit, one line on stderr after the log lines, nothing on disk changed;
- correct: exit 0 and the result checked;
- traceback: "Traceback" on stderr;
- silent wrong: exit 0 and a wrong result (a value accepted that cannot work, a report that says the wrong thing);
- data lost: a file that was there before (the user's, or a run's rows) gone or changed (a log only added to is kept);
- code run: a planted payload's marker file exists.
A non-zero exit that says more than one line, or changes what it refused, is an unclean refusal (counted apart).
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from fixtures.runs import ENV, ROOT, error_lines

Trial = tuple[str, bool, str, str]  # (trial, passed, detail, outcome)
OUTCOMES = ("refused", "correct", "traceback", "silent wrong", "data lost", "code run")
UNCLEAN = "unclean refusal"


def command(module: str, *args: object, env: dict | None = None, wait: bool = True):
    """`python -m module args` as a user types it, stdin closed (a question on a terminal is never answered)."""
    line = [sys.executable, "-m", module, *map(str, args)]
    common = dict(cwd=ROOT, env={**ENV, **(env or {})}, text=True, stdin=subprocess.DEVNULL)
    if not wait:
        return subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **common)
    return subprocess.run(line, capture_output=True, timeout=1800, **common)


def snapshot(*paths: Path) -> dict[str, tuple]:
    """Every entry at and under `paths`, links never followed: its kind and mode, a file's sha256, a link's target."""
    out = {}
    for top in paths:
        entries = [top] if os.path.lexists(top) else []
        if top.is_dir() and not top.is_symlink():
            for at, folders, files in os.walk(top):
                entries += [Path(at) / name for name in folders + files]
        for path in entries:
            try:
                info = os.lstat(path)
                out[str(path)] = (("link", os.readlink(path)) if stat.S_ISLNK(info.st_mode) else
                                  ("dir", stat.S_IMODE(info.st_mode)) if stat.S_ISDIR(info.st_mode) else
                                  ("file", stat.S_IMODE(info.st_mode), hashlib.sha256(path.read_bytes()).hexdigest(),
                                   info.st_size))
            except FileNotFoundError:  # a live writer's temporary, renamed since it was listed
                continue
    return out


def survives(path: str, was: tuple, now: tuple | None) -> bool:
    """Unchanged, or a file only added to (a log): all it held is still there."""
    if now == was:
        return True
    if now is None or was[0] != "file" or now[:2] != was[:2]:
        return False
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(was[3])).hexdigest() == was[2]


def lost(before: dict, after: dict, keep) -> list[str]:
    return sorted(k for k in keep if not survives(k, before[k], after.get(k)))


def judge(out, before: dict, after: dict, keep, markers=(), right: bool = False) -> str:
    """The outcome of one command: `keep` the entries of `before` that must survive, `right` its result checked."""
    if any(Path(m).exists() for m in markers):
        return "code run"
    if lost(before, after, keep):
        return "data lost"
    if "Traceback" in out.stderr:
        return "traceback"
    if out.returncode != 0:
        return "refused" if len(error_lines(out.stderr)) == 1 and after == before else UNCLEAN
    return "correct" if right else "silent wrong"


def raised(stderr: str) -> str:
    """A traceback's last line: the exception (Hydra's hint after it aside)."""
    return [ln for ln in stderr.strip().splitlines() if ln and not ln.startswith("Set the environment variable")][-1]


def verdict(name: str, expect: str, outcome: str, out, says=(), checked: str = "", gone=()) -> Trial:
    """The row: passed when the outcome is `expect` (a refusal's line naming each of `says`). The detail: what was
    lost, the exception of a traceback (said beside a worse outcome too), then what was said or checked."""
    lines = [ln for ln in error_lines(out.stderr) if not ln.startswith("Set the environment variable")]
    said = lines[-1] if lines else "nothing said"
    named = expect != "refused" or all(s in said for s in says)
    parts = [f"{len(gone)} changed or gone ({', '.join(gone[:3])}{', ...' if len(gone) > 3 else ''})"] if gone else []
    if "Traceback" in out.stderr:
        parts.append(f"traceback: {raised(out.stderr)}")
    if outcome in ("correct", "silent wrong"):
        parts.append(checked or "exit 0: accepted")
    elif "Traceback" not in out.stderr:
        parts.append(said if outcome != UNCLEAN else f"exit {out.returncode}, {len(lines)} lines: {said}")
    if outcome == "refused" and not named:
        parts.append(f"expected it to name {' and '.join(map(repr, says))}")
    return (name, outcome == expect and named, f"{outcome}: {'; '.join(parts)}", outcome)


def attempt(name: str, expect: str, module: str, args: list, watched: Path, *, says=(), planted=None, markers=(),
            check: Callable[..., tuple[bool, str]] | None = None, env: dict | None = None) -> Trial:
    """One command judged on `watched` (the trial's folder); `planted`: what must survive (default: all that was
    there); `check(out)`: (right, what was checked) of a command that exits 0."""
    before = snapshot(watched)
    keep = set(before) if planted is None else set(snapshot(*planted))
    out = command(module, *args, env=env)
    right, checked = check(out) if check and out.returncode == 0 else (False, "")
    after = snapshot(watched)
    gone = [os.path.relpath(k, watched) for k in lost(before, after, keep)]
    return verdict(name, expect, judge(out, before, after, keep, markers, right), out, says, checked, gone)


def tally(outcomes: list[str]) -> str:
    """The line under the table: how each trial that reports an outcome ended."""
    counts = Counter(outcomes)
    words = {"refused": "one-line refusals", "correct": "correct", "traceback": "tracebacks",
             "silent wrong": "silent wrongs", "data lost": "data lost", "code run": "code run"}
    line = ", ".join(f"{counts[o]} {words[o]}" for o in OUTCOMES)
    other = ", ".join(f"{n} {o}" for o, n in counts.items() if o not in OUTCOMES)
    return f"outcomes of the {len(outcomes)} trials that report one: {line}" + (f"; {other}" if other else "")


def run_items(group: str, work: Path, items: list[tuple[str, Callable[[Path], list]]]) -> list:
    """Each item's trials in a folder of its own under `work`, its rows' paths made relative to `work`; a trial
    group that raises is one failed trial (the benchmark's own failure, never counted as an outcome)."""
    import time

    rows = []
    for item, trials in items:
        (work / item).mkdir()
        start = time.monotonic()
        try:
            found = trials(work / item)
        except Exception as err:  # noqa: BLE001 - the benchmark's own failure, never counted as an outcome
            found = [(f"{item}: raised", False, f"{type(err).__name__}: {err}"[:300])]
        rows += [(row[0], row[1], row[2].replace(f"{work}/", "")[:240], *row[3:]) for row in found]
        print(f"  {group} {item}: {sum(r[1] for r in found)} of {len(found)} passed "
              f"({time.monotonic() - start:.0f} s)", flush=True)
    return rows
