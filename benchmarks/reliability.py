"""Reliability trials, each against a known right outcome; prints a table of trials and passes, and how the
trials that report an outcome ended (refused in one line, correct, tracebacks, silent wrongs, data lost, code run).

    python benchmarks/reliability.py [--kills 12] [--seed 0] [--only-guards | --only-writers | --only-owners]

- kill: a training process is killed with SIGKILL (during a part write, a checkpoint write, or at a
  random moment; some twice), then restarted until done; its tables must equal an uninterrupted run's.
- duplicate start: a second writer on a live run directory is refused in one line.
- changed config: a restart with another seed and group size is refused, naming both keys; the
  tables stay as they were.
- analysis: a sweep with one corruption per job; the report must name each and be written for the
  good jobs; a missing and an empty folder must give one line and a non-zero exit.
- rewards: generated near misses must never be rewarded, hostile text must never raise, and a
  hostile batch must come back within the scorer's step budget with its timeouts counted.
- guards (benchmarks/reliability_guards.py): lock races, refused starts that leave every file as it was,
  values and files that cannot work, read-only and full filesystems, one final answer.
- writers (benchmarks/reliability_writers.py): what writes, loads and is accepted, through the commands a
  user types, each with its outcome: report folders holding the user's files or runs, resume=never on a
  folder that is no run, evaluate's values and broken checkpoints, planted pickles and custom model code,
  keys nothing reads, task files, bounds, near misses, report selections, a sweep whose worker is killed.
- owners (benchmarks/reliability_owners.py): what a run owns and what the commands accept, through the commands a
  user types, each with its outcome: a fresh run into a folder of the user's files, pruning beside the user's
  file, training and ingest runs written into each other's folders, an ingest again beside the user's files, a
  linked .lock, impossible tables and sweeps given to the report, hostile tool logs and destinations given to the
  ingest, keys nothing reads, task files whose ids or spacing once misled.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import reliability_guards as guards  # noqa: E402 - beside this file
import reliability_owners as owners  # noqa: E402
import reliability_writers as writers  # noqa: E402
from reliability_outcomes import tally  # noqa: E402

from grpo_lab.run.tables import varying_columns  # noqa: E402

# A small run: 8 steps, parts every step, checkpoints every 2, evaluation at 0, 4 and 8.
CONFIG = dict(max_steps=8, prompts_per_step=6, checkpoint_every=2, threads=1,
              task=dict(levels=[1, 3, 4], train_per_level=8, eval_per_level=4),
              sampler=dict(group_size=4), eval=dict(n=4, every=4))

# The training child: a real run; with --hooks it announces each part and checkpoint write half-way
# (the temporary written, not yet renamed) and pauses there, so the parent's SIGKILL lands inside it.
CHILD = r'''
import json, sys, time
cfg_json, out_dir, mode = sys.argv[1], sys.argv[2], sys.argv[3]
hooks = mode in ("hooks", "hold")
from grpo_lab.config import TrainConfig, AlgoConfig, SamplerConfig, TaskConfig, EvalConfig
from grpo_lab.train.trainer import train
if hooks:
    import grpo_lab.run.checkpoints as checkpoints
    import grpo_lab.run.tables as tables
    write_table, save = tables.pq.write_table, checkpoints.torch.save
    def announce(what):
        print("EVENT", what, flush=True)
        time.sleep(0.3 if mode == "hooks" else 3600)  # hold: stay alive, holding the lock, until killed
    def write_part(table, path, *a, **k):
        write_table(table, path, *a, **k)
        announce("part")
    def save_state(obj, path, *a, **k):
        announce("checkpoint")  # the model folder is written, state.pt not yet
        save(obj, path, *a, **k)
    tables.pq.write_table = write_part
    checkpoints.torch.save = save_state
spec = json.loads(cfg_json)
parts = {"task": TaskConfig, "sampler": SamplerConfig, "eval": EvalConfig, "algo": AlgoConfig}
cfg = TrainConfig(out_dir=out_dir, **{k: (parts[k](**v) if k in parts else v) for k, v in spec.items()})
train(cfg)
print("DONE", flush=True)
'''


def child(cfg: dict, out_dir: Path, mode: str) -> subprocess.Popen:
    """A training process on `out_dir`; mode: plain, hooks (pause briefly at writes), hold (stop at the first)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(cfg), str(out_dir), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def overrides(cfg: dict, prefix: str = "") -> list[str]:
    """A config dict as the command line's overrides: {"task": {"levels": [1, 3]}} -> ["task.levels=[1,3]"]."""
    out = []
    for key, value in cfg.items():
        if isinstance(value, dict):
            out += overrides(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value).replace(' ', '')}")
    return out


