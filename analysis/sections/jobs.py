"""The jobs: each loaded job with its status, varying config and rows read; what varies; what was
skipped, failed or killed; the jobs the sweep meant to run that left no run (`data.plan`); the jobs their sampler
stopped before their budget (done, but short of it: `records.sampler_stop`); what is not marked done.
`incomplete_line` says in the Findings when a sweep is not whole or a sampler stopped a job."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from analysis.data.arms import value_text, varying_keys
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.data.plan import Plan
from analysis.data.records import KILLED, run_records, running_note, sampler_stop
from analysis.render.writer import DETAILS, Files
from analysis.sections.provenance import jobs_text
from analysis.sections.section import Section


def section(tables: Tables, plan: Plan | None = None) -> Section:
    """The Jobs section, last in the report. `plan`: what the sweep meant to run (`data.plan.missing_jobs`)."""
    files = Files()
    jobs = tables.jobs
    varying = varying_keys(jobs, tables.config_columns) if len(jobs) else []
    rows = {name: jobs["job"].map(frame["job"].value_counts()).fillna(0).astype(int)
            for name, frame in (("groups", tables.groups), ("eval_rows", tables.eval))}
    if "truncated" in tables.groups:  # samples cut at max_new_tokens (runs before the column have none counted)
        cut = tables.groups.groupby("job", observed=True)["truncated"].sum()
        rows["truncated"] = jobs["job"].map(cut).fillna(0).astype(int)
    listing = jobs[["job", "status", *varying]].assign(**rows, **{k: jobs[k].map(value_text) for k in varying})
    vary = [f"- `{k}`: {', '.join(natural_sorted(jobs[k].map(value_text).unique()))}" for k in varying]
    skipped = [f"- `{s.name}`: {s.reason}" for s in tables.skipped]
    records = run_records(jobs)
    unfinished = [f"- `{j}`: status {s}" + (f" ({running_note(r)})" if s == "running" else "")
                  for j, s, r in zip(jobs["job"], jobs["status"], records) if s != "done"]
    stops = sampler_stops(tables, records)
    stopped = ["", "### Stopped by their sampler", "",
               f"{len(stops)} job{'s' * (len(stops) != 1)} ended before {'their' if len(stops) != 1 else 'its'} "
               "budget though marked done: a sampler's cap stopped the run (run.json `stopped`), with the tables "
               "whole up to there. Each with the budget it reached and its sampler's reason:", "",
               *(f"- `{s.job}`{s.where}: {s.reached}. {s.reason}" for s in stops)] if stops else []
    missing = plan.missing if plan is not None else []
    never = ["", "### Missing from the sweep", "",
             f"The sweep's multirun.yaml meant to run {plan.meant} jobs; these {len(missing)} left no run (a launcher "
             "whose worker dies takes down the jobs it had not begun), so the arms that lost them have fewer seeds:",
             "", *(f"- `{m.job}`: {' '.join(m.overrides)}" for m in missing)] if missing else []
    return Section(text="\n".join([
        "## Jobs", "", files.table("jobs", listing), "",
        "### Configs that vary", "", *(vary or ["None: every job has the same config."]), "",
        "### Skipped or failed", "", *(skipped or ["None."]), *never, *stopped, "",
        "### Not marked done", "",
        *(unfinished or ["None: every loaded job's run.json says done"
                         + (f" ({len(stops)} of them stopped by their sampler before their budget: above)."
                            if stops else ".")]),
    ]), files=files)


def incomplete_line(tables: Tables, plan: Plan | None = None) -> str | None:
    """The Findings' line for a sweep that is not whole: jobs it meant to run that left no run, jobs killed
    (skipped: `records.stopped_reason`), jobs still running; and for jobs their sampler stopped before their budget
    (done, but short of it: `sampler_stops`), in the same line; None when there are none."""
    stops = stopped_text(sampler_stops(tables))
    missing = [m.job for m in plan.missing] if plan is not None else []
    killed = [s.name for s in tables.skipped if s.reason.startswith(KILLED)]
    running = [str(j) for j, s in zip(tables.jobs["job"], tables.jobs["status"]) if s == "running"]
    meant = f" of the {plan.meant} jobs its multirun.yaml meant to run" if plan is not None else ""
    parts = [f"{what}: {len(names)}{meant if names is missing else ''} ({'job' if len(names) == 1 else 'jobs'} "
             f"{jobs_text(names)})"
             for names, what in ((missing, "left no run"), (killed, "killed before finishing, left out"),
                                 (running, "still running, read as far as they got")) if names]
    if not parts:
        return stops
    return (f"**Incomplete sweep**: {'; '.join(parts)}. Every comparison here is of the jobs that are, with "
            f"fewer seeds in the arms that lost some (each named under Jobs, [{DETAILS}]({DETAILS}))."
            + (f" {stops}" if stops else ""))


@dataclass(frozen=True)
class Stop:
    """A job its sampler stopped before its budget: `job`, its `sampler` and `seed` (as the config names them; ""
    where it does not), `reached` (the budget it reached, in words), `reason` (run.json's `stopped`), and the
    samples it drew against its budget (`samples`, `budget`: NaN where it had no sample budget)."""

    job: str
    sampler: str
    seed: str
    reached: str
    reason: str
    samples: float
    budget: float

    @property
    def where(self) -> str:
        """" (sampler greso, seed 6)", or "" where the config names neither."""
        named = [f"{k} {v}" for k, v in (("sampler", self.sampler), ("seed", self.seed)) if v]
        return f" ({', '.join(named)})" if named else ""


def _number(value: object) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return number if number > 0 else math.nan


def sampler_stops(tables: Tables, records: list[dict] | None = None) -> list[Stop]:
    """The loaded jobs whose run.json says done but `stopped` (a sampler's cap ended the run), each with the budget
    it reached: samples drawn against `max_samples` (else tokens against `max_tokens`, else steps against
    `max_steps`), from its groups (its steps where it has no groups). `records`: `run_records(tables.jobs)`, where
    the caller has them."""
    jobs = tables.jobs
    records = run_records(jobs) if records is None else records
    found = [(str(job), reason) for job, record in zip(jobs["job"], records) if (reason := sampler_stop(record))]
    if not found:
        return []
    rows = tables.groups if len(tables.groups) else tables.steps
    read = [c for c in ("samples_total", "tokens_total", "step") if c in rows]
    drawn = rows.groupby(rows["job"].astype(str), observed=True)[read].max() if len(rows) and read else pd.DataFrame()
    config = jobs.set_index(jobs["job"].astype(str))
    out = []
    for job, reason in found:
        row = config.loc[job]
        got = drawn.loc[job] if job in drawn.index else pd.Series(dtype=float)
        samples, step = _number(got.get("samples_total")), got.get("step")
        tokens = _number(got.get("tokens_total"))
        at = f" at step {int(step):,}" if pd.notna(step) else ""
        budget, reached = _number(row.get("max_samples")), ""
        if not math.isnan(budget):
            share = f" ({samples / budget:.0%})" if not math.isnan(samples) else ""
            reached = f"{_count(samples)} of its {_count(budget)} samples{share}{at}"
        elif not math.isnan(_number(row.get("max_tokens"))):
            reached = f"{_count(tokens)} of its {_count(_number(row.get('max_tokens')))} tokens{at}"
        elif pd.notna(step) and not math.isnan(_number(row.get("max_steps"))):
            reached = f"step {int(step):,} of its {_count(_number(row.get('max_steps')))} (max_steps)"
        else:
            reached = f"{_count(samples)} samples{at}"
        sampler = next((value_text(row[k]) for k in ("sampler.name", "sampler") if k in row.index and pd.notna(row[k])),
                       "")
        seed = value_text(row["seed"]) if "seed" in row.index and pd.notna(row["seed"]) else ""
        out.append(Stop(job, sampler, seed, f"stopped at {reached}", reason, samples, budget))
    return out


def _count(value: float) -> str:
    return "an unknown number of" if math.isnan(value) else f"{value:,.0f}"


def stopped_text(stops: list[Stop]) -> str | None:
    """The Findings' words on jobs a sampler stopped (`sampler_stops`), or None where there are none."""
    if not stops:
        return None
    samples = [s.samples for s in stops if not math.isnan(s.samples)]
    budgets = sorted({s.budget for s in stops if not math.isnan(s.budget)})
    span = "" if not samples else (f"{_count(min(samples))}" if min(samples) == max(samples)
                                   else f"{_count(min(samples))}–{_count(max(samples))}")
    of = f" of {' or '.join(map(_count, budgets))} samples" if budgets and span else " samples" if span else ""
    one = len(stops) == 1
    by_sampler: dict[str, list[Stop]] = {}
    for stop in stops:
        by_sampler.setdefault(stop.sampler, []).append(stop)
    named = "; ".join(
        (f"{sampler}: " if sampler else "") + ", ".join(f"`{s.job}`" for s in mine)
        + (f" (seed{'s' if len(mine) > 1 else ''} {', '.join(s.seed for s in mine)})" if all(s.seed for s in mine)
           else "") for sampler, mine in by_sampler.items())
    return (f"**Stopped by their sampler**: {len(stops)} job{'' if one else 's'} marked done ended before "
            f"{'its' if one else 'their'} budget ({named}" + (f", at {span}{of}" if span else "")
            + "), " + ("its" if one else "their") + " sampler's cap: " + ("its" if one else "their")
            + " arm's end-of-budget values are at fewer samples for "
            + ("it" if one else "them") + f" (reasons: Jobs, [{DETAILS}]({DETAILS})).")
