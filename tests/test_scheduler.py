"""The report's second process (analysis/scheduler.py): the report is the same, byte for byte, as the one built
in one process, with a forked worker or a spawned one; a figure that fails fails the build; a worker that dies
leaves its work to the build; a script without a main guard builds once; a computation's figures drawn with it
in the worker are moved into place, never drawn again."""

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from analysis import load, scheduler
from analysis.data.cores import PROCESSES, processes
from analysis.measures.health import health_curves
from analysis.parts import held_out_sections
from analysis.render import curves
from analysis.render.canvas import styled
from analysis.render.curves import health
from analysis.render.writer import Files
from analysis.report import build_report
from analysis.scheduler import Helper
from analysis.sections.section import Section
from fixtures.synthetic import job_config, prompt_pool, write_sweep


def sweep(root):
    prompts = prompt_pool(per_level=6)
    configs = [job_config(sampler, seed=seed, max_steps=12, prompts_per_step=10)
               for sampler in ("fixed", "resample_on_tie") for seed in (0, 1)]
    write_sweep(root, configs, prompts, overrides=["sampler=fixed,resample_on_tie", "seed=0,1"],
                eval_prompts=prompts, eval_n=8, eval_every=6)
    return root


def files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_report_drawn_in_two_processes_is_the_one_drawn_in_one(tmp_path, monkeypatch):
    root = sweep(tmp_path / "sweep")
    built = {}
    for n in ("1", "2"):  # a worker is spawned for "2" on any machine
        monkeypatch.setenv(PROCESSES, n)
        assert processes() == int(n)
        built[n] = files(build_report(root, tmp_path / f"report-{n}").parent)
    assert sum(name.endswith(".png") for name in built["1"]) >= 5  # the figures of a sweep with eval and ties
    assert built["2"] == built["1"]


def test_a_figure_that_fails_in_the_second_process_raises_in_the_build(tmp_path, monkeypatch):
    worker = Helper(tmp_path)
    try:
        worker.start("health", partial(curves.health, "not a table"))
        with pytest.raises(Exception, match="str"):  # the worker's own error, carried back
            worker.started["health"].result(timeout=120)
        with pytest.raises(Exception, match="str"):  # and the build's finish raises it
            worker.finish({"health": partial(curves.health, "not a table")})
    finally:
        worker.close(wait=True)
    monkeypatch.setenv(PROCESSES, "two")
    with pytest.raises(ValueError, match=f"^{PROCESSES}='two': expected a whole number"):
        processes()


def _run_script(folder, text):
    """`text` run as a script (`folder`/script.py) in a fresh Python: two report processes allowed, this
    checkout on its path."""
    script = folder / "script.py"
    script.write_text(textwrap.dedent(text))
    env = {**os.environ, PROCESSES: "2", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                          os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)


