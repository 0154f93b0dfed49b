"""Reliability trials of what writes, loads and is accepted (benchmarks/reliability.py runs
them as its group "writers"), each through the command a user types (python -m analysis, analysis.pack,
experiments.train, experiments.evaluate) on tiny real runs: the built-in model, one trained run and one real
sweep, copied for each trial that needs one. Rows (trial, passed, detail, outcome); each outcome judged on the
trial's own folder before and after (benchmarks/reliability_outcomes.py): a trial passes when its outcome is the
one expected (a one-line refusal naming what it must, or a correct result checked) and none of the bad ones
(a traceback, a silent wrong, data lost, code run) happened.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import time
from pathlib import Path

from reliability_outcomes import Trial, attempt, command, judge, run_items, snapshot, verdict

from fixtures.runs import CHAT, ROOT, SMALL, error_lines

RUN = ["max_steps=2", "checkpoint_every=1", *SMALL[:4], "task.eval_per_level=3", "eval.n=2", "threads=1"]
SWEEP = ["-m", "sampler=fixed,resample_on_tie", "seed=0,1", *RUN[:1], *SMALL[:4], "task.eval_per_level=6",
         "eval.n=4", "threads=1"]
LONG = [*SMALL[:4], "eval=none", "threads=1"]  # jobs that must still be running when something happens to them


class Payload:
    """What a hostile state.pt holds: unpickling it calls open(marker, "w"), creating the marker."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def copy(source: Path, to: Path) -> Path:
    return Path(shutil.copytree(source, to, symlinks=True))


def record(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())


def steps_of(run: Path, table: str = "steps") -> list[int]:
    return sorted(int(p.name[5:11]) for p in (run / table).glob("part-??????.parquet"))


def plant(folder: Path, files: dict[str, str | bytes]) -> Path:
    """`folder` holding `files` (path in it -> contents), as a user left them."""
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data) if isinstance(data, bytes) else (folder / name).write_text(data)
    return folder


# --- items 1-3: nothing lost -------------------------------------------------------------------------------


def out_folders(work: Path, run: Path) -> list[Trial]:
    """1: `--out F` where F holds the user's files; `--out reports` (a folder of reports) by mistake."""
    mine = plant(work / "mine", {"REPORT.md": "# my own notes\n", "tables/mydata.csv": "a,b\n1,2\n",
                                 "figures/photo.png": b"\x89PNG not really"})
    plant(work / "elsewhere", {"kept.txt": "kept"})
    (mine / "linked").symlink_to(work / "elsewhere", target_is_directory=True)
    mine.chmod(0o700)
    source = copy(run, work / "run")
    rows = [attempt("1: --out a folder of the user's files (a link, mode 700)", "refused", "analysis",
                    [source, "--out", mine], work, says=("(REPORT.md, figures/photo.png, linked, tables/mydata.csv)",))]
    reports = work / "reports"
    reports.mkdir()
    shutil.copy(ROOT / "reports" / "README.md", reports)
    shutil.copytree(ROOT / "reports" / "main", reports / "main", ignore=shutil.ignore_patterns("data"))
    rows.append(attempt("1: --out reports (the folder of committed reports)", "refused", "analysis",
                        [source, "--out", reports], work, says=("(README.md, main)",)))
    return rows


