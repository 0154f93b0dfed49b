"""grpo-lab's analysis: run and sweep tables in, REPORT.md with figures and CSV tables out.

Reads files only (parquet tables, run.json, Hydra's configs); never imports torch or grpo_lab.
Build a report with `python -m analysis <run_or_sweep_dir>` or `build_report(path)`.

The packages follow the data: `data` (reading) -> `stats` (statistics) -> `measures` (the numbers)
-> `sections` (what the report says) -> `render` (markdown, figures, files); `report` assembles.
"""

from analysis.data.load import load
from analysis.report import build_report

__all__ = ["build_report", "load"]
