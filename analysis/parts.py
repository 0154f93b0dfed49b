"""What the report's build makes besides the sections that read only the tables: each value, the tables it reads
and the values of the others it needs (`runner.Part`), in the order this process makes them where it can. The
runner orders them by their needs and sends to the second process those that may go there; `report.PAGE` and
`report.DETAILS_PAGE` show them by name. What passes between them:

- held-out (`held_out`: the section and its at-k curves, from the eval rows) -> its comparisons at the final
  checkpoints (the tests' `family`), each job's scores (ranking, verdict) and every prompt's scores (cost, at_k);
- what trained (`trained`) -> its wasted-fraction comparisons (`family`), each group's counts (`equal_budget`),
  each job's spend (ranking), the unit weight in words (`in_words`);
- ties -> its first-round tie comparisons (`family`), the calibration and the answered split (`in_words`);
- the tests' `family` (Holm within each metric) -> `significance`, ranking, transfer, verdict, `in_words`,
  findings; ranking and transfer -> their sentences, coverage -> its sentence (`in_words`); the verdict's
  alignments and the caveats -> findings; the family and the verdict's alignments -> a published study read beside
  this one (`published`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from analysis.data import settings
from analysis.data.completions import read_completions
from analysis.data.load import Tables, source_names
from analysis.data.plan import Plan
from analysis.measures import equal_updates
from analysis.measures.construction import Fixed, fixed_by_rule
from analysis.measures.equal_updates import updates_per_arm
from analysis.measures.published import Published
from analysis.measures.questions import questions
from analysis.measures.spend import budgets_per_arm
from analysis.measures.verdict import reference_arm
from analysis.runner import CLAIMABLE, EVAL, WHOLE, WITH_FIGURES, Part
from analysis.sections import (
    at_k,
    cost,
    coverage,
    equal_budget,
    examples,
    failures,
    findings,
    heldout,
    in_words,
    jobs,
    persistence,
    provenance,
    published,
    ranking,
    significance,
    tie_learning,
    ties,
    trained,
    transfer,
    verdict,
)
from analysis.sections import budgets as budgets_text
from analysis.sections.at_k import Curves
from analysis.sections.coverage import Coverage
from analysis.sections.heldout import HeldOut
from analysis.sections.ranking import Ranked
from analysis.sections.section import Context, Section
from analysis.sections.ties import Ties
from analysis.sections.trained import Trained
from analysis.sections.transfer import Transfer
from analysis.sections.verdict import Verdict

# what the build hands the parts besides the tables: the command quoted, the jobs a sweep meant to run that left
# no run (`data.plan`), the line on keys that vary within arms, and (name, tests table) of the report this one is
# read against (None: none), and the published table it is read beside (`measures.published.Published`; None: none)
GIVEN = ("command", "plan", "pooled", "reference", "publication")
HeldOutValue = tuple[HeldOut, Curves | None]  # the held-out section and its at-k curves, made together


def held_out_sections(tables: Tables, ctx: Context) -> HeldOutValue:
    """What the eval rows make first: the held-out scores and comparisons, and the at-k curves."""
    held = heldout.section(tables, ctx)
    return held, at_k.curves_of(tables, ctx, held.prompt_scores)


@dataclass(frozen=True)
class Idle:
    """The arms that trained nothing, one line each (`failures.nothing_trained`), and whether that is every arm."""

    lines: list[str]
    everywhere: bool


def _dynamics(tables: Tables, ctx: Context) -> pd.DataFrame | None:
    """Training dynamics compared over the updates every job took (none without groups)."""
    return equal_updates.comparisons(tables.groups, tables.steps, list(ctx.arm)) if not tables.groups.empty else None


def _family(tables: Tables, ctx: Context, held_out: HeldOutValue, trained: Trained, ties: Ties | None,
            dynamics: pd.DataFrame | None, fixed: Fixed) -> pd.DataFrame:
    """The tests' family: every section's comparisons, Holm within each metric; what a rule fixes left out."""
    comparisons = [held_out[0].comparisons, trained.comparisons, ties.comparisons if ties else None, dynamics]
    return significance.family(comparisons, fixed)


def _ranking(tables: Tables, ctx: Context, family: pd.DataFrame, held_out: HeldOutValue, trained: Trained,
             fixed: Fixed) -> Ranked | None:
    held = held_out[0]
    return ranking.section(tables, ctx, family, held.scores, trained.comparable, fixed.unranked_comparable(),
                           held.prompt_scores, trained.by_difficulty, fixed.unranked())


def _transfer(tables: Tables, ctx: Context, family: pd.DataFrame, reference: tuple[str, pd.DataFrame] | None
              ) -> Transfer | None:
    return transfer.section(reference[1], reference[0], family) if reference else None


def _published(tables: Tables, ctx: Context, family: pd.DataFrame, verdict: Verdict | None,
               publication: Published | None) -> Section | None:
    return published.section(tables, ctx, publication, family, verdict) if publication is not None else None


def _budgets(tables: Tables, ctx: Context) -> pd.DataFrame | None:
    return budgets_per_arm(tables.groups, list(ctx.arm)) if not tables.groups.empty else None


def _idle(tables: Tables, ctx: Context) -> Idle:
    arm = list(ctx.arm)
    lines = failures.nothing_trained(tables.groups, arm)
    arms = len(tables.groups.groupby(arm, observed=True).size()) if arm and len(tables.groups) else 1
    return Idle(lines, bool(lines) and len(lines) == arms)


def _caveat_lines(tables: Tables, ctx: Context, idle: Idle, pooled: str | None, plan: Plan,
                  budgets: pd.DataFrame | None, family: pd.DataFrame) -> list[str]:
    """Every line that limits every comparison: arms that trained nothing, keys pooled within arms, an incomplete
    sweep, unequal budgets, skipped or unknown updates, mixed code, evaluations left out."""
    arm = list(ctx.arm)
    return [line for line in (*idle.lines, pooled, jobs.incomplete_line(tables, plan),
                              budgets_text.budget_warning(budgets, family) if budgets is not None else None,
                              budgets_text.skipped_updates_line(tables.steps, arm),
                              budgets_text.unknown_updates_line(tables.eval),
                              provenance.mixed_code(tables, ctx.out), settings.left_out_line(tables)) if line]


def _in_words(tables: Tables, ctx: Context, family: pd.DataFrame, ties: Ties | None,
              budgets: pd.DataFrame | None, dynamics: pd.DataFrame | None, trained: Trained,
              ranking: Ranked | None, transfer: Transfer | None, coverage: Coverage | None,
              idle: Idle) -> Section | None:
    quoted = in_words.Inputs(calibration=ties.calibration if ties else None, budgets=budgets,
                             steps=updates_per_arm(tables.steps, list(ctx.arm)).to_dict() if dynamics is not None
                             else {}, waste_by_difficulty=trained.by_difficulty,
                             ties_by_difficulty=ties.by_difficulty if ties else None, names=dict(ctx.names),
                             answered=ties.answered if ties else None, arm=tuple(ctx.arm))
    sentences = [*(ranking.sentences if ranking else []), *(transfer.sentences if transfer else [])]
    return in_words.section(family, quoted, trained.unit_weight, sentences,
                            coverage.sentence if coverage else None, idle=idle.everywhere)


def _verdict(tables: Tables, ctx: Context, family: pd.DataFrame, held_out: HeldOutValue) -> Verdict | None:
    return verdict.section(tables, ctx, family, held_out[0].scores, held_out[0].prompt_scores)


def _findings(tables: Tables, ctx: Context, verdict: Verdict | None, family: pd.DataFrame,
              budgets: pd.DataFrame | None, caveat_lines: list[str], idle: Idle) -> Section:
    asked = questions(tables.jobs, list(ctx.arm), tables.config_columns, reference_arm(family))
    return findings.section(findings.Inputs(alignments=verdict.alignments if verdict else (), tests=family,
                                            budgets=budgets, caveats=caveat_lines, arm=tuple(ctx.arm),
                                            idle=idle.lines if idle.everywhere else (), questions=asked))


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


# In the order this process makes them where it can: the second process's first (begun before anything is made
# here), then the largest figures soonest (ties over samples), then what the findings need, then the second page.
PARTS: tuple[Part, ...] = (
    Part("held_out", held_out_sections, reads=EVAL, second=WITH_FIGURES),
    # of the eval rows too: the worker has the time where the groups take long to read
    Part("coverage", coverage.section, reads=EVAL, second=CLAIMABLE),
    # a few columns of the groups, small to send: handed over before any figure of the groups
    Part("persistence", persistence.section, reads=persistence.COLUMNS_READ, second=CLAIMABLE),
    # the only part that reads the replayed groups: what an arm made of its ties includes its replays
    Part("tie_learning", tie_learning.section, reads=WHOLE),
    Part("at_k", lambda tables, ctx, held_out: at_k.section(tables, ctx, held_out[1]), needs=("held_out",)),
    Part("ties", ties.section),
    Part("trained", trained.section),
    Part("dynamics", _dynamics),
    Part("equal_budget", lambda tables, ctx, trained: equal_budget.section(tables, ctx, trained.counted),
         needs=("trained",)),
    Part("heldout", lambda tables, ctx, held_out: held_out[0], needs=("held_out",)),
    # quantities an arm's own rule fixes: measured, never a finding
    Part("fixed", lambda tables, ctx: fixed_by_rule(tables.jobs, tables.groups, list(ctx.arm))),
    Part("family", _family, needs=("held_out", "trained", "ties", "dynamics", "fixed")),
    Part("ranking", _ranking, needs=("family", "held_out", "trained", "fixed")),
    Part("transfer", _transfer, needs=("family", "reference")),
    Part("published", _published, needs=("family", "verdict", "publication")),
    Part("budgets", _budgets),
    Part("idle", _idle),
    Part("caveat_lines", _caveat_lines, needs=("idle", "pooled", "plan", "budgets", "family")),
    Part("in_words", _in_words, needs=("family", "ties", "budgets", "dynamics", "trained", "ranking", "transfer",
                                       "coverage", "idle")),
    Part("verdict", _verdict, needs=("family", "held_out")),
    Part("findings", _findings, needs=("verdict", "family", "budgets", "caveat_lines", "idle")),
    Part("caveats", lambda tables, ctx, caveat_lines: findings.caveats_section(caveat_lines),
         needs=("caveat_lines",)),
    Part("provenance", lambda tables, ctx, command, plan: provenance.section(tables, ctx, command, plan),
         needs=("command", "plan")),
    Part("cost", lambda tables, ctx, held_out: cost.section(tables, ctx, held_out[0].prompt_scores),
         needs=("held_out",)),
    Part("provenance_details", provenance.details),
    Part("significance", lambda tables, ctx, family: significance.section(family), needs=("family",)),
    Part("examples", lambda tables, ctx: examples.section(completions(tables), ctx, tables.eval)),
    Part("jobs", lambda tables, ctx, plan: jobs.section(tables, plan), needs=("plan",)),
)
