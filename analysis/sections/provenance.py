"""What ran where, in a collapsed block under the findings: the command, the resolved config (keys
that vary across jobs and keys that do not), git commit, package versions, machine and wall time per
job, read from each job's run.json and Hydra's records. Every path is shown relative
to the report, so a report copied off a cluster names no machine's folders."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from analysis.data.arms import long_values, names_a_job, value_text, varying_keys, whole_text
from analysis.data.config import ALIASES
from analysis.data.imported import how_rows, imported
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.data.plan import Plan
from analysis.data.records import run_records
from analysis.render import markdown
from analysis.render.writer import relative
from analysis.sections.section import DETAILS, Context, Section

# keys the entry point sets at run time: Hydra's config.yaml holds a placeholder for them
RUNTIME = {"out_dir": "each job's own folder (the entry point sets it to Hydra's output directory)"}
PACKAGES = {"version": "grpo-lab", "torch": "torch", "transformers": "transformers"}  # run.json key -> name


def _seconds(started: object, finished: object) -> float | None:
    try:
        return (datetime.fromisoformat(str(finished)) - datetime.fromisoformat(str(started))).total_seconds()
    except (TypeError, ValueError):
        return None


def _text(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, sec = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m{sec:02d}s" if minutes >= 60 else f"{minutes}m{sec:02d}s"


def running_seconds(record: dict) -> float | None:
    """The time a job ran: each start's own time, summed (`earlier_starts`, then the last start's `this_start` to
    `finished`), without the pauses between a kill and its resume; None where a start's times were not recorded (a
    run.json written before `this_start`, or a start still running)."""
    earlier = record.get("earlier_starts") or []
    last = record.get("this_start") or (None if earlier else record.get("started"))
    spans = [_seconds(s.get("started"), s.get("finished")) for s in earlier if isinstance(s, dict)]
    spans.append(_seconds(last, record.get("finished")))
    return None if None in spans or len(spans) != len(earlier) + 1 else sum(spans)


def wall_times(jobs: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per job: job, its arm keys and seed, status, started, finished, wall time (first start to finish, so
    a resumed job's includes its pauses), starts, and running time (`running_seconds`: each start's own time)."""
    records = run_records(jobs)
    keys = [k for k in dict.fromkeys([*arm, "seed"]) if k in jobs]
    out = jobs[["job", *keys, "status"]].assign(**{k: jobs[k].map(value_text) for k in keys})
    out["started"] = [r.get("started") for r in records]
    out["finished"] = [r.get("finished") for r in records]
    out["wall_time"] = [_text(_seconds(r.get("started"), r.get("finished"))) for r in records]
    out["starts"] = [1 + len(r.get("earlier_starts") or []) for r in records]
    out["running_time"] = [_text(running_seconds(r)) for r in records]
    return out


def _count(values: Sequence[str]) -> str:
    counts = pd.Series(list(values)).value_counts(sort=False)
    return "; ".join(f"{v} ({n} job{'s' * (n > 1)})" if len(counts) > 1 else str(v) for v, n in counts.items())


def _git(record: dict) -> str:
    git = record.get("git")
    if not isinstance(git, dict) or not git.get("commit"):
        return "not recorded" if "git" not in record else "not a git checkout"
    return f"`{str(git['commit'])[:12]}`" + (" with uncommitted changes" if git.get("dirty") else "")


def _machine(record: dict) -> str:
    return f"{record.get('machine') or 'not recorded'} (device {record.get('device') or 'unknown'})"


def _value(value: object, report_dir: Path) -> str:
    """A config value for the report, whole (`whole_text`): an absolute path shown relative to the report."""
    text = whole_text(value)
    return relative(text, report_dir) if os.path.isabs(text) and not text.startswith("//") else text


def section(tables: Tables, ctx: Context, command: str | None, plan: Plan | None = None) -> Section:
    """The collapsed block under the findings: command, source, jobs, code, packages, machines and the arms;
    wall times and the resolved config are on the details page (`details`). `command`: the command that
    produced the runs, if known; `plan`: what the sweep meant to run (`data.plan.missing_jobs`)."""
    return Section(text=provenance(tables, ctx.arm, ctx.out, command, plan))


