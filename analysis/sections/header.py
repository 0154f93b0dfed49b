"""The report's title (the experiment's name) and one line on what was compared."""

from __future__ import annotations

from analysis.data.arms import iter_arms
from analysis.data.load import Tables
from analysis.data.records import experiment_name
from analysis.data.setup import setup_text
from analysis.sections.section import Context, Section


def section(tables: Tables, ctx: Context) -> Section:
    """The title and what was compared: the arms, the jobs, the seeds per arm."""
    jobs = tables.jobs
    arms = list(dict.fromkeys(label for label, _ in iter_arms(jobs, ctx.arm))) if len(jobs) else []
    seeds = jobs["seed"].nunique(dropna=False) if "seed" in jobs else 1  # a seed not recorded is one
    compared = " vs ".join(arms) if 1 < len(arms) <= 4 else f"{len(arms)} arm{'s' * (len(arms) != 1)}"
    return Section(text="\n".join([
        f"# Report: {experiment_name(ctx.root, jobs, tables.roots)}", "",
        f"{compared}; {len(jobs)} job{'s' * (len(jobs) != 1)} ({seeds} seed{'s' * (seeds != 1)} per "
        f"arm){setup_text(jobs)}. Findings first; the "
        "command, code, packages and machine are in the collapsed block below them; every test, the wall times, "
        "the resolved config and the longer sections are on the second page, [DETAILS.md](DETAILS.md)."
        + (" Every group, its replies and its tie, with filters and a tie heatmap per arm: [viewer.html](viewer.html) "
           "(one file; open it from disk)." if ctx.viewer else ""),
    ]))
