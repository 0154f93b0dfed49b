"""The jobs: each loaded job with its status, varying config and rows read; what varies; what was
skipped, failed or killed; the jobs the sweep meant to run that left no run (`data.plan`); what is not
marked done. `incomplete_line` says in the Findings when a sweep is not whole."""

from __future__ import annotations

from analysis.data.arms import value_text, varying_keys
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.data.plan import Plan
from analysis.data.records import KILLED, run_records, running_note
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
    missing = plan.missing if plan is not None else []
    never = ["", "### Missing from the sweep", "",
             f"The sweep's multirun.yaml meant to run {plan.meant} jobs; these {len(missing)} left no run (a launcher "
             "whose worker dies takes down the jobs it had not begun), so the arms that lost them have fewer seeds:",
             "", *(f"- `{m.job}`: {' '.join(m.overrides)}" for m in missing)] if missing else []
    return Section(text="\n".join([
        "## Jobs", "", files.table("jobs", listing), "",
        "### Configs that vary", "", *(vary or ["None: every job has the same config."]), "",
        "### Skipped or failed", "", *(skipped or ["None."]), *never, "",
        "### Not marked done", "", *(unfinished or ["None: every loaded job's run.json says done."]),
    ]), files=files)


def incomplete_line(tables: Tables, plan: Plan | None = None) -> str | None:
    """The Findings' line for a sweep that is not whole: jobs it meant to run that left no run, jobs killed
    (skipped: `records.stopped_reason`), jobs still running; None when there are none."""
    missing = [m.job for m in plan.missing] if plan is not None else []
    killed = [s.name for s in tables.skipped if s.reason.startswith(KILLED)]
    running = [str(j) for j, s in zip(tables.jobs["job"], tables.jobs["status"]) if s == "running"]
    meant = f" of the {plan.meant} jobs its multirun.yaml meant to run" if plan is not None else ""
    parts = [f"{what}: {len(names)}{meant if names is missing else ''} ({'job' if len(names) == 1 else 'jobs'} "
             f"{jobs_text(names)})"
             for names, what in ((missing, "left no run"), (killed, "killed before finishing, left out"),
                                 (running, "still running, read as far as they got")) if names]
    if not parts:
        return None
    return (f"**Incomplete sweep**: {'; '.join(parts)}. Every comparison here is of the jobs that are, with "
            f"fewer seeds in the arms that lost some (each named under Jobs, [{DETAILS}]({DETAILS})).")