def provenance(tables: Tables, arm: Sequence[str], report_dir: Path, command: str | None,
               plan: Plan | None = None) -> str:
    """The provenance block's markdown (paths relative to `report_dir`)."""
    jobs = tables.jobs
    missing = (f", {len(plan.missing)} of the {plan.meant} the sweep meant to run missing (no run left)"
               if plan is not None and plan.missing else "")
    records = run_records(jobs)
    packages = [f"{name} {_count([str(r.get(key) or 'not recorded') for r in records])}"
                for key, name in PACKAGES.items()]
    return "\n".join([
        "<details>", "<summary>Config and provenance (command, code, packages, machine)</summary>", "",
        f"- Command: `{command}`" if command else "- Command: not recorded (no multirun.yaml or .hydra/hydra.yaml)",
        (f"- Source: `{relative(tables.root, report_dir)}` (relative to this report)" if len(tables.roots) <= 1 else
         f"- Sources ({len(tables.roots)}, relative to this report; a job is named `<source>/<job>`): "
         + ", ".join(f"`{relative(r, report_dir)}`" for r in tables.roots)),
        f"- Jobs: {len(jobs)} loaded, {len(tables.skipped)} jobs or parts skipped{missing} (listed under Jobs, "
        f"[{DETAILS}]({DETAILS}))",
        f"- Code: git {_count([_git(r) for r in records])}",
        f"- Packages: {', '.join(packages)}",
        f"- Machine: {_count([_machine(r) for r in records])}",
        *_imported(jobs, report_dir),
        (f"- Arms are told apart by: {', '.join(f'`{k}`' for k in arm) or '–'} (seeds are replicates)"
         if len(jobs) > 1 else "- Arms: one job, nothing to compare"),
        f"- Wall time per job and the resolved config: [{DETAILS}]({DETAILS})",
        *_legend(long_values(jobs, varying_keys(jobs, tables.config_columns))), "",
        "</details>",
    ])


def _legend(labels: pd.DataFrame) -> list[str]:
    """The one place a long value the report names by its label (`arms.value_label`) is given whole."""
    if labels.empty:
        return []
    return ["", "Values longer than a label, named by it everywhere else in this report:", "",
            markdown.table(labels.assign(value=labels["value"].str.replace("\n", "⏎", regex=False)))]


TOOLS = {"trl": "TRL", "verl": "verl"}  # tool -> its name in prose, for runs ingested before run.json recorded it


def _imported(jobs: pd.DataFrame, report_dir: Path) -> list[str]:
    """Lines for runs imported from another tool: where each came from (how each column was read: DETAILS.md)."""
    runs = imported(jobs)
    if not runs:
        return []
    if len(runs) == 1 and len(jobs) == 1:
        return [f"- Imported (python -m analysis.ingest): {_source_line(runs[0][1], report_dir)}"]
    return [f"- Imported (python -m analysis.ingest), {len(runs)} of {len(jobs)} jobs:",
            *(f"  - `{job}`: {_source_line(block, report_dir)}" for job, block in runs)]


def _source_line(block: dict, report_dir: Path) -> str:
    """Where an imported run came from, how its ties agree with the tool's own count, what its source lacks."""
    tool = str(block.get("title") or TOOLS.get(str(block.get("tool")), str(block.get("tool"))))
    version = f"{tool} {block['version']}" if block.get("version") else f"{tool} (version not recorded)"
    files = [str(f) for f in block.get("files") or []]
    shown = f"`{files[0]}` to `{files[-1]}`" if len(files) > 1 else f"`{files[0]}`" if files else "no file"
    text = (f"{version}, {len(files)} file{'s' * (len(files) != 1)} ({shown}) in "
            f"`{_value(str(block.get('source')), report_dir)}`")
    check = block.get("tie_check")
    if isinstance(check, dict) and check.get("steps"):
        differ = check.get("differ") or []
        text += (f"; the ties recomputed from the rewards equal {tool}'s own logged fraction (frac_reward_zero_std) "
                 f"at {check.get('equal')} of {check.get('steps')} steps"
                 + (f" (not at steps {', '.join(map(str, differ))}: {tool} counts a tie where the std of a group's "
                    "summed rewards is within 1e-8 of 0, this report where the rewards are exactly equal; with "
                    "scale_rewards='batch' it counts the batch's std, not the group's)" if differ else ""))
    absent = block.get("absent") or []
    if absent:
        text += "; not in the source: " + "; ".join(map(str, absent))
    return text


