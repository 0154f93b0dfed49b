"""The report: `REPORT.md` for a run or sweep directory, its figures beside it (`figures/*.png`)
and every table it shows as CSV (`tables/*.csv`), all computed from the run's tables.

This module only assembles: it loads the tables, has the runner (`analysis.runner`) make the parts the
sections share in the order their values flow (`analysis.parts` declares what each reads and needs), and writes
the sections in the order a reader wants them (`PAGE`, `DETAILS_PAGE`).
"""

from __future__ import annotations

import gc
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pandas as pd

from analysis import parts, runner, scheduler
from analysis.data import select, settings
from analysis.data.alignment import with_tokens
from analysis.data.arms import arm_keys, arms_as_text
from analysis.data.checkpoints import attach_samples
from analysis.data.config import launch_command, report_against, report_published
from analysis.data.labels import label_order
from analysis.data.load import Tables, load
from analysis.data.plan import missing_jobs
from analysis.data.records import difficulty_names, difficulty_order
from analysis.data.resources import attach_updates
from analysis.measures.health import MISMATCH_COLUMNS
from analysis.measures.published import Published, PublishedUnreadable, read_published
from analysis.measures.tie_learning import split_reused
from analysis.measures.tied_loss import STEPS_COLUMNS as TIED_LOSS_COLUMNS
from analysis.measures.transfer import ReferenceUnreadable, read_reference
from analysis.render.canvas import report_colours
from analysis.render.ownership import VIEWER
from analysis.render.paging import MAX_LINES, anchor, move_long_tables
from analysis.render.writer import finish_build, start_build, write_report
from analysis.sections import group_size, header, health, predictions, tied_loss
from analysis.sections.section import DETAILS, Context, Section

# the columns the sections read; the others (the groups' reward lists first) stay on disk
COLUMNS = {
    "groups": ("step", "prompt_id", "difficulty", "round", "group_size", "reward_mean", "n_correct", "tie", "tie_kind",
               "used", "tokens", "samples_total", "tokens_total", "n_informative", "truncated", "reused",
               "predicted_rate", "n_answered", "n_trained", "unit"),
    "eval": ("step", "prompt_id", "difficulty", "answer", "answered", "correct", "completion", "prompt",
             "samples_total", "tokens_total", "updates", "flops_total",
             *settings.STORED),
    "steps": ("step", "samples_total", "reward_mean", "kl", "clip_frac", "grad_norm", "tie_frac", "opt_steps",
              "updates", "flops_total", *MISMATCH_COLUMNS, *TIED_LOSS_COLUMNS),
}


def build_report(path: str | Path | Sequence[str | Path], out_dir: str | Path | None = None,
                 command: str | None = None, by: Sequence[str] = (), where: Sequence[str] = (),
                 baseline: str | None = None, against: str | Path | None = None, viewer: bool = False,
                 published: str | Path | None = None) -> Path:
    """Build the report of a run or sweep directory, or of several (`path` a list: one report over all
    their jobs, `out_dir` required); returns the path of REPORT.md. `by`, `where`, `baseline`: the arm
    keys, the jobs kept ("KEY=VALUE": values of one key alternatives, different keys all holding) and the
    arm differences are taken against (`analysis.data.select`; SelectionError, one line, before anything is
    written). `against`: a report folder whose resolved orderings are read in this study (the Transfer section);
    by default the one the sweep's experiment names (`hydra.callbacks.report.against` in its multirun.yaml,
    relative to the project's root); ReferenceUnreadable, one line, before anything is written. `viewer`: also
    write every group on one page (`viewer.html`, analysis/view), linked from the report's header. `published`: a
    published table (`analysis/published/*.yaml`) read beside this study (the section "Against a published study");
    by default the one the sweep's experiment names (`hydra.callbacks.report.published`, in its multirun.yaml or,
    for a sweep run before it was named, the project's conf/experiment/<name>.yaml now); PublishedUnreadable, one
    line, before anything is written.

    It goes to `<path>/report/` unless `out_dir` is given. `command` is quoted as the command
    that produced the runs; by default it is rebuilt from Hydra's multirun.yaml or hydra.yaml.
    Jobs and parts that cannot be used are skipped with a warning and named in the report. The
    report is built in a folder beside `out` and swapped in whole at the end (`finish_build`): a
    build that fails or is killed leaves the report that was there. ReportNotWritable (one line)
    when the folder cannot be written or is not the report's to write (`render.ownership`), before any
    work.
    """
    sources = [Path(p) for p in ([path] if isinstance(path, (str, Path)) else path)]
    if len(sources) > 1 and out_dir is None:
        raise ValueError("several sources: say where the report goes (--out DIR)")
    root = sources[0]
    out = Path(out_dir) if out_dir is not None else root / "report"
    reference = _reference(against, root)
    publication = _publication(published, root)
    building = start_build(out, root)  # before any work: an unwritable folder is one line at once
    try:
        # a second process computes and draws beside this one
        with scheduler.helping(building / "figures", FIGURE_MODULES), _old_objects_frozen():
            report = _build(sources, out, building, command, (tuple(by), tuple(where), baseline), reference, viewer,
                            publication)
        if viewer:
            from analysis.view import collect, render, write  # only a report that embeds its groups needs it

            write(building / VIEWER, render(collect(sources if len(sources) > 1 else root, title=out.name)))
        finish_build(building, out)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return out / report.name


