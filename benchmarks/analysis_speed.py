"""How the report's cost grows with the sweep, against bare parquet reads of the same files.

    OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/analysis_speed.py [--dir DIR] [--sizes 1 4 16]

The sweep is synthetic (fixtures.synthetic): 4 samplers x 2 seeds, G = 8, 50 steps of 640 prompts,
one groups part per step, eval at 2 checkpoints on 160 prompts with 32 samples each: about 370k
groups and 3M sample rewards (size 1). Size s is the same sweep run s times as long: each job's
steps repeated s times, steps and running totals shifted, its final evaluation at the new last
step (groups, steps and parts grow s-fold; the eval rows stay). Size 4 is the 1.5M-group sweep
this benchmark used to time alone; size 16 (6M groups) is as large as fits beside other work in
24 GiB (the report's peak grows about 0.45 GiB per million groups). Sweeps are written to a
temporary folder, or to --dir (kept, and reused when there).

Each size is timed in fresh processes, in turns: the bare read (`pq.read_table` of every groups
and eval folder, all columns, to arrow), `build_report` as it runs by default (with a second process,
`analysis/scheduler.py`, where two cores are usable) and `build_report` in one process
(GRPO_LAB_REPORT_PROCESSES=1), `--repeats` times each; each round's ratio to its own read counts, median
(min-max) over rounds, on the wall clock (the goal: until `build_report` returns, the report in place) and
in CPU seconds (all threads and the second process, waited for after the clock stops; a fairer view on a
machine other processes share). The machine's CPU, its vector units and the load while timed are printed
with the table (benchmarks/protocol.py).
The goal: a report within `--goal` times the bare read (3 by default) at the `--reference`
size (4, the 1.5M-group sweep the issue timed), and no worse at the larger sizes (within 10%, the
spread between runs); the script exits 1, printing the ratios, when either is missed. Smaller sizes are
shown, not held to it: their read is a second or so and the report's fixed costs (the second process's
start, the figures) weigh most there. Peak resident memory is each process's own (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from protocol import Load, machine, spread  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

STEPS = 50
PROMPTS_PER_STEP = 640  # with resample_on_tie's redraws: about 370k groups of 8, 3M rewards


def make_sweep(root: Path, steps: int = STEPS, prompts_per_step: int = PROMPTS_PER_STEP, per_level: int = 400,
               eval_per_level: int = 32) -> None:
    from fixtures.synthetic import SAMPLERS, job_config, prompt_pool, write_sweep

    prompts = prompt_pool(per_level=per_level)
    eval_prompts = prompt_pool(per_level=eval_per_level, seed=1)
    configs = [job_config(sampler=s, seed=seed, max_steps=steps, prompts_per_step=prompts_per_step)
               for s in SAMPLERS for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=[f"sampler={','.join(SAMPLERS)}", "seed=0,1"],
                eval_prompts=eval_prompts, eval_n=32)


def repeat_sweep(source: Path, target: Path, times: int) -> None:
    """`source` run `times` times as long: every job's groups and steps parts repeated with the steps
    and the running totals (samples_total, tokens_total) shifted by the job's own; its last eval
    part moved to the new last step."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    def shifted(table: pa.Table, steps: int, samples: int, tokens: int) -> pa.Table:
        for name, by in (("step", steps), ("samples_total", samples), ("tokens_total", tokens)):
            if name in table.column_names and by:
                i = table.column_names.index(name)
                table = table.set_column(i, name, pc.add(table[name], pa.scalar(by, table.schema.field(name).type)))
        return table

    target.mkdir(parents=True)
    shutil.copy(source / "multirun.yaml", target / "multirun.yaml")
    for job in sorted(p for p in source.iterdir() if p.is_dir()):
        out = target / job.name
        shutil.copytree(job / ".hydra", out / ".hydra")
        shutil.copy(job / "run.json", out / "run.json")
        steps = pq.read_table(job / "steps", columns=["step", "samples_total", "tokens_total"])
        last, samples, tokens = (int(pc.max(steps[c]).as_py()) for c in ("step", "samples_total", "tokens_total"))
        for table in ("groups", "steps"):
            (out / table).mkdir()
            for part in sorted((job / table).glob("part-*.parquet")):
                rows = pq.read_table(part)
                for r in range(times):
                    step = int(part.stem.split("-")[1]) + r * last
                    pq.write_table(shifted(rows, r * last, r * samples, r * tokens),
                                   out / table / f"part-{step:06d}.parquet")
        (out / "eval").mkdir()
        for part in sorted((job / "eval").glob("part-*.parquet")):
            step = int(part.stem.split("-")[1])
            if step == last:  # the final checkpoint: at the end of the longer run
                rows = shifted(pq.read_table(part), (times - 1) * last, (times - 1) * samples, 0)
                pq.write_table(rows, out / "eval" / f"part-{step + (times - 1) * last:06d}.parquet")
            else:
                shutil.copy(part, out / "eval" / part.name)