def live_job(work: Path, sweep: Path) -> list[Trial]:
    """2: `analysis L --out L`; then, while a real job of L runs, `analysis L --out L` and a rebuild of L's report:
    every file the job had written survives, and it ends done with every step's rows."""
    folder = copy(sweep, work / "L")
    rows = [attempt("2: analysis L --out L (L a sweep)", "refused", "analysis", [folder, "--out", folder], work,
                    says=("holds runs",))]
    job, steps = folder / "live", 600
    proc = command("experiments.train", f"max_steps={steps}", "checkpoint_every=100", *LONG,
                   f"hydra.run.dir={job}", wait=False)
    try:
        while not (job / "steps" / "part-000005.parquet").exists() and proc.poll() is None:
            time.sleep(0.05)
        others = [p for p in folder.iterdir() if p.name != "live"]
        before = snapshot(*others)
        out = command("analysis", folder, "--out", folder)
        outcome = judge(out, before, snapshot(*others), before)
        rows.append(verdict("2: analysis L --out L while a job of L runs", "refused", outcome, out, ("holds runs",)))
        written = {k: v for k, v in snapshot(job).items()  # its parts and checkpoints, temporaries aside
                   if os.path.relpath(k, job).split("/")[0] in ("groups", "steps", "checkpoints") and "/." not in k}
        at = len(steps_of(job))
        out = command("analysis", folder)  # rebuilds L/report, a marked report, while the job writes beside it
        running, ended = proc.poll() is None, len(steps_of(job))
        _, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
    after = snapshot(job)
    whole = (proc.returncode == 0 and record(job)["status"] == "done" and steps_of(job) == list(range(1, steps + 1))
             and steps_of(job, "groups") == steps_of(job))
    right = running and whole and (folder / "report" / "REPORT.md").is_file()
    checked = (f"built while the job wrote steps {at}-{ended} of {steps}" if running else
               f"the job ended before the build did (raise its max_steps): steps {at}-{ended}") + \
        (f"; the job ended done with every step's rows and all {len(written)} files it had written" if whole else
         f"; the job: exit {proc.returncode}, {len(steps_of(job))} steps' rows, {err.strip()[-150:]}")
    rows.append(verdict("2: a report rebuilt in L while a job of L runs", "correct",
                        judge(out, written, after, written, right=right), out, checked=checked))
    return rows


def resume_never(work: Path) -> list[Trial]:
    """3: resume=never on a folder that is no run, holding eval/my_eval.py and checkpoints/model.ckpt."""
    folder = plant(work / "P", {"eval/my_eval.py": "print('mine')\n", "checkpoints/model.ckpt": b"weights"})
    return [attempt("3: resume=never on a folder that is no run", "refused", "experiments.train",
                    [*RUN, "resume=never", f"hydra.run.dir={folder}"], work,
                    says=("eval/my_eval.py: a file no grpo-lab run writes",))]


# --- items 4-6, 14: evaluate as a writer; loads that run no code; broken files ---------------------------------


def evaluate_values(work: Path, run: Path) -> list[Trial]:
    """4: values evaluate cannot use; the run's eval rows must stay as they were."""
    copied = copy(run, work / "run")
    cases = [(["n=4", "temperature=-1", "steps=[0,30]"], "temperature=-1.0 is invalid"),
             (["temperature=nan"], "temperature=nan is invalid"), (["n=0"], "n=0 is invalid"),
             (["n=-1"], "n=-1 is invalid"), (["n=100000"], "n=100000 is invalid"),
             (["steps=[0,30]"], "no checkpoint for step 30")]
    return [attempt(f"4: evaluate {' '.join(args)}", "refused", "experiments.evaluate", [f"run_dir={copied}", *args],
                    work, says=(says,)) for args, says in cases]


def payloads(work: Path, run: Path) -> list[Trial]:
    """5: a pickled payload planted in the last checkpoint's state.pt (no counters.json beside it, as a checkpoint
    written before counters.json): resume refuses; evaluate refuses it unread, says so, and evaluates the weights
    (safetensors) without the samples drawn that only state.pt recorded."""
    import torch

    def planted(name: str) -> tuple[Path, Path]:
        copied, marker = copy(run, work / name), work / f"{name}-payload-ran"
        ckpt = copied / "checkpoints" / "step-000002"
        torch.save({"step": 2, "world_size": 1, "counters": Payload(marker)}, ckpt / "state.pt")
        (ckpt / "counters.json").unlink()
        return copied, marker
    says = "step-000002/state.pt: refused: it holds pickled Python objects"
    resumed, marker = planted("resume")
    rows = [attempt("5: resume with a payload in state.pt", "refused", "experiments.train",
                    [*RUN[1:], "max_steps=4", f"hydra.run.dir={resumed}"], work, says=(says,), markers=[marker])]
    evaluated, marker = planted("evaluate")

    def weights_only(out) -> tuple[bool, str]:
        import pyarrow.parquet as pq

        parts = list((evaluated / "eval").glob("part-000002-n3-*.parquet"))
        drawn = pq.read_table(parts[0]).column("samples_total").to_pylist() if parts else []
        right = says in out.stderr and bool(drawn) and all(d is None for d in drawn)
        return right, (f"state.pt refused unread {'with' if says in out.stderr else 'WITHOUT'} a warning; "
                       f"{len(drawn)} rows of its weights, samples drawn {'not recorded' if right else drawn[:2]}")
    return rows + [attempt("5: evaluate with a payload in state.pt", "correct", "experiments.evaluate",
                           [f"run_dir={evaluated}", "n=3", "steps=[2]"], work, markers=[marker], check=weights_only)]


