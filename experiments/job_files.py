"""What Hydra writes into a job's folder before the job runs (`.hydra/{config,hydra,overrides}.yaml` and the
job log), written here instead once the run's guards accept the start, so a refused start (a busy directory,
a resume with another config) leaves every file of the folder as it was.

conf/train.yaml sets `hydra.output_subdir: null` (Hydra writes no `.hydra/`) and makes the job log's file
handler a `DeferredFileHandler`, which keeps the records until `accept` opens the file; conf/evaluate.yaml
does the same for `evaluate.log`. The files keep Hydra's names and contents, so readers of `.hydra/` (the
analysis, `--experimental-rerun` aside) find what they read.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from grpo_lab import distributed

HYDRA_SUBDIR = ".hydra"  # Hydra's default output_subdir


class DeferredFileHandler(logging.Handler):
    """A FileHandler that opens its file only when `open()` is called; records before that are kept (the last
    `capacity` of them) and written first. Never opened (a refused start), it leaves the file untouched."""

    def __init__(self, filename: str, mode: str = "a", encoding: str | None = "utf-8", capacity: int = 10_000):
        super().__init__()
        self.filename, self.mode, self.encoding = filename, mode, encoding
        self._pending: deque[logging.LogRecord] = deque(maxlen=capacity)
        self._file: logging.FileHandler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is None:
            self._pending.append(record)
        else:
            self._file.emit(record)

    def open(self) -> None:
        if self._file is not None:
            return
        self._file = logging.FileHandler(self.filename, self.mode, encoding=self.encoding)
        self._file.setFormatter(self.formatter)
        while self._pending:
            self._file.emit(self._pending.popleft())

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._pending.clear()
        super().close()


def open_job_logs() -> None:
    """Open every deferred job log of the root logger (the start was accepted)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, DeferredFileHandler):
            handler.open()


def write_hydra_record(run_dir: Path, task_cfg: DictConfig) -> None:
    """`<run_dir>/.hydra/{config,hydra,overrides}.yaml` as Hydra's run_job writes them (each atomically)."""
    hydra_cfg = HydraConfig.instance().cfg
    folder = Path(run_dir) / HYDRA_SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, cfg in (("config.yaml", task_cfg), ("hydra.yaml", hydra_cfg),
                      ("overrides.yaml", hydra_cfg.hydra.overrides.task)):
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
        os.replace(tmp, folder / name)


def accept(run_dir: Path, task_cfg: DictConfig) -> None:
    """The guards accepted this start: write Hydra's record of the job (rank 0) and open its log (every rank)."""
    if distributed.is_main():
        write_hydra_record(run_dir, task_cfg)
    open_job_logs()
