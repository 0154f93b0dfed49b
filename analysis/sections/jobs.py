"""The jobs: each loaded job with its status, varying config and rows read; what varies; what was
skipped or failed; what is not marked done."""

from __future__ import annotations

from analysis.data.arms import value_text, varying_keys
from analysis.data.labels import natural_sorted
from analysis.data.load import Tables
from analysis.render.writer import Files
from analysis.sections.section import Section


def section(tables: Tables) -> Section:
    """The Jobs section, last in the report."""
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
    unfinished = [f"- `{j}`: status {s}" for j, s in zip(jobs["job"], jobs["status"]) if s != "done"]
    return Section(text="\n".join([
        "## Jobs", "", files.table("jobs", listing), "",
        "### Configs that vary", "", *(vary or ["None: every job has the same config."]), "",
        "### Skipped or failed", "", *(skipped or ["None."]), "",
        "### Not marked done", "", *(unfinished or ["None: every loaded job's run.json says done."]),
    ]), files=files)