def details(tables: Tables, ctx: Context) -> Section:
    """The details page's provenance: wall time per job, the config keys that vary and those that do not."""
    jobs, report_dir = tables.jobs, ctx.out
    varying = varying_keys(jobs, tables.config_columns)
    shown_as_alias = {source for alias in varying for source in ALIASES.get(alias, ())}
    naming = [k for k in tables.config_columns if names_a_job(k) and jobs[k].map(value_text).nunique() > 1]
    fixed = [k for k in tables.config_columns if k not in varying and k not in shown_as_alias and k not in naming
             and k not in ALIASES and jobs[k].notna().any()]  # an alias repeats its key
    vary = [f"- `{k}`: {', '.join(_value(v, report_dir) for v in natural_sorted(jobs[k].map(value_text).unique()))}"
            for k in varying] + [f"- `{k}`: each job's own (it names the job: never an arm)" for k in naming]
    constant = pd.DataFrame({"key": fixed, "value": [RUNTIME.get(k) or _value(jobs[k].dropna().iloc[0], report_dir)
                                                     for k in fixed]})
    return Section(text="\n".join([
        "## Config and provenance", "",
        "Wall time per job (run.json): from its first start to its finish, and the time it ran (each start's own "
        "time, without the pauses between a kill and its resume; – where a start's times were not recorded):", "",
        markdown.table(wall_times(jobs, ctx.arm)), "",
        "Config keys that vary across jobs:", "", *(vary or ["None: every job has the same config."]), "",
        f"Config keys that do not vary ({len(fixed)}):", "",
        markdown.table(constant) if fixed else "None.",
        *_how(jobs),
    ]))


def _how(jobs: pd.DataFrame) -> list[str]:
    """How each imported run's columns were read from its tool's logs (analysis/ingest)."""
    how = how_rows(jobs)
    if how.empty:
        return []
    return ["", "How the imported runs were read from their tools' logs (`python -m analysis.ingest`):", "",
            markdown.table(how)]


# where a change cannot alter what a job computes (the report is rebuilt by the code at hand anyway)
NOT_RUN = ("analysis/", "docs/", "tests/", "benchmarks/", "reports/", "fixtures/", ".github/", ".ci/")
CODE = Path(__file__).resolve().parents[2]  # the checkout this analysis runs from, which may hold both commits


def mixed_code(tables: Tables, report_dir: Path) -> str | None:
    """The Findings' line for a sweep whose jobs ran more than one commit: which jobs ran which, and
    whether anything that changed between the commits can touch the numbers (from `git diff` in this
    checkout, where it holds them); None when every job ran one commit (or none recorded one)."""
    by_commit: dict[str, list[str]] = {}
    dirty = False
    for job, record in zip(tables.jobs["job"], run_records(tables.jobs)):
        git = record.get("git")
        if isinstance(git, dict) and git.get("commit"):
            by_commit.setdefault(str(git["commit"]), []).append(str(job))
            dirty |= bool(git.get("dirty"))
    if len(by_commit) < 2:
        return None
    ran = "; ".join(f"`{commit[:12]}` ran job{'s' * (len(jobs) > 1)} {jobs_text(jobs)}"
                    for commit, jobs in by_commit.items())
    return f"**{len(by_commit)} code versions in one sweep**: {ran}. {_changes(list(by_commit), dirty)}"


def _changes(commits: list[str], dirty: bool) -> str:
    """What changed between the commits, as it bears on the numbers."""
    changed: set[str] = set()
    for other in commits[1:]:
        out = subprocess.run(["git", "-C", str(CODE), "diff", "--name-only", commits[0], other], capture_output=True,
                             text=True)
        if out.returncode:
            return ("Whether anything that changed between them touches the numbers cannot be told here (this "
                    "checkout does not hold both commits): rebuild the sweep from one version, or compare with care.")
        changed |= set(out.stdout.split())
    runs = sorted(f for f in changed if not f.startswith(NOT_RUN) and not f.endswith(".md"))
    uncommitted = " Some jobs ran with uncommitted changes, which no diff shows." if dirty else ""
    if not runs:
        return (f"Of the {len(changed)} files that differ between them none is run by a job (analysis, docs and "
                f"tests only): the numbers are comparable.{uncommitted}")
    shown = ", ".join(f"`{f}`" for f in runs[:8]) + (f" and {len(runs) - 8} more" if len(runs) > 8 else "")
    return (f"{len(runs)} of the {len(changed)} files that differ between them are run by a job ({shown}): "
            f"differences between jobs of different versions may come from the code, not the arms; rebuild the "
            f"sweep from one version.{uncommitted}")


def jobs_text(jobs: Sequence[str]) -> str:
    """Job names with runs of consecutive numbers as ranges: "0-9, 12, x"."""
    out: list[str] = []
    numbers = [int(j) for j in jobs if j.isdigit()]
    start = prev = None
    for n in sorted(numbers):
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = n
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else str(start))
    return ", ".join(out + [j for j in jobs if not j.isdigit()])
