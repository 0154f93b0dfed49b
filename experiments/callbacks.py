"""Hydra callbacks: build the sweep report when a multirun ends."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class SweepReport(Callback):
    """On multirun end, write <sweep>/report/REPORT.md. Hydra skips this hook when a job raises, so
    the report is also a command of its own: python -m analysis <sweep_dir>.

    `against`: a committed report (a folder with tables/tests.csv) whose orderings this study is read against
    (`hydra.callbacks.report.against`, set by an experiment; relative to the project's root). Hydra keeps it in
    the sweep's multirun.yaml, where `python -m analysis` finds it again, so a rebuild needs no option.
    `published`: a published table of arms (a YAML file, `analysis/published/*.yaml`) read beside this study
    (`hydra.callbacks.report.published`, relative to the project's root), kept and found again the same way."""

    def __init__(self, against: str | None = None, published: str | None = None) -> None:
        self.against = against
        self.published = published

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from analysis.report import build_report

        sweep = Path(config.hydra.sweep.dir)
        command = "python -m experiments.train -m " + " ".join(config.hydra.overrides.task)
        log.info("building the sweep report of %s", sweep)
        try:
            path = build_report(sweep, command=command)
        except Exception as e:  # noqa: BLE001 - a report failure must not hide the finished jobs
            log.warning("sweep report failed (%s: %s); rebuild it with: python -m analysis %s", type(e).__name__, e,
                        sweep)
            return
        print(f"report: {path}", file=sys.stderr)