EVIL = ('import os\nopen(os.environ["GRPO_TEST_MARKER"], "w").write("custom code ran")\n'  # at import: the marker
        "from transformers import Qwen2ForCausalLM\n\n\nclass EvilForCausalLM(Qwen2ForCausalLM):\n    pass\n")


def remote_code(work: Path) -> list[Trial]:
    """6: a model=local folder whose config.json (or tokenizer_config.json) maps an Auto class to its own code."""
    from fixtures.models import build_chat_model

    model, rows = build_chat_model(work / "model"), []
    for file, key, value in (("config.json", "AutoModelForCausalLM", "modeling_evil.EvilForCausalLM"),
                             ("tokenizer_config.json", "AutoTokenizer", ["modeling_evil.EvilTokenizer", None])):
        trial = work / file.split(".")[0]
        folder, marker = copy(model, trial / "custom"), trial / "custom-ran"
        (folder / "modeling_evil.py").write_text(EVIL)
        (folder / file).write_text(json.dumps({**json.loads((folder / file).read_text()), "auto_map": {key: value}}))
        env = {"GRPO_TEST_MARKER": str(marker), "HF_MODULES_CACHE": str(trial / "modules")}
        rows.append(attempt(f"6: model=local with auto_map in {file}", "refused", "experiments.train",
                            ["model=local", f"model.path={folder}", *CHAT, f"hydra.run.dir={trial / 'run'}"], trial,
                            says=("auto_map", "model.trust_remote_code=true"), markers=[marker], env=env))
    return rows


BROKEN = [("evaluate", "model.safetensors", "truncated"), ("evaluate", "model.safetensors", "missing"),
          ("resume", "model.safetensors", "truncated"), ("resume", "model.safetensors", "missing"),
          ("resume", "state.pt", "truncated")]  # (the command, a file of the last checkpoint, what became of it)


def broken_files(work: Path, run: Path) -> list[Trial]:
    """14: `--out` an existing file; pack on a truncated part; evaluate, and resume (the same class, not named in
    the issue), on a checkpoint whose files are truncated or missing; a start in a folder of the user's files that
    is no run (once trained beside them, warning "made by an older version"; refused since issue 56: a run starts
    only in an empty folder or its own)."""
    (work / "existing_file.txt").write_text("mine")
    source = copy(run, work / "run")
    rows = [attempt("14: --out existing_file.txt", "refused", "analysis", [source, "--out", work / "existing_file.txt"],
                    work, says=("a file, not a folder",))]
    part = source / "groups" / "part-000002.parquet"
    part.write_bytes(part.read_bytes()[:40])
    rows.append(attempt("14: analysis.pack on a truncated part", "refused", "analysis.pack", [source, work / "shipped"],
                        work, says=(f"{part}: unreadable (",)))
    for i, (what, file, how) in enumerate(BROKEN):
        path = copy(run, work / f"checkpoint-{i}") / "checkpoints" / "step-000002" / file  # the last checkpoint's
        path.unlink() if how == "missing" else path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        line = ["experiments.evaluate", [f"run_dir={work / f'checkpoint-{i}'}", "n=3"]] if what == "evaluate" else \
            ["experiments.train", [*RUN[1:], "max_steps=4", f"hydra.run.dir={work / f'checkpoint-{i}'}"]]
        rows.append(attempt(f"14: {what} a checkpoint whose {file} is {how}", "refused", *line, work,
                            says=(f"{path}: {how}" if what == "evaluate" else str(path),)))
    folder = plant(work / "P", {"eval/my_eval.py": "print('mine')\n", "notes.md": "mine\n"})
    return rows + [attempt("14: a start in a folder that is no run", "refused", "experiments.train",
                           [*RUN, f"hydra.run.dir={folder}"], work,
                           says=("eval/my_eval.py: a file no grpo-lab run wrote, in a folder that holds no run",))]


