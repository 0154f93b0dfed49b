"""Train one GRPO job (or a sweep of them with -m). Composes the config and calls the library.

    python -m experiments.train max_steps=50 sampler.group_size=4
    python -m experiments.train -m experiment=fixed_vs_adaptive seed=0,1
    torchrun --standalone --nproc_per_node 8 -m experiments.train hydra.run.dir=runs/big
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from datetime import datetime
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig

from experiments.common import (
    CONF_DIR,
    INSPECT_FLAGS,
    config_warnings,
    preflight_plan,
    register_configs,
    to_train_config,
)
from experiments.job_files import accept
from experiments.resume import refusal
from grpo_lab.config import TrainConfig
from grpo_lab.errors import InputError
from grpo_lab.progress import Heartbeat
from grpo_lab.run.signals import Killed

register_configs()
log = logging.getLogger(__name__)
COMMAND_PID = "GRPO_LAB_COMMAND_PID"  # the process the command line started: a job elsewhere runs in a pool's worker


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def run(cfg: DictConfig) -> None:
    log.info("job %s: loading torch and transformers", HydraConfig.get().job.get("num", 0))
    with Heartbeat(doing="loading torch and transformers"):  # slow on a busy machine: keep saying so
        import torch

        from grpo_lab import distributed
        from grpo_lab.train.trainer import Diverged, train

    job = to_train_config(cfg)
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN and not distributed.under_torchrun():
        job = on_sweep_gpu(job, hc.job.num, torch.cuda.device_count())
    try:  # .hydra/ and the job log are written only once the run's guards accept the start
        run_dir = train(job, on_start=lambda folder: accept(folder, cfg))
    except (InputError, Diverged) as e:  # a busy or mismatched run directory, a bad file: one line, no traceback
        sys.exit(f"error: {e}")
    except OSError as e:  # the disk failed the job (full, read-only, a quota): run.json says so where it could
        sys.exit(f"error: {disk_error(e)}; the job stopped (run.json: failed, with the traceback); once that is "
                 "fixed, the same command resumes it from its last checkpoint")
    except Killed as e:
        killed(e)
    shown = os.path.relpath(run_dir) if not os.path.relpath(run_dir).startswith("..") else run_dir
    log.info("report: python -m analysis %s", shown)


class JobKilled(CompactHydraException):
    """A sweep's job stopped by a signal in a pool's worker process (launcher=joblib), as an ordinary error: Hydra
    records that job failed, the pool keeps running the sweep's other jobs, and the sweep ends saying this line
    (a compact error: no traceback)."""


def killed(e: Killed) -> None:
    """A job stopped by SIGTERM or SIGINT (run.json: killed), said in one line. In the command's own process
    it exits as a killed process does (128 + the signal); in a pool's worker only the job ends: the signal was
    sent to stop it, and the sibling jobs that worker's pool runs are not the signal's to stop."""
    line = f"{e}; run.json: killed; the same command resumes it from its last checkpoint"
    if os.environ.get(COMMAND_PID, str(os.getpid())) != str(os.getpid()):
        log.error("%s", line)
        raise JobKilled(line) from None
    print(f"error: {line}", file=sys.stderr)
    sys.exit(128 + e.signum)


def disk_error(e: OSError) -> str:
    """An OSError as 'writing PATH: No space left on device (ENOSPC)'."""
    code = errno.errorcode.get(e.errno or 0, "")
    where = f"writing {e.filename}: " if e.filename else ""
    return f"{where}{e.strerror or e}" + (f" ({code})" if code else "")


def on_sweep_gpu(job: TrainConfig, job_num: int, n_gpus: int) -> TrainConfig:
    """A sweep's job k runs on GPU k mod n when the machine has several (parallel joblib jobs would
    otherwise all land on GPU 0); an explicit model.device is left alone."""
    from grpo_lab.distributed import job_gpu

    if job.model.device == "auto" and n_gpus > 1:
        job.model.device = f"cuda:{job_gpu(job_num, n_gpus)}"
    return job


def shared_run_dir(args: list[str], first: TrainConfig) -> list[str]:
    """Under torchrun every rank must write into one run directory, but Hydra names it by each
    process's clock: unless hydra.run.dir is given, rank 0's name is broadcast to all."""
    from grpo_lab import distributed

    if any(a.startswith("hydra.run.dir=") for a in args):
        return args
    distributed.setup(first.dist.backend, first.dist.timeout_s)
    stamp = distributed.broadcast_object(datetime.now().strftime("%Y-%m-%d/%H-%M-%S"))
    return [*args, f"hydra.run.dir=runs/{stamp}"]


def main() -> None:
    if any(a in ("--help", "-h") for a in sys.argv[1:]):  # our keys with their meanings (Hydra's: --hydra-help)
        from experiments.help import train_help

        print(train_help(Path(CONF_DIR)))
        return
    os.environ[COMMAND_PID] = str(os.getpid())  # inherited by a launcher's worker processes
    jobs, base, error = preflight_plan("train", sys.argv[1:])
    if error:
        sys.exit(f"config error: {error}")
    for warning in config_warnings(jobs):  # valid, but cannot learn: said once, before anything loads
        print(f"warning: {warning}", file=sys.stderr)
    inspecting = any(a.split("=")[0] in INSPECT_FLAGS for a in sys.argv[1:])  # prints a config or help, runs nothing
    refused = None if inspecting else refusal("train", base, sys.argv[1:], jobs)
    if refused:  # a folder that cannot be written, or a resume with another config: before Hydra writes anything
        sys.exit(f"error: {refused}")
    torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # as grpo_lab.distributed reads it
    if torchrun and not inspecting and any(a in ("-m", "--multirun") for a in sys.argv[1:]):
        sys.exit("config error: -m under torchrun: a sweep starts its own jobs; run torchrun once per job, "
                 "or sweep with launcher=slurm")
    if not inspecting:
        # Until Hydra sets up each job's logging: these lines go to stderr
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        log.info("config checked; loading torch and transformers")
        if torchrun:
            sys.argv[1:] = shared_run_dir(sys.argv[1:], jobs[0])
    run()
    if torchrun:
        from grpo_lab import distributed

        distributed.teardown()


if __name__ == "__main__":
    main()
