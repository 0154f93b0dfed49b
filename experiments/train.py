"""Train one GRPO job (or a sweep of them with -m). Composes the config and calls the library.

    python -m experiments.train max_steps=50 sampler.group_size=4
    python -m experiments.train -m experiment=fixed_vs_adaptive seed=0,1
"""

from __future__ import annotations

import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from experiments.common import preflight, register_configs, to_train_config
from grpo_lab.config import InputError
from grpo_lab.progress import Heartbeat

register_configs()
log = logging.getLogger(__name__)
INSPECT_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
                 "--resolve"}


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def run(cfg: DictConfig) -> None:
    log.info("job %s: loading torch and transformers", HydraConfig.get().job.get("num", 0))
    with Heartbeat(doing="loading torch and transformers"):  # slow on a busy machine: keep saying so
        from grpo_lab.trainer import train

    try:
        run_dir = train(to_train_config(cfg))
    except InputError as e:  # a busy or mismatched run directory, a bad data file: one line, no traceback
        sys.exit(f"error: {e}")
    shown = os.path.relpath(run_dir) if not os.path.relpath(run_dir).startswith("..") else run_dir
    log.info("report: python -m analysis %s", shown)


def main() -> None:
    jobs, error = preflight("train", sys.argv[1:])
    if error:
        sys.exit(f"config error: {error}")
    inspecting = any(a.split("=")[0] in INSPECT_FLAGS for a in sys.argv[1:])  # prints a config or help, runs nothing
    if not inspecting:
        # Until Hydra sets up each job's logging: these lines and the model build's go to stderr
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        log.info("config checked; loading torch and transformers")
        if any(job.model.name == "tiny" for job in jobs):
            with Heartbeat(doing="loading torch and transformers"):
                from grpo_lab.policy import build_tiny
            build_tiny()  # once, with every core, before parallel jobs would each build it on one thread
    run()


if __name__ == "__main__":
    main()