# --- items 7-13: wrong without a word; a worker killed ----------------------------------------------------------


def other_temperature(work: Path, sweep: Path) -> list[Trial]:
    """7: one arm's jobs evaluated again at temperature 0.5, then the report: every held-out table as without
    that evaluation, and the report naming what it left out."""
    plain, both = copy(sweep, work / "plain"), copy(sweep, work / "both")
    arm = [j for j in sorted(both.iterdir()) if (j / "config.json").exists()
           and json.loads((j / "config.json").read_text())["sampler.name"] == "resample_on_tie"]
    jobs = ", ".join(j.name for j in arm)
    for job in arm:
        done = command("experiments.evaluate", f"run_dir={job}", "n=4", "temperature=0.5")
        assert done.returncode == 0, done.stderr[-2000:]
    built = command("analysis", plain, "--out", work / "plain-report")
    assert built.returncode == 0, built.stderr[-2000:]

    def tables(report: Path) -> dict[str, str]:
        return {p.name: p.read_text() for p in (report / "tables").glob("*.csv")  # jobs, and what was left out:
                if p.name not in ("jobs.csv", "evaluations.csv")}                    # listed, not measured

    def check(_) -> tuple[bool, str]:
        ours, named = tables(work / "both-report"), f"n=4 temperature=0.5 top_p=1 max_new_tokens=6 (jobs {jobs})"
        same = ours == tables(work / "plain-report") and "heldout.csv" in ours
        left = [ln for ln in (work / "both-report" / "REPORT.md").read_text().splitlines() if "left out**" in ln]
        return same and bool(left) and named in left[0], (
            f"{len(ours)} tables (all but jobs.csv, evaluations.csv) {'as' if same else 'NOT as'} without the "
            "temperature-0.5 rows; "
            + (f"left out, named: {named}" if left and named in left[0] else "what was left out NOT named"))
    return [attempt(f"7: jobs {jobs} evaluated at temperature 0.5, then the report", "correct",
                    "analysis", [both, "--out", work / "both-report"], work, planted=[both], check=check)]


def unread_keys(work: Path) -> list[Trial]:
    """8: a key the chosen option never reads, swept or set."""
    return [attempt("8: -m sampler.pods.n=8,16 without sampler=pods", "refused", "experiments.train",
                    ["-m", "sampler.pods.n=8,16", *RUN, f"hydra.sweep.dir={work / 'sweep'}"], work,
                    says=("sampler.pods.n is swept (8, 16) but read only by sampler=pods",)),
            attempt("8: model.path=/nonexistent without model=local", "refused", "experiments.train",
                    ["model.path=/nonexistent", *RUN, f"hydra.run.dir={work / 'run'}"], work,
                    says=("model.path=/nonexistent is read only by model=local",))]


