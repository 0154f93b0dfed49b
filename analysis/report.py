"""The report: `REPORT.md` for a run or sweep directory, its figures beside it (`figures/*.png`)
and every table it shows as CSV (`tables/*.csv`), all computed from the run's tables.

This module only assembles: it loads the tables, runs the sections (`analysis.sections`) in the
order their values flow (the comparisons of held-out, what-trained and ties make the tests' family;
the tests feed the ranking; ranking, coverage and ties feed the Findings), and writes them in the
order a reader wants them.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis.data.arms import arm_keys, arms_as_text
from analysis.data.checkpoints import attach_samples
from analysis.data.completions import read_completions
from analysis.data.config import launch_command
from analysis.data import select
from analysis.data.load import Tables, load, source_names
from analysis.data.records import difficulty_names
from analysis.measures import equal_steps
from analysis.measures.equal_steps import steps_per_arm
from analysis.measures.spend import budgets_per_arm
from analysis.measures.tie_learning import split_reused
from analysis.render import helper
from analysis.render.paging import move_long_tables
from analysis.render.writer import finish_build, start_build, write_report
from analysis.sections import (at_k, coverage, equal_budget, examples, findings, group_size, header, health, heldout,
                               jobs, persistence, provenance, ranking, tests, tie_learning, ties, trained)
from analysis.sections.section import DETAILS, Context, Section

# the columns the sections read; the others (the groups' reward lists first) stay on disk
COLUMNS = {
    "groups": ("step", "prompt_id", "difficulty", "round", "group_size", "reward_mean", "n_correct", "tie", "tie_kind",
               "used", "tokens", "samples_total", "tokens_total", "n_informative", "truncated", "reused"),
    "eval": ("step", "prompt_id", "difficulty", "answer", "correct", "samples_total"),
    "steps": ("step", "samples_total", "reward_mean", "kl", "clip_frac", "grad_norm", "tie_frac"),
}


def build_report(path: str | Path | Sequence[str | Path], out_dir: str | Path | None = None,
                 command: str | None = None, by: Sequence[str] = (), where: Sequence[str] = (),
                 baseline: str | None = None) -> Path:
    """Build the report of a run or sweep directory, or of several (`path` a list: one report over all
    their jobs, `out_dir` required); returns the path of REPORT.md. `by`, `where`, `baseline`: the arm
    keys, the jobs kept ("KEY=VALUE", all must hold) and the arm differences are taken against
    (`analysis.data.select`; SelectionError, one line, before anything is written).

    It goes to `<path>/report/` unless `out_dir` is given. `command` is quoted as the command
    that produced the runs; by default it is rebuilt from Hydra's multirun.yaml or hydra.yaml.
    Jobs and parts that cannot be used are skipped with a warning and named in the report. The
    report is built in a folder beside `out` and swapped in whole at the end (`finish_build`): a
    build that fails or is killed leaves the report that was there. ReportNotWritable (one line)
    when the folder cannot be written.
    """
    sources = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    if len(sources) > 1 and out_dir is None:
        raise ValueError("several sources: say where the report goes (--out DIR)")
    root = sources[0]
    out = Path(out_dir) if out_dir is not None else root / "report"
    building = start_build(out, root)  # before any work: an unwritable folder is one line at once
    try:
        with helper.helping(building / "figures"):  # a second process computes and draws beside this one
            report = _build(sources, out, building, command, (tuple(by), tuple(where), baseline))
        finish_build(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return out / report.name


def _build(sources: Sequence[Path], out: Path, building: Path, command: str | None,
           choice: tuple[tuple[str, ...], tuple[str, ...], str | None] = ((), (), None)) -> Path:
    """The report of `sources`, as it will read from `out`, written under `building`; `choice`: (by,
    where, baseline), as `build_report` takes them."""
    root = sources[0]
    by, where, baseline = choice
    tables = load(sources if len(sources) > 1 else root, tables=("groups", "eval", "steps"), columns=COLUMNS)
    tables = select.baseline_first(select.keep_jobs(tables, where), baseline)
    select.comparable_sources(tables, by)
    if command is None and len(sources) > 1:
        command = "; ".join(filter(None, (launch_command(s) for s in sources))) or None
    if not tables.eval.empty:  # samples drawn at each checkpoint, from the groups where eval rows lack them
        tables = replace(tables, eval=attach_samples(tables.eval, tables.groups))
    arm = select.arm_keys_given(tables, by) if by else arm_keys(tables.jobs, tables.config_columns)
    pooled = select.pooled_line(tables, select.unaccounted(tables, arm))
    # every arm value a label from here on (null, lists, floats as named): no section can drop or misname one
    tables = replace(tables, **{t: arms_as_text(getattr(tables, t), tables.jobs, arm, tables.own.get(t, ()))
                                for t in ("groups", "eval", "steps")})
    ctx = Context(root=root, out=out, arm=tuple(arm), names=difficulty_names(tables.jobs))
    learning = tie_learning.section(tables, ctx)
    # a replayed group was drawn (and counted) at an earlier step: every other section counts draws only
    tables = replace(tables, groups=split_reused(tables.groups)[0])

    # the held-out sections read only the eval rows: the second process, where there is one, computes them
    # while this one computes those of the groups
    evaluated = helper.begin(held_out_sections, replace(tables, groups=tables.groups.iloc[:0],
                                                        steps=tables.steps.iloc[:0]), ctx)
    what_trained = trained.section(tables, ctx)
    tied = ties.section(tables, ctx)
    dynamics = equal_steps.comparisons(tables.groups, tables.steps, arm) if not tables.groups.empty else None
    persisted, sizes = persistence.section(tables, ctx), group_size.section(tables, ctx)
    budget, healthy = equal_budget.section(tables, ctx, what_trained.counted), health.section(tables, ctx)
    held, covered = evaluated()
    helper.hand_over(section.files for section in (held, covered) if section is not None)
    family = tests.family([held.comparisons, what_trained.comparisons, tied.comparisons if tied else None, dynamics])
    ranked = ranking.section(tables, ctx, family, held.scores, what_trained.per_job)
    budgets = budgets_per_arm(tables.groups, arm) if not tables.groups.empty else None
    first = [line for line in (pooled, findings.budget_warning(budgets) if budgets is not None else None,
                               provenance.mixed_code(tables, ctx.out)) if line]
    quoted = findings.Inputs(calibration=tied.calibration if tied else None, budgets=budgets,
                             steps=steps_per_arm(tables.groups, arm).to_dict() if dynamics is not None else {},
                             waste_by_difficulty=what_trained.by_difficulty, names=dict(ctx.names))
    found = findings.section(family, quoted, what_trained.unit_weight, ranked.sentences if ranked else [],
                             covered.sentence if covered else None, first)

    page = [
        header.section(tables, ctx), found, provenance.section(tables, ctx, command or launch_command(root)),
        ranked, held, at_k.section(tables, ctx, held.prompt_scores), covered, what_trained, tied, learning,
    ]
    # the second page: what a reader may want once the findings are read (every test, the longer sections)
    details = [
        provenance.details(tables, ctx), tests.section(family), persisted, sizes, budget, healthy,
        examples.section(completions(tables), ctx), jobs.section(tables),
    ]
    shown = [s for s in page if s is not None]  # a section is None where its data does not exist
    more = [s for s in details if s is not None]
    texts, long_tables = move_long_tables([s.text for s in shown], DETAILS)
    if long_tables:
        more.append(Section(text=long_tables))
    title = shown[0].text.splitlines()[0].removeprefix("# ").removeprefix("Report: ")
    texts.append(f"More in [{DETAILS}]({DETAILS}): " + ", ".join(_heading(s) for s in more) + ".")
    more.insert(0, Section(text=f"# Details: {title}\n\nThe second page of [REPORT.md](REPORT.md)."))
    return write_report(building, texts, [s.files for s in shown + more], root, shown_at=out,
                        details=[s.text for s in more])


def held_out_sections(tables: Tables, ctx: Context) -> tuple[heldout.HeldOut, coverage.Coverage | None]:
    """The sections of the eval rows: held-out scores and comparisons, and coverage."""
    return heldout.section(tables, ctx), coverage.section(tables, ctx)
    return heldout.section(tables, ctx), coverage.section(tables, ctx)


def _heading(section: Section) -> str:
    """A section's first heading, as the words of a link list."""
    return next((line.lstrip("# ") for line in section.text.splitlines() if line.startswith("#")), "")


def completions(tables: Tables) -> pd.DataFrame:
    """Every source's completions tables, their jobs named as `load` named them."""
    if len(tables.roots) <= 1:
        found = read_completions(tables.root)
    else:
        frames = [part.assign(job=f"{name}/" + part["job"].astype(str))
                  for root, name in zip(tables.roots, source_names(tables.roots))
                  if not (part := read_completions(root)).empty]
        found = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return found[found["job"].astype(str).isin(tables.jobs["job"].astype(str))] if len(found) else found
