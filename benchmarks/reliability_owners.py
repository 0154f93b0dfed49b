"""Reliability trials of what a run owns and what the commands accept (issue 56; benchmarks/reliability.py runs them
as its group "owners"), each through the command a user types (python -m experiments.train, experiments.evaluate,
analysis, analysis.ingest) on tiny real runs: the built-in model, one trained run, one real sweep, one ingested TRL
run, copied for each trial that needs one. Rows (trial, passed, detail, outcome); each outcome judged on the trial's
own folder before and after (benchmarks/reliability_outcomes.py), as the writers' are. Cases the writers' trials
already hold are counted there, not here: resume=never on a folder of a user's files (their 3), a start in one (14),
keys read only by another option (8), two problems with one id and one problem's text under two ids (9).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from reliability_outcomes import Trial, attempt, command, judge, lost, run_items, snapshot, verdict
from reliability_writers import LONG, RUN, copy, plant, record

from fixtures.runs import SMALL, can_mount, in_namespace

# a sweep whose groups are 4 answers, one checkpoint a job (its last): the tables item 6 edits
SWEEP = ["-m", "sampler=fixed,resample_on_tie", "seed=0,1", "max_steps=3", "checkpoint_every=3", "prompts_per_step=2",
         "sampler.group_size=4", "task.levels=[1,2]", "task.train_per_level=4", "task.eval_per_level=3", "eval.n=2",
         "threads=1"]
MATH = ["task=mathset", "max_steps=2", *SMALL[:2], "eval.n=1", "threads=1"]
CORRECT = ["--correct-from", "accuracy"]  # the TRL fixture's reward function, a sample's correctness


def user_part(path: Path, step: int = 7) -> Path:
    """A user's parquet file named as a run's part (its run_id not a run's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"run_id": ["mine"] * 3, "step": [step] * 3, "reward": [0.5, 1.0, 0.0]}), path)
    return path


def either(name: str, module: str, args: list, watched: Path, *, says=(), planted=None,
           check: Callable[..., tuple[bool, str]] | None = None) -> Trial:
    """As `attempt`, passing on either right outcome: a one-line refusal naming each of `says`, nothing changed; or
    exit 0 with `check(out)` right (a report that names what it left out or doubts)."""
    before = snapshot(watched)
    keep = set(before) if planted is None else set(snapshot(*planted))
    out = command(module, *args)
    right, checked = check(out) if check and out.returncode == 0 else (False, "")
    after = snapshot(watched)
    gone = [str(Path(k).relative_to(watched)) for k in lost(before, after, keep)]
    outcome = judge(out, before, after, keep, right=right)
    return verdict(name, "refused" if outcome == "refused" else "correct", outcome, out, says, checked, gone)


def report_lines(report: Path) -> list[str]:
    """The report's lines (both pages) outside its tables."""
    return [ln for page in ("REPORT.md", "DETAILS.md") if (report / page).exists()
            for ln in (report / page).read_text().splitlines() if not ln.startswith("|")]


def named(report: Path, pattern: str, what: str) -> tuple[bool, str]:
    """(whether a line of the report, outside its tables, matches `pattern`; that line, or `what` none said)."""
    found = [ln for ln in report_lines(report) if re.search(pattern, ln)]
    return bool(found), f"named: {found[0].strip('- ')[:150]}" if found else f"a report; no line of it names {what}"


# --- items 1-5: a run owns only its files -----------------------------------------------------------------------


def foreign_folder(work: Path) -> list[Trial]:
    """1: a fresh run into a folder of a user's files: their run.json (not a run's), config.json, Hydra record, a
    part named as a run's and another in eval/."""
    folder = plant(work / "F", {"run.json": json.dumps({"name": "my experiment", "lr": 3e-4}),
                                "config.json": json.dumps({"lr": 3e-4}), ".hydra/config.yaml": "lr: 0.0003\n"})
    user_part(folder / "groups" / "part-000007.parquet")
    user_part(folder / "eval" / "part-x.parquet")
    return [attempt("1: a fresh run into a folder of the user's run.json, config, .hydra and parts", "refused",
                    "experiments.train", [*RUN, f"hydra.run.dir={folder}"], work,
                    says=("config.json: a file no grpo-lab run wrote, in a folder that holds no run",))]


def pruning(work: Path, run: Path) -> list[Trial]:
    """2: checkpoint.keep_last=1 (keep_eval=false: nothing kept but the last) resumed past a checkpoint holding the
    user's file: the checkpoint's own files go, the user's file (and so its folder) stays."""
    copied = copy(run, work / "run")
    mine = plant(copied / "checkpoints" / "step-000002", {"notes.txt": "my notes on step 2\n"}) / "notes.txt"

    def pruned(_) -> tuple[bool, str]:
        left = sorted(p.name for p in mine.parent.iterdir())
        kept = sorted(p.name for p in (copied / "checkpoints").iterdir())
        right = left == ["notes.txt"] and kept == ["step-000002", "step-000003"] and record(copied)["status"] == "done"
        return right, f"step-000002 pruned to {left}; checkpoints {', '.join(kept)}"
    return [attempt("2: checkpoint.keep_last=1 with the user's file in checkpoints/step-000002", "correct",
                    "experiments.train", [*RUN[1:], "max_steps=3", "checkpoint.keep_last=1",
                                          "checkpoint.keep_eval=false", f"hydra.run.dir={copied}"], work,
                    planted=[mine], check=pruned)]


def crossed(work: Path, run: Path, ingested: Path, trl: Path) -> list[Trial]:
    """3: resume=never into an ingested run's folder; analysis.ingest into a training run's folder."""
    theirs, ours = copy(ingested, work / "ingested"), copy(run, work / "run")
    return [attempt("3: resume=never into an ingested run's folder", "refused", "experiments.train",
                    [*RUN, "resume=never", f"hydra.run.dir={theirs}"], work,
                    says=(".grpo-lab-ingest:", "holds an ingested run")),
            attempt("3: analysis.ingest into a training run's folder", "refused", "analysis.ingest",
                    ["trl", trl, "--out", ours, *CORRECT], work,
                    says=(f"--out {ours}: exists and is not a folder an ingest wrote",))]


def reingest(work: Path, ingested: Path, trl: Path) -> list[Trial]:
    """4: the same ingest again into its folder, which now holds the user's parquet part and an empty eval/."""
    folder = copy(ingested, work / "ingested")
    mine = user_part(folder / "groups" / "part-000099.parquet", step=99)
    (folder / "eval").mkdir()

    def rewritten(_) -> tuple[bool, str]:
        parts = sorted(p.name for p in (folder / "groups").glob("part-*.parquet"))
        right = parts == ["part-000001.parquet", "part-000002.parquet", "part-000003.parquet", "part-000099.parquet"]
        return right and (folder / "eval").is_dir(), f"ingested again beside the user's files: groups {parts}"
    return [attempt("4: ingest again into a folder holding the user's part and an empty eval/", "correct",
                    "analysis.ingest", ["trl", trl, "--out", folder, *CORRECT], work,
                    planted=[mine, folder / "eval"], check=rewritten)]


def linked_lock(work: Path, run: Path) -> list[Trial]:
    """5: a `.lock` that is a symlink to the user's file, in a new folder and in a finished run's (resumed, and
    evaluated)."""
    precious = plant(work, {"precious.txt": "a user's file\n"}) / "precious.txt"
    fresh, done = work / "new", copy(run, work / "run")
    fresh.mkdir()
    for folder in (fresh, done):
        (folder / ".lock").symlink_to(precious)
    return [attempt("5: a .lock linked to the user's file, a new run", "refused", "experiments.train",
                    [*RUN, f"hydra.run.dir={fresh}"], work, says=(".lock: a symlink",)),
            attempt("5: a .lock linked to the user's file, a resume", "refused", "experiments.train",
                    [*RUN[1:], "max_steps=3", f"hydra.run.dir={done}"], work, says=(".lock: a symlink",)),
            attempt("5: a .lock linked to the user's file, evaluate", "refused", "experiments.evaluate",
                    [f"run_dir={done}", "n=3"], work, says=(".lock: a symlink",))]


# --- item 6: tables no run could have written ---------------------------------------------------------------


def edit(path: Path, column: str, change) -> None:
    """A real part rewritten with `column`'s values changed by `change(values)` (a numpy copy)."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    values = change(table.column(column).to_numpy().copy())
    pq.write_table(table.set_column(i, table.schema.field(i), pa.array(values, table.schema.field(i).type)), path)


def put(row: int, value):
    def change(values):
        values[row] = value
        return values
    return change


IMPOSSIBLE = [  # (what, job, table, part, the edit, what the report must say of it)
    ("tie flags inverted", "0", "groups", 1, ("tie", lambda v: ~v), r"row 0: tie (True|False) with tie_kind"),
    ("n_correct 99 in groups of 4", "1", "groups", 2, ("n_correct", put(0, 99)),
     r"row 0: n_correct 99 outside 0\.\.group_size 4"),
    ("an infinite reward", "2", "groups", 3, ("reward_mean", put(1, float("inf"))),
     r"row 1: reward_mean inf is not finite"),
]


def impossible_tables(work: Path, sweep: Path, other: Path) -> list[Trial]:
    """6: real tables of a tiny sweep edited as the probe did, then `python -m analysis`: each named (its part, row,
    column and value) or refused in one line, never a silent report."""
    rows = []

    def trial(name: str, folder: Path, pattern: str, what: str, says=()) -> Trial:
        report = folder.parent / "report"
        return either(f"6: {name}", "analysis", [folder, "--out", report], folder.parent, says=says, planted=[folder],
                      check=lambda _: named(report, pattern, what))
    for what, job, table, part, (column, change), says in IMPOSSIBLE:
        folder, name = copy(sweep, work / what.replace(" ", "-") / "sweep"), f"{job}/{table}/part-{part:06d}.parquet"
        edit(folder / name, column, change)
        rows.append(trial(what, folder, rf"`{re.escape(name)}`: {says}", f"{name}'s row", says=(name, column)))
    folder = copy(sweep, work / "backwards" / "sweep")
    for step in (1, 2, 3):  # each part's step numbered from the end
        edit(folder / "3" / "steps" / f"part-{step:06d}.parquet", "step", lambda v, s=step: v * 0 + 4 - s)
    rows.append(trial("steps numbered backwards", folder, r"`3/steps/part-00000\d\.parquet`: row \d+: step \d+ after "
                      r"step \d+", "job 3's steps", says=("3/steps/part-", "step")))
    folder = copy(sweep, work / "copied-in" / "sweep")
    copy(other / "0", folder / "4")  # job 0 of another sweep (the same overrides: sampler=fixed seed=0)
    rows.append(trial("a job copied in from another sweep", folder, r"(\bjob 4\b|`4`)",
                      "job 4 (5 jobs counted: seed 0 of sampler=fixed twice)", says=("4",)))
    folder = copy(sweep, work / "removed" / "sweep")
    shutil.rmtree(folder / "2")
    rows.append(trial("a planned job's folder removed", folder, r"left no run: 1 of the 4 jobs .*\(job 2\)",
                      "job 2 as missing", says=("2",)))
    rows.append(lowered(work / "lowered", sweep))
    return rows


def lowered(work: Path, sweep: Path) -> Trial:
    """6: job 0 resumed with max_steps=1 after its 3 steps (the .hydra record and config.json then say 1, its tables
    3): refused in one line, or its report names job 0's max_steps against its steps."""
    folder = copy(sweep, work / "sweep")
    job = folder / "0"
    overrides = [o if not o.startswith("max_steps=") else "max_steps=1"
                 for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())]
    before = snapshot(work)
    out = command("experiments.train", *overrides, f"hydra.run.dir={job}")
    if out.returncode != 0 or "Traceback" in out.stderr:
        after = snapshot(work)
        return verdict("6: max_steps lowered on resume", "refused", judge(out, before, after, set(before)), out,
                       says=("max_steps",))
    report = work / "report"
    return either("6: max_steps lowered on resume, then the report", "analysis", [folder, "--out", report], work,
                  says=("max_steps",), planted=[folder],
                  check=lambda _: named(report, r"max_steps.*(\bjob 0\b|`0`)|(\bjob 0\b|`0`).*max_steps",
                                        "job 0's max_steps 1 against its 3 steps (an arm max_steps=1 made of it)"))