def task_files(work: Path) -> list[Trial]:
    """9: an answer of NaN, two problems with one id, and each problem written under two ids: one text, one side
    of the held-out split (its evaluation covers the whole held-out pool, so its rows show the split)."""
    def jsonl(name: str, lines: list[str]) -> Path:
        return plant(work, {name: "".join(line + "\n" for line in lines)}) / name
    good = json.dumps({"problem": "What is 1 + 1?", "answer": "2"})
    nan = jsonl("nan.jsonl", [good, json.dumps({"problem": "What is 2 + 2?", "answer": "4"}),
                              '{"problem": "What is 3 + 3?", "answer": NaN}'])
    ids = jsonl("ids.jsonl", [good[:-1] + ', "id": "a"}', json.dumps({"problem": "x", "answer": "1", "id": "b"}),
                              json.dumps({"problem": "y", "answer": "1", "id": "a"})])
    texts = {f"p{i}": f"What is {i} + 3?" for i in range(40)}
    repeats = jsonl("repeats.jsonl", [json.dumps({"problem": text if k == 0 else f"  {text.upper()} ", "answer":
                                                  str(i + 3), "id": f"{pid}-{k}"})
                                      for i, (pid, text) in enumerate(texts.items()) for k in range(2)])
    math = ["task=mathset", "max_steps=2", *SMALL[:2], "eval.n=1", "threads=1"]
    rows = [attempt("9: an answer of NaN", "refused", "experiments.train",
                    [*math, f"task.path={nan}", f"hydra.run.dir={work / 'nan'}"], work,
                    says=(f"{nan}:3: field 'answer' is nan",)),
            attempt("9: two problems with one id", "refused", "experiments.train",
                    [*math, f"task.path={ids}", f"hydra.run.dir={work / 'ids'}"], work,
                    says=(f"{ids}:3: id 'a' is also the id of {ids}:1",))]
    run = work / "repeats"

    def split(_) -> tuple[bool, str]:
        from grpo_lab.run.tables import read_table

        held = {pid.rsplit("-", 1)[0] for pid in read_table(run, "eval").column("prompt_id").to_pylist()}
        evaluated = set(read_table(run, "eval").column("prompt_id").to_pylist())
        drawn = {pid.rsplit("-", 1)[0] for pid in read_table(run, "groups").column("prompt_id").to_pylist()}
        whole = all(f"{p}-{k}" in evaluated for p in held for k in (0, 1))
        warned = "40 problems repeat the text of another" in (run / "train.log").read_text()
        return (whole and not held & drawn and warned and 0 < len(held) < 40,
                f"{len(held)} of 40 problems held out, each under both its ids; {len(held & drawn)} of them drawn "
                f"in training; {'a' if warned else 'no'} warning counts the repeats")
    rows.append(attempt("9: each problem under two ids", "correct", "experiments.train",
                        [*math, f"task.path={repeats}", f"hydra.run.dir={run}"], work, planted=[repeats], check=split))
    return rows


def bounds(work: Path) -> list[Trial]:
    """10: values that cannot learn."""
    cases = [(["rollout.temperature=1e-30"], ("rollout.temperature=1e-30 is invalid", "every group ties")),
             (["algo=rl_zvp", "algo.zvp_alpha=1e9"], ("algo.zvp_alpha=1000000000.0 is invalid", "RL-ZVP tested")),
             (["algo.eps_low=1.5"], ("algo.eps_low=1.5 is invalid", "1 - eps_low")),
             (["task.eval_per_level=0"], ("evaluation is on", "task.eval_per_level=0"))]
    return [attempt(f"10: {' '.join(args)}", "refused", "experiments.train",
                    [*RUN, *args, f"hydra.run.dir={work / 'run'}"], work, says=says) for args, says in cases]


def near_misses() -> list[Trial]:
    """11: last_number's near misses of 46, scored in this process; "46" itself must still earn the reward."""
    from grpo_lab.rewards.rules import RewardWeights, score

    def right(text: str) -> bool:
        return score(text, True, "46", "integer", RewardWeights(), "last_number").correct
    rows = []
    for text in ("0,046", "-+46", "≈46", "about 46"):
        try:
            wrong, control = right(f"So the answer is {text}"), right(f"{text}. So it is 46.")
            outcome = "silent wrong" if wrong else "correct"
            detail = (f"{'' if wrong else 'not '}rewarded; followed by 'So it is 46.', "
                      f"{'' if control else 'NOT '}rewarded")
        except Exception as e:  # noqa: BLE001 - counted: there must be none
            outcome, control, detail = "traceback", False, f"{type(e).__name__}: {e}"
        rows.append((f"11: last_number on {text!r}, gold 46", outcome == "correct" and control, f"{outcome}: {detail}",
                     outcome))
    return rows


def selections(work: Path, sweep: Path) -> list[Trial]:
    """12: two values of one key kept; the seed as a baseline or as an arm key."""
    folder, out = copy(sweep, work / "sweep"), work / "both"

    def both(_) -> tuple[bool, str]:
        with (out / "tables" / "jobs.csv").open() as f:
            jobs = [row["job"] for row in csv.DictReader(f)]
        said = (out / "REPORT.md").read_text().split("\n\n")[1].split(". ")[0]  # its arms and jobs
        return jobs == ["0", "1", "2", "3"] and "4 jobs" in said, f"report of jobs {', '.join(jobs)}: {said}"
    return [attempt("12: --where sampler=fixed --where sampler=resample_on_tie", "correct", "analysis",
                    [folder, "--out", out, "--where", "sampler=fixed", "--where", "sampler=resample_on_tie"], work,
                    check=both),
            attempt("12: --baseline seed=0", "refused", "analysis", [folder, "--out", work / "r", "--baseline",
                                                                     "seed=0"], work, says=("seed is not an arm key",)),
            attempt("12: --by seed", "refused", "analysis", [folder, "--out", work / "r", "--by", "seed"], work,
                    says=("--by seed: seeds are the replicates",))]