def run_to_end(cfg: dict, out_dir: Path) -> subprocess.CompletedProcess:
    p = child(cfg, out_dir, "plain")
    out, err = p.communicate(timeout=900)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def kill_at(cfg: dict, out_dir: Path, event: str | None, nth: int, after_s: float) -> str:
    """Start a hooked run and SIGKILL it at its nth `event` (or after `after_s` seconds when event is
    None). Returns where it died ("part #3", "checkpoint #1", "t=4.1s", or "finished first")."""
    p = child(cfg, out_dir, "hooks")
    start, seen = time.monotonic(), 0
    if event is None:
        try:
            p.wait(timeout=after_s)
            return "finished first"
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            return f"t={time.monotonic() - start:.1f}s"
    for line in p.stdout:
        if line.strip() == f"EVENT {event}":
            seen += 1
            if seen == nth:
                p.send_signal(signal.SIGKILL)
                p.wait()
                return f"{event} #{nth}"
    p.wait()
    return "finished first"


def tables_of(run: Path) -> dict[str, list[dict]]:
    """Every table's rows without what may differ between equal runs (run_id, wall-clock timings)."""
    out = {}
    for name in ("groups", "steps", "eval"):
        files = sorted((run / name).glob("part-*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else pa.table({})
        out[name] = table.drop_columns(varying_columns(table.column_names)).to_pylist()
    return out


def kill_trials(work: Path, n: int, rng: random.Random) -> list[tuple[str, bool, str]]:
    reference = work / "reference"
    done = run_to_end(CONFIG, reference)
    assert done.returncode == 0, done.stderr[-3000:]
    expected = tables_of(reference)
    plans = ["part", "checkpoint", None]  # None: a random moment
    results = []
    for i in range(n):
        run = work / f"kill-{i}"
        kills = 2 if i % 4 == 3 else 1  # every fourth trial is killed twice before it may finish
        where = []
        for _ in range(kills):
            event = plans[i % 3] if _ == 0 else rng.choice(plans)
            nth = rng.randint(1, 6 if event == "part" else 2)
            where.append(kill_at(CONFIG, run, event, nth, after_s=rng.uniform(4.0, 20.0)))
        resumed = run_to_end(CONFIG, run)
        ok = resumed.returncode == 0 and tables_of(run) == expected
        ok = ok and json.loads((run / "run.json").read_text())["status"] == "done"
        ok = ok and not list(run.glob("**/.*.tmp"))
        note = "killed at " + ", ".join(where) + ("" if ok else f"; rc={resumed.returncode} {resumed.stderr[-300:]}")
        results.append((f"kill -9 #{i + 1}", ok, note))
        print(f"  kill trial {i + 1}: {'pass' if ok else 'FAIL'} ({note})", flush=True)
    return results


def duplicate_and_changed(work: Path) -> list[tuple[str, bool, str]]:
    results = []
    run = work / "duplicate"
    first = child(CONFIG, run, "hold")  # stops at its first write: alive and holding the lock
    for line in first.stdout:
        if line.startswith("EVENT"):
            break
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # the same config as the holder's, so that the command's config check passes and the lock is what refuses
    second = subprocess.run([sys.executable, "-m", "experiments.train", *overrides(CONFIG), f"hydra.run.dir={run}"],
                            capture_output=True, text=True, cwd=ROOT, env=env)
    lines = [ln for ln in second.stderr.strip().splitlines() if not ln.startswith("[")]  # progress log lines aside
    ok = second.returncode != 0 and len(lines) == 1 and f"being written by pid {first.pid}" in lines[0]
    first.send_signal(signal.SIGKILL)
    first.wait()
    results.append(("duplicate start refused", ok, lines[-1][:160] if lines else "no message"))

    reference = work / "reference"
    before = tables_of(reference)
    changed = {**CONFIG, "seed": 4, "sampler": {"group_size": 8}}
    out = run_to_end(changed, reference)
    last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    ok = (out.returncode != 0 and "ConfigMismatch" in last and "sampler.group_size 4 -> 8" in last
          and "seed 0 -> 4" in last and tables_of(reference) == before)
    results.append(("changed config refused", ok, last[:200]))
    return results


def analysis_trials(work: Path) -> list[tuple[str, bool, str]]:
    from fixtures.synthetic import job_config, prompt_pool, write_sweep

    configs = [job_config("fixed" if i % 2 == 0 else "resample_on_tie", seed=i, max_steps=5, prompts_per_step=4)
               for i in range(10)]
    prompts = prompt_pool(per_level=4)
    sweep = write_sweep(work / "sweep", configs, prompts, eval_prompts=prompts, eval_n=4)

    def rewrite(path: Path, change) -> None:
        pq.write_table(change(pq.read_table(path)), path)

    def put(table: pa.Table, column: str, values) -> pa.Table:
        return table.set_column(table.column_names.index(column), column, values)

    corruptions = {  # job: (what breaks, how, the name the report must give)
        "1": ("run.json is a JSON list", lambda r: (r / "run.json").write_text("[]"), "1"),
        "2": ("no .hydra config", lambda r: shutil.rmtree(r / ".hydra"), "2"),
        "3": ("groups part lacks `tie`",
              lambda r: rewrite(r / "groups/part-000002.parquet", lambda t: t.drop_columns(["tie"])),
              "3/groups/part-000002.parquet"),
        "4": ("null `tie`", lambda r: rewrite(r / "groups/part-000001.parquet",
                                              lambda t: put(t, "tie", pa.nulls(t.num_rows, pa.bool_()))),
              "4/groups/part-000001.parquet"),
        "5": ("`step` as text", lambda r: rewrite(r / "groups/part-000003.parquet",
                                                  lambda t: put(t, "step", pc.cast(t["step"], pa.string()))),
              "5/groups/part-000003.parquet"),
        "6": ("NaN rewards", lambda r: rewrite(r / "groups/part-000001.parquet", lambda t: put(
            t, "reward_mean", pa.array([float("nan")] * t.num_rows, pa.float32()))), "6/groups/part-000001.parquet"),
        "7": ("eval part lacks `correct`",
              lambda r: rewrite(r / "eval/part-000000.parquet", lambda t: t.drop_columns(["correct"])),
              "7/eval/part-000000.parquet"),
        "8": ("garbage bytes in a part", lambda r: (r / "groups/part-000004.parquet").write_bytes(b"PAR1 no"),
              "8/groups/part-000004.parquet"),
    }
    for job, (_, corrupt, _) in corruptions.items():
        corrupt(sweep / job)
    out = subprocess.run([sys.executable, "-m", "analysis", str(sweep)], capture_output=True, text=True, cwd=ROOT)
    report = sweep / "report"  # the Jobs section, which names what was skipped, is on the second page
    text = "".join((report / page).read_text() for page in ("REPORT.md", "DETAILS.md") if (report / page).exists())
    results = []
    for what, _, name in corruptions.values():
        results.append((f"analysis: {what}", out.returncode == 0 and f"`{name}`" in text,
                        f"named as `{name}`" if out.returncode == 0 else f"exit {out.returncode}: {out.stderr[-150:]}"))
    good = ["0", "3", "4", "5", "6", "7", "8", "9"]  # bad parts go, their jobs stay
    listed = all(f"| {j} |" in text for j in good)
    results.append(("analysis: report for the good jobs", out.returncode == 0 and listed, f"jobs {', '.join(good)}"))
    (work / "empty").mkdir()
    for folder in ("missing", "empty"):
        out = subprocess.run([sys.executable, "-m", "analysis", str(work / folder)], capture_output=True, text=True,
                             cwd=ROOT)
        lines = out.stderr.strip().splitlines()
        results.append((f"analysis: {folder} folder", out.returncode != 0 and len(lines) == 1, lines[0][:120]))
    return results


def reward_trials(rng: random.Random, n: int) -> list[tuple[str, bool, str]]:
    from grpo_lab.rewards.rules import RewardWeights, score
    from grpo_lab.rewards.scorer import Scorer

    w = RewardWeights()
    accepted, errors, total = 0, 0, 0
    alphabet = "0123456789+-.,e eE/\n\t\x00٤٦abc{}\\^!()"
    for _ in range(n):
        gold = rng.randint(-10**6, 10**6)
        misses = [f"{gold}.5", f"{gold}e3", f"{gold}abc", f"{gold},000", f"{gold} no wait {gold + 1}",
                  f"{gold}\n{gold + 1}", f"{gold}/1", f"{gold}.0", f"{gold + rng.choice([-1, 1])}",
                  f"{gold}" + rng.choice(alphabet), rng.choice(alphabet) + f"{gold}" + rng.choice(alphabet[10:]),
                  "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))]
        for m in misses:
            total += 1
            try:
                s = score(m, True, str(gold), "integer", w)
            except Exception:  # noqa: BLE001 - counted: there must be none
                errors += 1
                continue
            stripped = m.strip()
            body = stripped[1:] if stripped[:1] in ("+", "-") else stripped
            really = body != "" and all(c in "0123456789" for c in body) and int(stripped) == gold
            accepted += s.correct and not really
    results = [("rewards: integer near misses", accepted == 0 and errors == 0,
                f"{total} completions, {accepted} wrongly rewarded, {errors} exceptions")]

    golds = [r"\frac{1}{2}", "0.25", r"\frac{\sqrt{2}}{2}", "3"]
    near = {r"\frac{1}{2}": ["0.50000001", "0.4999999", r"\frac{1}{2}+10^{-9}", r"\frac{1}{3}", "0.51", "1/2.000001"],
            "0.25": ["0.2500001", "0.249999", r"\frac{1}{4}+10^{-12}"],
            r"\frac{\sqrt{2}}{2}": ["0.70710678", "0.7071067811865", r"\frac{\sqrt{2}}{2.0000001}"],
            "3": ["3.0000001", "2.9999999", r"3+10^{-20}", "30"]}
    hostile = [r"\boxed{10^{10^{10}}}", r"\boxed{(10^{100})!}", r"\boxed{" + "{" * 150 + "}" * 150 + "}",
               "\\boxed{\x00}", r"\boxed{__import__('os').system('true')}"]
    # towers of distinct bases: each would take hours, none is pre-filtered; together past the budget
    towers = [rf"\boxed{{(({900 + k}^{{999}})^{{999}})^{{999}}}}" for k in range(40)]
    with Scorer(workers=2, answer_timeout_s=1.0, step_budget_s=5.0) as scorer:
        comps = [rf"\boxed{{{m}}}" for g in golds for m in near[g]]
        out = scorer.score_all(comps, [True] * len(comps), [g for g in golds for _ in near[g]], "latex", w)
        wrong = sum(s.correct for s in out)
        results.append(("rewards: LaTeX near misses", wrong == 0, f"{len(comps)} near misses, {wrong} rewarded"))
        batch = [r"\boxed{\frac{2}{4}}"] * 8 + hostile * 40 + towers  # right answers queued first
        start = time.monotonic()
        out = scorer.score_all(batch, [True] * len(batch), [r"\frac{1}{2}"] * len(batch), "latex", w)
        took = time.monotonic() - start
        timeouts = sum(s.timed_out for s in out)
        ok = (took < scorer.step_budget_s + 2 and all(s.correct for s in out[:8]) and not any(
            s.correct for s in out[8:]) and timeouts >= 1)
        results.append(("rewards: hostile batch within budget", ok,
                        f"{len(batch)} completions in {took:.1f} s (budget {scorer.step_budget_s:.0f} s), "
                        f"{timeouts} timed out, right answers kept"))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=12, help="kill trials (>= 10 recommended)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill moments and the generated text")
    parser.add_argument("--fuzz", type=int, default=2000, help="golds for the integer near-miss trial (12 each)")
    parser.add_argument("--lock-rounds", type=int, default=3, help="races of 60 starts per kind of lock left behind")
    parser.add_argument("--answers", type=int, default=2000, help="generated near misses and right answers, each")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--only-guards", action="store_true", help="run the guards' trials only")
    only.add_argument("--only-writers", action="store_true", help="run the writers' trials only")
    only.add_argument("--only-owners", action="store_true", help="run the owners' trials only")
    parser.add_argument("--no-locks", action="store_true", help="leave out the lock races and churn (the longest "
                        "guards' trials: about 20 min on 2 busy cores)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="grpo-reliability-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        if not (args.only_guards or args.only_writers or args.only_owners):
            results += kill_trials(work, args.kills, rng)
            results += duplicate_and_changed(work)
            results += analysis_trials(work)
            results += reward_trials(rng, args.fuzz)
        for folder in ("locks", "refused", "inputs", "disks", "writers", "owners"):  # each trial writes inside its own
            (work / folder).mkdir()
        trials = [("refused starts", lambda: guards.refused_start_trials(work / "refused")),
                  ("inputs", lambda: guards.input_trials(work / "inputs")),
                  ("disks", lambda: guards.disk_trials(work / "disks")),
                  ("answers", lambda: guards.answer_trials(rng, args.answers))]
        if not args.no_locks:
            trials.insert(0, ("locks", lambda: guards.lock_trials(work / "locks", args.lock_rounds)))
        if args.only_writers or args.only_owners:
            trials = []
        if not (args.only_guards or args.only_owners):
            trials.append(("writers", lambda: writers.writer_trials(work / "writers")))
        if not (args.only_guards or args.only_writers):
            trials.append(("owners", lambda: owners.owner_trials(work / "owners")))
        for name, run in trials:  # a trial group that raises is one failed trial, never the end of the others
            try:
                results += run()
            except Exception as err:  # noqa: BLE001
                results.append((f"{name}: raised", False, f"{type(err).__name__}: {err}"[:200]))
        took = time.monotonic() - t0
    print("\n| trial | pass | detail |\n|---|---|---|")
    for name, ok, note, *_ in results:  # a trial that reports its outcome: (name, passed, detail, outcome)
        print(f"| {name} | {'yes' if ok else '**no**'} | {note.replace('|', '/')} |")
    passed = sum(row[1] for row in results)
    print(f"\n{passed} of {len(results)} trials passed in {took:.0f} s")
    outcomes = [row[3] for row in results if len(row) > 3]
    if outcomes:
        print(tally(outcomes))
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
