"""The completions tables (`log_completions=N`) of a run or sweep directory, read whole: they are
small (N completions a step) and only the examples section shows them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from analysis.data.load import find_jobs


def read_completions(path: str | Path) -> pd.DataFrame:
    """The completions tables of a run or sweep directory, one frame, with a `job` column (the job's
    folder relative to `path`). Empty when no job kept completions."""
    root = Path(path)
    frames = []
    for run_dir in find_jobs(root):
        found = sorted((run_dir / "completions").glob("part-*.parquet"))
        if found:
            table = pa.concat_tables([pq.read_table(p) for p in found], promote_options="permissive").to_pandas()
            frames.append(table.assign(job=run_dir.relative_to(root).as_posix() if run_dir != root else root.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