def killed_worker(work: Path) -> list[Trial]:
    """13: a joblib sweep of two jobs whose first worker gets SIGTERM; the report; the same command again."""
    sweep, steps = work / "sweep", 30
    args = ["-m", "launcher=joblib", "seed=0,1", f"max_steps={steps}", "checkpoint_every=2", *LONG,
            f"hydra.sweep.dir={sweep}"]
    proc = command("experiments.train", *args, wait=False)
    try:
        while not (sweep / "0" / "checkpoints" / "step-000002").exists() and proc.poll() is None:
            time.sleep(0.02)
        worker = record(sweep / "0")["pid"]
        os.kill(worker, signal.SIGTERM)
        _, err = proc.communicate(timeout=1800)
    finally:
        if proc.poll() is None:
            proc.kill()
    statuses = [record(sweep / j)["status"] if (sweep / j / "run.json").exists() else "no run" for j in "01"]
    right = worker != proc.pid and statuses == ["killed", "done"] and f"({sweep}/0); run.json: killed" in err
    outcome = "traceback" if "Traceback" in err else "correct" if right else "silent wrong"
    said = [ln for ln in error_lines(err) if "stopped by SIGTERM" in ln] or error_lines(err)[-1:] or ["nothing said"]
    rows = [("13: SIGTERM to a joblib worker", outcome == "correct", f"{outcome}: exit {proc.returncode}, run.json "
             f"{' and '.join(statuses)}; {len(error_lines(err))} lines said, among them: {said[0]}", outcome)]

    def counted(*words: str) -> tuple[bool, str]:
        text = (sweep / "report" / "REPORT.md").read_text()
        found = [ln.strip("- ")[:90] for ln in text.splitlines() if any(w in ln for w in words)]
        return all(w in text for w in words), " / ".join(found) or "not counted"
    rows.append(attempt("13: the report of the sweep with a killed job", "correct", "analysis", [sweep], work,
                        planted=[sweep / j for j in "01"], check=lambda _: counted(
                            "killed before finishing, left out: 1 (job 0)", "Jobs: 1 loaded, 1 jobs")))

    def resumed(_) -> tuple[bool, str]:
        done = [record(sweep / j)["status"] for j in "01"] == ["done"] * 2 and all(
            steps_of(sweep / j) == list(range(1, steps + 1)) for j in "01")
        right, said = counted("1 arm; 2 jobs", "Jobs: 2 loaded, 0 jobs")
        return done and right and "Incomplete sweep" not in (sweep / "report" / "REPORT.md").read_text(), \
            f"both jobs done with {steps} steps' rows; {said}"
    rows.append(attempt("13: the same command again", "correct", "experiments.train", args, work,
                        planted=[sweep / "1" / "groups"], check=resumed))
    return rows


def writer_trials(work: Path) -> list[Trial]:
    """Every item's trials, each in a folder of its own; an item whose trial cannot run is one failed row."""
    base, sweep = work / "base", work / "sweep"
    made = [command("experiments.train", *RUN, f"hydra.run.dir={base}"),
            command("experiments.train", *SWEEP, f"hydra.sweep.dir={sweep}")]
    for out in made:
        assert out.returncode == 0, out.stderr[-3000:]
    items = [("1", lambda w: out_folders(w, base)), ("2", lambda w: live_job(w, sweep)), ("3", resume_never),
             ("4", lambda w: evaluate_values(w, base)), ("5", lambda w: payloads(w, base)), ("6", remote_code),
             ("7", lambda w: other_temperature(w, sweep)), ("8", unread_keys), ("9", task_files), ("10", bounds),
             ("11", lambda w: near_misses()), ("12", lambda w: selections(w, sweep)), ("13", killed_worker),
             ("14", lambda w: broken_files(w, base))]
    return run_items("writers", work, items)
