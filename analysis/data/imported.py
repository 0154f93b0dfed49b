"""What a run imported from another tool (`python -m analysis.ingest`) says of itself: its run.json's `imported`
block (tool, version, files read, how each column was read, what the source lacks, and the recomputed ties against
the tool's own logged fraction), as the report quotes it; and which jobs it left without token counts."""

from __future__ import annotations

import pandas as pd

from analysis.data.records import run_records


def imported(jobs: pd.DataFrame) -> list[tuple[str, dict]]:
    """(job, imported block) of every imported job, in the jobs' order."""
    return [(str(job), record["imported"]) for job, record in zip(jobs["job"], run_records(jobs))
            if isinstance(record.get("imported"), dict)]


def how_rows(jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per imported job and choice: job, what (grouping, reward, ...), how it was read."""
    rows = [{"job": job, "what": what, "how": how} for job, block in imported(jobs)
            for what, how in (block.get("how") or {}).items()]
    return pd.DataFrame(rows, columns=["job", "what", "how"])


def missing_eval(jobs: pd.DataFrame) -> str | None:
    """Why imported jobs have no held-out rows, from what their sources lack; None for no imported job."""
    reasons = [a for _, block in imported(jobs) for a in block.get("absent") or []
               if str(a).startswith("held-out evaluation")]
    return "; ".join(dict.fromkeys(reasons)) or None


def without_tokens(groups: pd.DataFrame) -> list[str]:
    """The jobs whose groups record no token counts (null `tokens_total`: a run imported from logs that hold none,
    `analysis.ingest`), in the jobs' order; [] where every job counted its tokens."""
    if "tokens_total" not in groups or not groups["tokens_total"].isna().any():
        return []
    return [str(job) for job in groups.loc[groups["tokens_total"].isna(), "job"].unique()]