SectionMaker = Callable[[Tables, Context], Section | None]
# The report, in page order. A section that reads only the tables is its module's `section(tables, ctx)`, listed
# here by that function: adding one is its module and its line. None: a part the runner makes, of the tables and
# the others' values (the findings quote the tests' family, the ranking reads the held-out scores, ...): its name
# in `analysis.parts.PARTS`, which declares what it reads and needs.
PAGE: tuple[tuple[str, SectionMaker | None], ...] = (
    ("header", header.section), ("findings", None), ("verdict", None), ("provenance", None), ("transfer", None),
    ("published", None), ("heldout", None), ("cost", None), ("at_k", None), ("trained", None), ("ties", None),
    ("tied_loss", tied_loss.section), ("tie_learning", None),
)
# the second page: what a reader may want once the findings are read (every test, the longer sections)
DETAILS_PAGE: tuple[tuple[str, SectionMaker | None], ...] = (
    ("caveats", None), ("in_words", None), ("ranking", None), ("coverage", None), ("provenance_details", None),
    ("significance", None), ("persistence", None), ("group_size", group_size.section),
    ("predictions", predictions.section), ("equal_budget", None), ("health", health.section), ("examples", None),
    ("jobs", None),
)

PROJECT = Path(__file__).resolve().parent.parent  # the folder of conf/ and reports/

# every figure module, imported in the second process before its first figure (with matplotlib and pandas)
FIGURE_MODULES = ("analysis.render.cost", "analysis.render.curves", "analysis.render.intervals",
                  "analysis.render.scores", "analysis.render.tie_learning", "analysis.render.ties",
                  "analysis.render.verdict")


@contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """The objects made before the build (modules, the caller's) out of the garbage collector's way while it
    runs, handed back after: each full collection would scan them again (0.1-0.15 s each, three a build,
    set off by the figures' many short-lived objects)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _build(sources: Sequence[Path], out: Path, building: Path, command: str | None,
           choice: tuple[tuple[str, ...], tuple[str, ...], str | None] = ((), (), None),
           reference: tuple[str, pd.DataFrame] | None = None, viewer: bool = False,
           publication: Published | None = None) -> Path:
    """The report of `sources`, as it will read from `out`, written under `building`; `choice`: (by,
    where, baseline), as `build_report` takes them; `reference`: (its name, its tests table) or None; `viewer`:
    whether the header links a viewer page; `publication`: the published table read beside it, or None."""
    root = sources[0]
    early: list[tuple[pd.DataFrame, dict[str, scheduler.Later]]] = []  # (the jobs, the parts begun from them)

    def begin_early(loaded: Tables) -> None:
        """Where the build has a second process: the parts of the eval rows begun there from the eval rows, read
        first, while this process reads the groups; kept if the jobs loaded in the end are these."""
        with label_order(difficulty_order(loaded.jobs)):  # what the worker begins sorts as the build will
            try:
                tables, arm = _prepared(loaded, choice)
            except Exception:  # noqa: BLE001 - the whole tables will say it again (or not: a key only others have)
                return
            if "samples_total" not in tables.eval or tables.eval["samples_total"].isna().any():  # from the groups
                return
            early.append((loaded.jobs, runner.begin_early(parts.PARTS, tables,
                                                          _context(tables, arm, root, out, viewer))))

    tables = load(sources if len(sources) > 1 else root, tables=("groups", "eval", "steps"), columns=COLUMNS,
                  first=("eval", "steps"), on_first=begin_early if scheduler.active() else None)
    same = bool(early) and early[0][0].equals(tables.jobs)
    if early and not same:
        runner.drop(early[0][1])  # begun from other jobs than these: the worker need not make them
    begun = early[0][1] if same else {}
    if command is None and len(sources) > 1:
        command = "; ".join(filter(None, (launch_command(s) for s in sources))) or None
    with label_order(difficulty_order(tables.jobs)):  # difficulties in the order the runs recorded, where they did
        tables, arm = _prepared(tables, choice)
        given = {"command": command or launch_command(root), "plan": missing_jobs(tables.roots),
                 "pooled": select.pooled_line(tables, select.unaccounted(tables, arm)), "reference": reference,
                 "publication": publication}
        ctx = _context(tables, arm, root, out, viewer)
        # a replayed group was drawn (and counted) at an earlier step: every section but one counts draws only
        drawn = replace(tables, groups=split_reused(tables.groups)[0])
        made = runner.make_all(parts.PARTS, tables, drawn, ctx, given, begun)

        def sections(order: Sequence[tuple[str, SectionMaker | None]]) -> list[Section]:
            found = [made[name] if make is None else make(drawn, ctx) for name, make in order]
            return [s for s in found if s is not None]  # a section is None where its data does not exist

        return _write(building, out, root, sections(PAGE), sections(DETAILS_PAGE))


def _context(tables: Tables, arm: Sequence[str], root: Path, out: Path, viewer: bool) -> Context:
    """What every section reads besides the tables: one colour per arm in every figure."""
    return Context(root=root, out=out, arm=tuple(arm), names=difficulty_names(tables.jobs), viewer=viewer,
                   colours=report_colours(tables.jobs, arm))


def _write(building: Path, out: Path, root: Path, shown: list[Section], more: list[Section]) -> Path:
    """The two pages: REPORT.md with `shown` and the list of the second page, its long tables moved to DETAILS.md
    after `more`."""
    texts, long_tables = move_long_tables([s.text for s in shown], DETAILS, MAX_LINES,
                                          reserved=len(more) + 4)  # the list of the second page below
    if long_tables:
        more.append(Section(text=long_tables))
    title = shown[0].text.splitlines()[0].removeprefix("# ").removeprefix("Report: ")
    texts.append(f"More in [{DETAILS}]({DETAILS}): the second page, section by section.\n\n"
                 + "\n".join(_pointer(s) for s in more))
    more.insert(0, Section(text=f"# Details: {title}\n\nThe second page of [REPORT.md](REPORT.md)."))
    return write_report(building, texts, [s.files for s in shown + more], root, shown_at=out,
                        details=[s.text for s in more])


def _reference(against: str | Path | None, root: Path) -> tuple[str, pd.DataFrame] | None:
    """(name, tests table) of the report this one is read against: `against` as given, else the one the sweep's
    multirun.yaml names, relative to the project's root (where the experiment that named it lives)."""
    if against is not None:
        return str(against), read_reference(Path(against))
    named = report_against(root)
    if named is None:
        return None
    try:
        return named, read_reference(PROJECT / named)
    except ReferenceUnreadable as e:  # the experiment's own choice, not the user's: the rest of the report stands
        warnings.warn(f"{e}; the report is built without its Transfer section", stacklevel=2)
        return None