# --- item 7: the ingest's inputs ------------------------------------------------------------------------------


def trl_run(folder: Path, seed: int = 1, steps: int = 3) -> Path:
    """A TRL run's completions files (completions/completions_NNNNN.parquet) of a simulated grpo-lab run, groups of 4,
    no trainer_state.json."""
    from fixtures.synthetic import job_config, prompt_pool, simulate_groups
    from fixtures.tool_logs import trl_export

    prompts = prompt_pool(levels=("1", "2", "3"), per_level=8)
    cfg = job_config("fixed", group_size=4, seed=seed, max_steps=steps, prompts_per_step=4)
    return trl_export(simulate_groups(prompts, cfg, "run-0").to_pandas(), folder)


def edited_trl(folder: Path, change) -> Path:
    import pandas as pd

    trl = trl_run(folder)
    first = trl / "completions" / "completions_00001.parquet"
    frame = pd.read_parquet(first)
    change(frame)
    frame.to_parquet(first)
    return trl


def six_of_one(frame) -> None:
    """One prompt logged 6 times in a row among groups of 4 (two rows of the next group renamed)."""
    frame.loc[0:5, "prompt"] = frame.loc[0, "prompt"]
    frame.loc[6:7, "prompt"] = "another prompt"


def verl_dump(folder: Path, change=None, line: bytes | None = None) -> Path:
    """verl's `<step>.jsonl` dumps of 3 steps (3 prompts of 4 answers); `change(steps)` edits the rows, `line`
    replaces the third line of 2.jsonl."""
    import numpy as np

    from fixtures.synthetic import prompt_pool
    from fixtures.tool_logs import verl_rows, write_verl

    rng, prompts = np.random.default_rng(0), prompt_pool(levels=("1", "2", "3"), per_level=8)
    steps = {s: verl_rows(prompts, s, 4, rng, batch=3) for s in (1, 2, 3)}
    if change:
        change(steps)
    dump = write_verl(folder, steps)
    if line is not None:
        lines = (dump / "2.jsonl").read_bytes().splitlines()
        lines[2] = line
        (dump / "2.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return dump


def ingest_inputs(work: Path) -> list[Trial]:
    """7: hostile logs, a second run at one path, no cross-check, and destinations an ingest must not write."""
    import numpy as np

    trl, rows = trl_run(work / "trl"), []
    refused = [  # (what, the source, its tool and options, what the line names)
        ("a prompt logged 6 times among groups of 4", edited_trl(work / "six", six_of_one), ["trl", *CORRECT],
         "completions_00001.parquet:row 0: 6 consecutive completions of one prompt"),
        ("a TRL reward of inf", edited_trl(work / "inf", lambda f: f.__setitem__(
            "accuracy", f["accuracy"].where(f.index != 2, np.inf))), ["trl", *CORRECT],
         "completions_00001.parquet:row 2: reward inf is not a finite number"),
        ("a verl score of 1e39", verl_dump(work / "big", lambda s: s[2][1].__setitem__("score", 1e39)), ["verl"],
         "big/2.jsonl:2: reward 1e+39 is not a finite number"),
        ("a step column against its file's name", edited_trl(work / "step", lambda f: f.__setitem__("step", 3)),
         ["trl", *CORRECT], "completions_00001.parquet:row 0: step 3 in a file named for step 1"),
        ("--correct-at nan", trl, ["trl", *CORRECT, "--correct-at", "nan"], "--correct-at nan: must be a number"),
        ("a byte that is not UTF-8 in a verl line", verl_dump(work / "utf", line=b'{"input": "\xff"}'), ["verl"],
         "utf/2.jsonl:3: not UTF-8 text"),
        ("a JSON line nested 100,000 deep", verl_dump(work / "deep", line=b"[" * 100_000 + b"]" * 100_000), ["verl"],
         "deep/2.jsonl:3: JSON nested too deep"),
    ]
    for what, source, (tool, *options), says in refused:
        rows.append(attempt(f"7: ingest {what}", "refused", "analysis.ingest",
                            [tool, source, "--out", work / "out", *options], work, says=(says,)))

    first = work / "first"
    done = command("analysis.ingest", "trl", trl, "--out", first, *CORRECT)
    assert done.returncode == 0, done.stderr[-2000:]

    rows.append(attempt("7: ingest without trainer_state.json", "correct", "analysis.ingest",
                        ["trl", trl, "--out", work / "unchecked", *CORRECT], work, planted=[first],
                        check=lambda out: unchecked(out, work / "unchecked")))
    shutil.rmtree(trl / "completions")
    trl_run(work / "trl", seed=2)  # a second run written where the first was

    def other_id(_) -> tuple[bool, str]:
        a, b = record(first)["run_id"], record(work / "second")["run_id"]
        return a != b, f"run ids {a} and {b}"
    rows.append(attempt("7: a second TRL run at the first's path", "correct", "analysis.ingest",
                        ["trl", trl, "--out", work / "second", *CORRECT], work, planted=[first], check=other_id))
    rows.append(inside_running_job(work, trl))
    rows.append(read_only_destination(work, trl))
    return rows


def unchecked(out, folder: Path) -> tuple[bool, str]:
    """The ingest without trainer_state.json: the missing cross-check said on stdout and kept in run.json."""
    said = [ln for ln in out.stdout.splitlines() if "no trainer_state.json" in ln]
    absent = record(folder)["imported"]["absent"]
    right = bool(said) and "checked against nothing" in said[0] and any("trainer_state.json" in a for a in absent)
    return right, said[0][:160] if said else "the missing cross-check not said"


def inside_running_job(work: Path, trl: Path) -> Trial:
    """7: `--out JOB/imported` while a real job runs in JOB."""
    job = work / "job"
    proc = command("experiments.train", "max_steps=600", "checkpoint_every=100", *LONG, f"hydra.run.dir={job}",
                   wait=False)
    try:
        while not (job / "steps" / "part-000002.parquet").exists() and proc.poll() is None:
            time.sleep(0.05)
        running = proc.poll() is None
        row = attempt("7: ingest into a new folder inside a running job", "refused", "analysis.ingest",
                      ["trl", trl, "--out", job / "imported", *CORRECT], job / "imported",
                      says=("inside the run folder", "(its run.json)"))
        running = running and proc.poll() is None
    finally:
        proc.kill()
        proc.communicate()
    return row if running else (row[0], False, f"{row[2]}; the job was not running throughout", row[3])


def read_only_destination(work: Path, trl: Path) -> Trial:
    """7: `--out` on a read-only filesystem (a tmpfs mounted read-only in a private mount namespace)."""
    name = "7: ingest to a read-only destination"
    if not can_mount():
        return (name, False, "skipped: no private mount namespace (unshare -rm) here")  # no outcome: not run
    mnt = work / "mnt"
    mnt.mkdir()
    before = snapshot(work)
    out = in_namespace(f"mount -t tmpfs -o ro tmpfs {mnt} || exit 99\n"
                       f"exec {sys.executable} -m analysis.ingest trl {trl} --out {mnt}/run {' '.join(CORRECT)}")
    return verdict(name, "refused", judge(out, before, snapshot(work), set(before)), out,
                   says=(f"--out {mnt}/run: cannot write there (Read-only file system)",))


# --- items 8-9: keys nothing reads, task files ------------------------------------------------------------------


def unread_keys(work: Path) -> list[Trial]:
    """8: keys a job would never read, or values it cannot run with, refused before anything loads; eval=none with
    an evaluation schedule a warning (its points still choose the checkpoints saved)."""
    mine = plant(work, {"notes.txt": "a user's file\n"}) / "notes.txt"
    run = f"hydra.run.dir={work / 'run'}"
    cases = [("out_dir=X", ["out_dir=" + str(work / "X"), run], ("out_dir=", "is not read", "hydra.run.dir")),
             ("sampler=ar3po sampler.group_size=4", ["sampler=ar3po", "sampler.group_size=4", run],
              ("sampler.group_size=4 is read only by",)),
             ("sampler=spo (the default algo)", ["sampler=spo", run], ("sampler=spo draws one answer a prompt",)),
             ("arm=spo reward.format=0.5", ["arm=spo", "reward.format=0.5", run], ("reward.format=0.5 is invalid",)),
             ("hydra.run.dir=notes.txt (the user's file)", [f"hydra.run.dir={mine}"],
              (f"hydra.run.dir: {mine} is a file, not a folder",))]
    rows = [attempt(f"8: {name}", "refused", "experiments.train", [*RUN, *args], work, says=says)
            for name, args, says in cases]
    warning = "warning: eval.n=0 (eval=none) with eval.every_samples=64"

    def warned(out) -> tuple[bool, str]:
        said = [ln for ln in out.stderr.splitlines() if ln.startswith(warning)]
        return bool(said) and record(work / "quiet")["status"] == "done", said[0][:150] if said else "no warning"
    rows.append(attempt("8: eval=none eval.every_samples=64", "correct", "experiments.train",
                        ["max_steps=2", *SMALL[:4], "threads=1", "eval=none", "eval.every_samples=64",
                         f"hydra.run.dir={work / 'quiet'}"], work, planted=[mine], check=warned))
    return rows


def task_files(work: Path) -> list[Trial]:
    """9: a record whose id is 0 (held out, so its evaluation names it); problems "4+7" and "4 + 7", in one file
    (split by hash) and across task.path and task.eval_path: never one on each side."""
    from grpo_lab.run.tables import read_table
    from grpo_lab.tasks.mathset import held_out_by_text, spelling

    def jsonl(name: str, records: list[dict]) -> Path:
        return plant(work, {name: "".join(json.dumps(r) + "\n" for r in records)}) / name

    def ids(run: Path, table: str) -> set[str]:
        return set(read_table(run, table).column("prompt_id").to_pylist())
    held = next(i for i in range(100) if held_out_by_text(spelling(f"What is {i} + 5?")))
    zero = jsonl("zero.jsonl", [{"problem": f"What is {i} + 5?", "answer": str(i + 5), "id": k}
                                for k, i in enumerate([held, *(i for i in range(100) if i != held)][:30])])

    def zero_id(_) -> tuple[bool, str]:
        evaluated, known = ids(work / "zero", "eval"), {str(k) for k in range(30)}
        right = "0" in evaluated and evaluated | ids(work / "zero", "groups") <= known
        return right, f"held-out ids {sorted(evaluated, key=int)[:6]}: id 0 {'kept' if '0' in evaluated else 'LOST'}"
    rows = [attempt('9: a record with "id": 0', "correct", "experiments.train",
                    [*MATH, f"task.path={zero}", f"hydra.run.dir={work / 'zero'}"], work, planted=[zero],
                    check=zero_id)]
    spaced = jsonl("spaced.jsonl", [{"problem": f"What is {i}+7?" if k == "a" else f"What is {i} + 7?",
                                     "answer": str(i + 7), "id": f"{k}{i}"} for i in range(40) for k in "ab"])

    def one_side(_) -> tuple[bool, str]:
        evaluated, drawn = ids(work / "spaced", "eval"), ids(work / "spaced", "groups")
        split = [i for i in range(40) if (f"a{i}" in evaluated) != (f"b{i}" in evaluated)]
        pairs = sum(f"a{i}" in evaluated for i in range(40))
        right = not split and 0 < pairs < 40 and not evaluated & drawn
        return right, (f"{pairs} of 40 pairs held out, {len(split)} split across the sides, "
                       f"{len(evaluated & drawn)} held-out ids drawn in training")
    rows.append(attempt('9: "4+7" and "4 + 7" in one file', "correct", "experiments.train",
                        [*MATH, f"task.path={spaced}", f"hydra.run.dir={work / 'spaced'}"], work, planted=[spaced],
                        check=one_side))
    train = jsonl("train.jsonl", [{"problem": f"What is {i}+7?", "answer": str(i + 7), "id": f"t{i}"}
                                  for i in range(20)])
    held_out = jsonl("held.jsonl", [{"problem": f"What is {i} + 7?", "answer": str(i + 7), "id": f"e{i}"}
                                    for i in range(10)])

    def apart(_) -> tuple[bool, str]:
        drawn, evaluated = ids(work / "apart", "groups"), ids(work / "apart", "eval")
        both = sorted(p for p in drawn if int(p[1:]) < 10)
        log = (work / "apart" / "train.log").read_text()
        warned = "10 training problems have the text of a held-out problem" in log
        right = not both and evaluated == {f"e{i}" for i in range(10)} and warned
        return right, (f"{len(drawn)} training ids drawn, {len(both)} of them held out as text; "
                       f"{'a' if warned else 'no'} warning counts the 10 left out of training")
    rows.append(attempt('9: "4+7" in task.path, "4 + 7" in task.eval_path', "correct", "experiments.train",
                        [*MATH, f"task.path={train}", f"task.eval_path={held_out}", f"hydra.run.dir={work / 'apart'}"],
                        work, planted=[train, held_out], check=apart))
    return rows


def owner_trials(work: Path) -> list[Trial]:
    """Every item's trials, each in a folder of its own; an item whose trial cannot run is one failed row."""
    base, sweep, other, trl, ingested = (work / n for n in ("base", "sweep", "other", "trl", "ingested"))
    trl_run(trl)
    made = [command("experiments.train", *RUN, f"hydra.run.dir={base}"),
            command("experiments.train", *SWEEP, f"hydra.sweep.dir={sweep}"),
            command("experiments.train", "-m", "sampler=fixed", "seed=0", *SWEEP[3:], f"hydra.sweep.dir={other}"),
            command("analysis.ingest", "trl", trl, "--out", ingested, *CORRECT)]
    for out in made:
        assert out.returncode == 0, out.stderr[-3000:]
    for folder in (sweep, other):  # the sweep's report, built as it ended, is no part of what is edited
        shutil.rmtree(folder / "report", ignore_errors=True)
    items = [("1", foreign_folder), ("2", lambda w: pruning(w, base)),
             ("3", lambda w: crossed(w, base, ingested, trl)), ("4", lambda w: reingest(w, ingested, trl)),
             ("5", lambda w: linked_lock(w, base)), ("6", lambda w: impossible_tables(w, sweep, other)),
             ("7", ingest_inputs), ("8", unread_keys), ("9", task_files)]
    return run_items("owners", work, items)