def test_a_script_without_a_main_guard_builds_its_report_once(tmp_path):
    """spawn runs the caller's `__main__` again in the worker unless the worker is started without it: a
    plain script calling build_report would start a second build there (and fail, a traceback on stderr). The
    script runs a second Python thread, so its worker is spawned (`start_method`), not forked."""
    root = sweep(tmp_path / "sweep")
    done = _run_script(tmp_path, f"""
        import threading, time
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        from analysis.report import build_report
        print('built', build_report({str(root)!r}, {str(tmp_path / 'report')!r}))
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("built") == 1
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr[-3000:]
    assert len(list((tmp_path / "report" / "figures").glob("*.png"))) >= 5


def test_a_worker_is_forked_where_no_other_python_thread_runs_and_builds_the_same_report(tmp_path, monkeypatch):
    """On Linux a process whose only Python thread is the caller's forks its worker (no imports to repeat); one
    running another Python thread spawns it (a fork would copy that thread's locks held). The forked worker's
    report is byte for byte the one built in one process."""
    root = sweep(tmp_path / "sweep")
    done = _run_script(tmp_path, f"""
        import threading, time
        from analysis import scheduler
        from analysis.report import build_report
        used = []
        made = scheduler.Helper.__init__
        def spy(self, folder, warm=()):
            made(self, folder, warm)
            used.append(self.method)
        scheduler.Helper.__init__ = spy
        build_report({str(root)!r}, {str(tmp_path / 'forked')!r})
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        print(*used, scheduler.start_method())
        """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == (["fork", "spawn"] if sys.platform.startswith("linux") else ["spawn", "spawn"])
    monkeypatch.setenv(PROCESSES, "1")
    assert files(tmp_path / "forked") == files(build_report(root, tmp_path / "alone").parent)


@styled
def _marked(log, path):
    """A figure for the tests below: says which process drew it."""
    return _mark(log, 0, path)


def _section_with_a_figure(log):
    """A computation whose value holds a figure (what `parts.held_out_sections` returns, in small)."""
    found = Files()
    return Section(text=found.figure("marked", _marked, log), files=found)


def _files_of(section):
    return [section.files]


def test_a_computation_s_figures_are_drawn_with_it_in_the_worker_and_moved_into_place(tmp_path, monkeypatch):
    """`begin(..., figures=)`: the worker draws the value's figures before it hands the value back; `hand_over`
    moves them into the report's figures and `finish` does not draw them again."""
    log, folder = tmp_path / "log", tmp_path / "figures"
    monkeypatch.setenv(PROCESSES, "2")
    with scheduler.helping(folder) as worker:
        later = scheduler.begin(_section_with_a_figure, str(log), figures=_files_of)
        section = later()
        assert later.drawn is not None and (later.drawn / "marked.png").is_file()  # drawn before the value came
        scheduler.hand_over(_files_of(section), of=later)
        worker.finish(section.files.figures)
        claims = worker.claims
    drawn = _drawn(log)
    assert [name for _, name in drawn] == ["marked"] and drawn[0][0] != str(os.getpid())  # once, in the worker
    assert sorted(p.name for p in folder.iterdir()) == ["marked.png"] \
        and (folder / "marked.png").read_text() == "marked"
    assert not claims.exists()  # the worker's own folder went with the claims


def test_a_computation_a_dead_worker_never_made_is_made_and_drawn_here(tmp_path, monkeypatch):
    log, folder = tmp_path / "log", tmp_path / "figures"
    monkeypatch.setenv(PROCESSES, "2")
    for left in multiprocessing.active_children():  # an earlier test's worker, exiting on its own
        left.join(60)
    with scheduler.helping(folder) as worker:
        (child,) = multiprocessing.active_children()
        os.kill(child.pid, signal.SIGKILL)
        child.join(60)
        later = scheduler.begin(_section_with_a_figure, str(log), figures=_files_of)
        section = later()
        assert later.drawn is None  # made here: its figure is not drawn yet
        scheduler.hand_over(_files_of(section), of=later)
        worker.finish(section.files.figures)
    assert _drawn(log) == [[str(os.getpid()), "marked"]]
    assert (folder / "marked.png").read_text() == "marked"


def test_the_figures_of_a_worker_that_died_are_drawn_in_the_build(tmp_path):
    curves = health_curves(load(sweep(tmp_path / "sweep")).steps, ["sampler"])
    worker = Helper(tmp_path / "figures")
    try:
        (child,) = multiprocessing.active_children()
        os.kill(child.pid, signal.SIGKILL)
        child.join(60)
        draw = partial(health, curves)
        worker.start("health", draw)  # handed to a dead worker (or refused at once: the pool knows it is broken)
        worker.finish({"health": draw, "never_handed": draw})
        assert worker.begin(sum, [1, 2])() == 3  # a computation handed to a dead worker is made here
    finally:
        worker.close(wait=True)
    assert sorted(p.name for p in (tmp_path / "figures").glob("*.png")) == ["health.png", "never_handed.png"]


def test_two_builds_at_once_in_two_threads_each_use_their_own_second_process(tmp_path, monkeypatch):
    """Each build's figures go to its own worker and folder (the helper is per thread), and `__main__`,
    swapped while a worker spawns, is the real one after both."""
    monkeypatch.setenv(PROCESSES, "2")
    root = sweep(tmp_path / "sweep")
    alone = files(build_report(root, tmp_path / "alone").parent)
    main = sys.modules["__main__"]
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda name: files(build_report(root, tmp_path / name).parent), ("a", "b")))
    assert built == [alone, alone]
    assert sys.modules["__main__"] is main