def child(kind: str, root: Path) -> None:
    """Time one contender in this process and print {"seconds", "cpu", "peak_mib"} as JSON (cpu: this
    process's CPU seconds, every thread's, and its finished children's (the report's second process); on a
    shared machine less disturbed than the wall clock). "report1": the report in one process
    (GRPO_LAB_REPORT_PROCESSES=1: one reading thread, no second process)."""
    import multiprocessing
    import resource
    import warnings

    def cpu_now() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    warnings.simplefilter("ignore")  # a skipped part would be a warning; none is expected here
    if kind == "read":
        import pyarrow.parquet as pq

        folders = sorted(p for p in root.glob("*/*") if p.name in ("groups", "eval"))
        start, cpu = time.perf_counter(), cpu_now()
        tables = [pq.read_table(f) for f in folders]
        seconds, cpu = time.perf_counter() - start, cpu_now() - cpu
        del tables
    else:
        if kind == "report1":
            os.environ["GRPO_LAB_REPORT_PROCESSES"] = "1"
        from analysis.report import build_report

        with tempfile.TemporaryDirectory() as out:
            start, cpu = time.perf_counter(), cpu_now()
            build_report(root, out)
            seconds = time.perf_counter() - start
            while multiprocessing.active_children():  # the second process exits unwaited: its CPU counts too
                time.sleep(0.02)
            cpu = cpu_now() - cpu
    status = Path("/proc/self/status").read_text() if Path("/proc/self/status").exists() else ""
    peak = next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")),
                float("nan"))
    print(json.dumps({"seconds": seconds, "cpu": cpu, "peak_mib": peak}))


def run_child(kind: str, root: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(root)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def sweep_stats(root: Path) -> tuple[int, int]:
    """(groups, parts) of a sweep: rows of every groups table, and parquet files in all tables."""
    import pyarrow.parquet as pq

    parts = sorted(root.glob("*/*/part-*.parquet"))
    groups = sum(pq.ParquetFile(p).metadata.num_rows for p in parts if p.parent.name == "groups")
    return groups, len(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, help="keep the sweeps here (reused when they exist)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="multiples of the base sweep")
    parser.add_argument("--repeats", type=int, default=2, help="timings of each contender at each size")
    parser.add_argument("--goal", type=float, default=3.0, help="most report seconds per bare-read second")
    parser.add_argument("--reference", type=int, default=4, help="the size the goal is held at (and above)")
    parser.add_argument("--smoke", action="store_true", help="a tiny base sweep (2 x 2 jobs, 6 steps of 8 prompts)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = (args.dir or Path(tmp)) / ("smoke" if args.smoke else "sweep")
        if not (base / "x1" / "multirun.yaml").exists():
            start = time.perf_counter()
            if args.smoke:
                make_sweep(base / "x1", steps=6, prompts_per_step=8, per_level=4, eval_per_level=2)
            else:
                make_sweep(base / "x1")
            print(f"wrote the base sweep in {time.perf_counter() - start:.0f} s", flush=True)
        for size in args.sizes:
            if not (base / f"x{size}" / "multirun.yaml").exists():
                repeat_sweep(base / "x1", base / f"x{size}", size)
        print(machine(), flush=True)
        print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; {args.repeats} rounds of read, report (two "
              "processes where two cores are usable) and report in one process, in turns; ratios per round, "
              "median (min-max)")
        print(f"{'size':>4} {'groups':>11} {'parts':>7} {'read s':>7} {'report s':>9} {'ratio':>16} "
              f"{'1-process s':>12} {'ratio':>16} {'cpu ratio':>16} {'read MiB':>9} {'report MiB':>11}")
        ratios: dict[int, float] = {}
        with Load() as load:
            for size in args.sizes:
                root = base / f"x{size}"
                groups, parts = sweep_stats(root)
                read, report, single = [], [], []
                for _ in range(args.repeats):  # in turns, so a busy spell on the machine hits all three
                    read.append(run_child("read", root))
                    report.append(run_child("report", root))
                    single.append(run_child("report1", root))
                    load.look()
                wall = [b["seconds"] / r["seconds"] for r, b in zip(read, report)]
                one = [b["seconds"] / r["seconds"] for r, b in zip(read, single)]
                cpu = [b["cpu"] / r["cpu"] for r, b in zip(read, report)]
                median = statistics.median
                print(f"{size:>4} {groups:>11,} {parts:>7,} {median(x['seconds'] for x in read):>7.2f} "
                      f"{median(x['seconds'] for x in report):>9.2f} {spread(wall):>16} "
                      f"{median(x['seconds'] for x in single):>12.2f} {spread(one):>16} {spread(cpu):>16} "
                      f"{max(x['peak_mib'] for x in read):>9.0f} {max(x['peak_mib'] for x in report):>11.0f}",
                      flush=True)
                ratios[size] = median(wall)
        print(load)
        missed = goal_missed(ratios, args.goal, args.reference)
        if missed:
            print("goal missed: " + "; ".join(missed))
            return 1
        print(f"goal met: the report within {args.goal:g}x the bare read at size {args.reference}, "
              "and no worse above it")
        return 0


def goal_missed(ratios: dict[int, float], goal: float, reference: int, spread: float = 1.1) -> list[str]:
    """Why the ratios (size: report / read) miss the goal: more than `goal` at the `reference` size, or a
    larger size more than `spread` times the reference's ratio (worse as the sweep grows). [] when met;
    a reference size not timed is a miss (the goal would be checked nowhere)."""
    if reference not in ratios:
        return [f"size {reference} was not timed (--sizes): the goal is held there"]
    missed = [f"size {reference}: report / read = {ratios[reference]:.2f} > {goal:g}"] \
        if ratios[reference] > goal else []
    missed += [f"size {size}: report / read = {ratio:.2f}, worse than {ratios[reference]:.2f} at size {reference}"
               for size, ratio in sorted(ratios.items()) if size > reference and ratio > spread * ratios[reference]]
    return missed


if __name__ == "__main__":
    sys.exit(main())
