"""The report: `REPORT.md` for a run or sweep directory, its figures beside it (`figures/*.png`)
and every table it shows as CSV (`tables/*.csv`), all computed from the run's tables.

This module only assembles: it loads the tables, runs the sections (`analysis.sections`) in the
order their values flow (the comparisons of held-out, what-trained and ties make the tests' family;
the tests feed the ranking; ranking, coverage and ties feed the Findings), and writes them in the
order a reader wants them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from analysis.data.arms import arm_keys
from analysis.data.checkpoints import attach_samples
from analysis.data.completions import read_completions
from analysis.data.config import launch_command
from analysis.data.load import load
from analysis.data.records import difficulty_names
from analysis.measures.tie_learning import split_reused
from analysis.render.writer import clear, write_report
from analysis.sections import (at_k, coverage, equal_budget, examples, findings, group_size, header, health, heldout,
                               jobs, persistence, provenance, ranking, tests, tie_learning, ties, trained)
from analysis.sections.section import Context

# the columns the sections read; the others (the groups' reward lists first) stay on disk
COLUMNS = {
    "groups": ("step", "prompt_id", "difficulty", "round", "group_size", "reward_mean", "n_correct", "tie", "tie_kind",
               "used", "tokens", "samples_total", "tokens_total", "n_informative", "truncated", "reused"),
    "eval": ("step", "prompt_id", "difficulty", "answer", "correct", "samples_total"),
    "steps": ("step", "samples_total", "reward_mean", "kl", "clip_frac", "grad_norm", "tie_frac"),
}


def build_report(path: str | Path, out_dir: str | Path | None = None, command: str | None = None) -> Path:
    """Build the report of a run or sweep directory; returns the path of REPORT.md.

    It goes to `<path>/report/` unless `out_dir` is given. `command` is quoted as the command
    that produced the runs; by default it is rebuilt from Hydra's multirun.yaml or hydra.yaml.
    Jobs and parts that cannot be used are skipped with a warning and named in the report.
    """
    root = Path(path)
    out = Path(out_dir) if out_dir is not None else root / "report"
    clear(out)
    tables = load(root, tables=("groups", "eval", "steps"), columns=COLUMNS)
    if not tables.eval.empty:  # samples drawn at each checkpoint, from the groups where eval rows lack them
        tables = replace(tables, eval=attach_samples(tables.eval, tables.groups))
    ctx = Context(root=root, out=out, arm=tuple(arm_keys(tables.jobs, tables.config_columns)),
                  names=difficulty_names(tables.jobs))
    learning = tie_learning.section(tables, ctx)
    # a replayed group was drawn (and counted) at an earlier step: every other section counts draws only
    tables = replace(tables, groups=split_reused(tables.groups)[0])

    held = heldout.section(tables, ctx)
    what_trained = trained.section(tables, ctx)
    tied = ties.section(tables, ctx)
    family = tests.family([held.comparisons, what_trained.comparisons, tied.comparisons if tied else None])
    ranked = ranking.section(tables, ctx, family, held.scores, what_trained.per_job)
    covered = coverage.section(tables, ctx)
    found = findings.section(family, tied.calibration if tied else {}, what_trained.unit_weight,
                             ranked.sentences if ranked else [], covered.sentence if covered else None)

    sections = [
        header.section(tables, ctx), found, provenance.section(tables, ctx, command or launch_command(root)),
        ranked, held, at_k.section(tables, ctx, held.prompt_scores), covered, what_trained, tests.section(family), tied, learning,
        persistence.section(tables, ctx), group_size.section(tables, ctx),
        equal_budget.section(tables, ctx, what_trained.counted),
        health.section(tables, ctx), examples.section(read_completions(root), ctx), jobs.section(tables),
    ]
    shown = [s for s in sections if s is not None]  # a section is None where its data does not exist
    return write_report(out, [s.text for s in shown], [s.files for s in shown], root)