def test_a_figure_must_be_styled_to_be_recorded():
    """An unstyled figure draws in whatever fonts its process has (at_k once drew in matplotlib's defaults,
    and in another figure's mid-way when two reports were built at once): Files refuses it."""
    from analysis.render.writer import Files

    def plain(data, path):
        return path

    with pytest.raises(TypeError, match="figure x: .*plain is not @styled"):
        Files().figure("x", plain, None)
    assert Files().figure("health", health, None) == "![health](figures/health.png)"


def _build_in_a_pool_worker(root, out):
    os.environ[PROCESSES] = "2"  # asked for, but a daemonic process may not start one
    return processes(), str(build_report(root, out))


def test_a_build_in_a_daemonic_pool_worker_stays_in_its_process(tmp_path):
    root = sweep(tmp_path / "sweep")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        used, report = pool.apply(_build_in_a_pool_worker, (root, tmp_path / "report"))
    assert used == 1 and Path(report).is_file()


def _mark(log, seconds, path):
    """A figure for the tests below: waits `seconds`, then says which process drew `path` and writes it."""
    import time

    time.sleep(seconds)
    with open(log, "a") as out:
        out.write(f"{os.getpid()} {path.stem}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(path.stem)
    return path


def _drawn(log):
    return [line.split() for line in Path(log).read_text().splitlines()]


def test_the_build_takes_back_the_figures_the_worker_has_not_claimed(tmp_path):
    """The worker draws from the front of its queue; `finish` takes back from the end every figure it has not
    claimed, even those already passed to its process (they were once left to it: the build waited ~1 s)."""
    log, worker = tmp_path / "log", Helper(tmp_path / "figures")
    claims = worker.claims
    try:
        worker.start("a", partial(_mark, log, 0))
        worker.started["a"].result(timeout=120)  # the worker is up and has drawn one
        worker.start("b", partial(_mark, log, 3))  # the worker is busy with this one ...
        for name in "cde":
            worker.start(name, partial(_mark, log, 0))
        while not (claims / "b").exists():
            pass
        worker.finish({name: partial(_mark, log, 0) for name in "abcde"})  # ... while the build draws c, d, e
    finally:
        worker.close(wait=True)
    drawn = _drawn(log)
    assert [name for _, name in drawn] == ["a", "e", "d", "c", "b"]  # the build's three before b's 3 s are up
    by = {name: pid for pid, name in drawn}
    assert by["a"] == by["b"] != str(os.getpid()) and by["c"] == by["d"] == by["e"] == str(os.getpid())
    assert not claims.exists()


def test_every_figure_is_drawn_once_however_the_two_processes_race(tmp_path):
    """Many quick figures handed over and taken back at once, the two processes meeting mid-queue: each
    drawn by exactly one of them."""
    log, worker = tmp_path / "log", Helper(tmp_path / "figures")
    names = [f"f{i:02d}" for i in range(40)]
    try:
        worker.start(names[0], partial(_mark, log, 0))
        worker.started[names[0]].result(timeout=120)  # the worker is up: it takes the next at once
        for name in names[1:]:
            worker.start(name, partial(_mark, log, 0.05))
        worker.finish({name: partial(_mark, log, 0.05) for name in names})
    finally:
        worker.close(wait=True)
    drawn = _drawn(log)
    assert sorted(name for _, name in drawn) == names
    assert len({pid for pid, _ in drawn}) == 2  # both drew: the claims were raced for
    assert sorted(p.stem for p in (tmp_path / "figures").glob("*.png")) == names


def _held_out_counted(tables, ctx):
    """`parts.held_out_sections`, saying where it ran and on how many jobs (in the file $HELD_OUT_LOG)."""
    with open(os.environ["HELD_OUT_LOG"], "a") as log:
        log.write(f"{os.getpid()} {len(tables.jobs)}\n")
    return held_out_sections(tables, ctx)


@pytest.mark.parametrize("eval_of_every_job", [True, False])
def test_held_out_sections_begun_while_the_groups_load_are_kept_only_for_the_same_jobs(tmp_path, monkeypatch,
                                                                                        eval_of_every_job):
    """The second process computes the held-out sections from the eval rows (and the steps, for the updates at
    each checkpoint), read before the groups; a job with groups but no eval or steps rows joins the jobs only once
    the groups are read (it may change the arms, the labels): those sections are then computed again, from the
    whole tables. Either way the report is the one built in one process."""
    import shutil
    from dataclasses import replace

    from analysis import parts

    root = sweep(tmp_path / "sweep")
    if not eval_of_every_job:
        shutil.rmtree(root / "3" / "eval")
        shutil.rmtree(root / "3" / "steps")
    monkeypatch.setattr(parts, "PARTS", tuple(replace(p, make=_held_out_counted) if p.name == "held_out" else p
                                             for p in parts.PARTS))
    log = tmp_path / "held_out.log"
    monkeypatch.setenv("HELD_OUT_LOG", str(log))
    monkeypatch.setenv(PROCESSES, "1")
    alone = files(build_report(root, tmp_path / "alone").parent)
    assert log.read_text().split() == [str(os.getpid()), "4"]
    log.unlink()
    monkeypatch.setenv(PROCESSES, "2")
    assert files(build_report(root, tmp_path / "two").parent) == alone
    calls = [line.split() for line in log.read_text().splitlines()]
    assert all(pid != str(os.getpid()) for pid, _ in calls)  # in the second process
    assert [jobs for _, jobs in calls] == (["4"] if eval_of_every_job else ["3", "4"])  # begun early; again if need be


def _pid_after(seconds):
    """A computation for the tests below: waits `seconds`, then says which process made it."""
    import time

    time.sleep(seconds)
    return os.getpid()


def test_a_claimable_computation_is_made_by_whichever_process_claims_it_first(tmp_path):
    """`begin(..., claimable=True)`: taken back (`Later.take`) while the worker is busy before it, it is made
    here and the worker skips it; once the worker has begun it, its value comes from there."""
    log, worker = tmp_path / "log", Helper(tmp_path / "figures")
    try:
        worker.start("slow", partial(_mark, log, 3))  # the worker is busy for 3 s ...
        behind = worker.begin(_pid_after, 0, claimable=True)
        assert behind.take() and behind() == os.getpid()  # ... so this one is made here
        assert behind.future.result(timeout=120) == (False, None)  # and the worker skipped it
        reached = worker.begin(_pid_after, 1, claimable=True)
        while not reached.claim.exists():  # the worker has begun it
            pass
        assert not reached.take() and reached() not in (os.getpid(), None)
    finally:
        worker.close(wait=True)


def test_the_build_draws_the_worker_s_queued_figures_while_it_waits_for_a_value(tmp_path):
    """Waiting for a value the worker is making, the build takes back the figures queued behind it (the last
    first) instead of idling; each is drawn once."""
    log, worker = tmp_path / "log", Helper(tmp_path / "figures")
    try:
        value = worker.begin(_pid_after, 3)
        for name in "abc":
            worker.start(name, partial(_mark, log, 0))
        made_there = value()
        worker.finish({name: partial(_mark, log, 0) for name in "abc"})
    finally:
        worker.close(wait=True)
    assert made_there != os.getpid()
    assert _drawn(log) == [[str(os.getpid()), name] for name in "cba"]  # all three here, while the 3 s ran