def _publication(published: str | Path | None, root: Path) -> Published | None:
    """The published table read beside this study: `published` as given, else the one the sweep's experiment names
    (`config.report_published`), relative to the project's root."""
    if published is not None:
        return read_published(Path(published))
    named = report_published(root, PROJECT)
    if named is None:
        return None
    try:
        return read_published(PROJECT / named, shown=named)
    except PublishedUnreadable as e:  # the experiment's own choice, not the user's: the rest of the report stands
        warnings.warn(f"{e}; the report is built without its section against the published study", stacklevel=2)
        return None


def _prepared(tables: Tables, choice: tuple[tuple[str, ...], tuple[str, ...], str | None]) -> tuple[Tables, list[str]]:
    """(tables, arm keys): the loaded tables as every section reads them, the jobs `choice` keeps in its
    order (`select`), samples drawn attached to each checkpoint, every arm value a label (null, lists,
    floats as named: no section can drop or misname one)."""
    by, where, baseline = choice
    tables = select.keep_jobs(tables, where)
    select.comparable_sources(tables, by)
    if not tables.eval.empty:  # samples drawn and updates taken at each checkpoint, from the groups and steps
        tables = replace(tables, eval=attach_updates(with_tokens(attach_samples(tables.eval, tables.groups)),
                                                     tables.steps))
    tables = settings.one_setting(tables)  # each job's eval rows at one sampling setting; the others named
    arm = select.arm_keys_given(tables, by) if by else arm_keys(tables.jobs, tables.config_columns)
    tables = select.baseline_first(tables, baseline, arm)  # a baseline names an arm: checked against the arm keys
    return replace(tables, **{t: arms_as_text(getattr(tables, t), tables.jobs, arm, tables.own.get(t, ()))
                              for t in ("groups", "eval", "steps")}), arm


def _heading(section: Section) -> str:
    """A section's first heading, as the words of a link list."""
    return next((line.lstrip("# ") for line in section.text.splitlines() if line.startswith("#")), "")


def _pointer(section: Section) -> str:
    """A second-page section as the first page lists it: its heading, linked, and what is there where it says."""
    heading = _heading(section)
    return f"- [{heading}]({DETAILS}#{anchor(heading)})" + (f": {section.pointer}" if section.pointer else "")
