"""Figures drawn in a second process (analysis/render/drawing.py): the report is the same, byte for byte,
as when every figure is drawn in the building process, and a figure that fails fails the build."""

from functools import partial

import pytest

from analysis.render import curves
from analysis.render.drawing import PROCESSES, Drawing, processes
from analysis.report import build_report
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
    for n in ("1", "2"):
        monkeypatch.setenv(PROCESSES, n)
        assert processes() == int(n)
        built[n] = files(build_report(root, tmp_path / f"report-{n}").parent)
    assert sum(name.endswith(".png") for name in built["1"]) >= 5  # the figures of a sweep with eval and ties
    assert built["2"] == built["1"]


def test_a_figure_that_fails_in_the_drawing_process_raises_in_the_build(tmp_path, monkeypatch):
    worker = Drawing(tmp_path)
    try:
        worker.start("health", partial(curves.health, "not a table"))
        with pytest.raises(Exception, match="str"):  # the worker's own error, carried back
            worker.started["health"].result(timeout=120)
        with pytest.raises(Exception, match="str"):  # and the build's finish raises it
            worker.finish({"health": partial(curves.health, "not a table")})
    finally:
        worker.pool.shutdown()
    monkeypatch.setenv(PROCESSES, "two")
    with pytest.raises(ValueError, match=f"^{PROCESSES}='two': expected a whole number"):
        processes()
