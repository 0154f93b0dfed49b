"""Train one GRPO job (or a sweep of them with -m). Composes the config and calls the library.

    python -m experiments.train max_steps=50 sampler.group_size=4
    python -m experiments.train -m experiment=fixed_vs_adaptive seed=0,1
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from experiments.common import preflight, register_configs, to_train_config
from grpo_lab.config import InputError
from grpo_lab.policy import build_tiny
from grpo_lab.trainer import train

register_configs()
INSPECT_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc",
                 "--resolve"}


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def run(cfg: DictConfig) -> None:
    try:
        train(to_train_config(cfg))
    except InputError as e:  # a busy or mismatched run directory, a bad data file: one line, no traceback
        sys.exit(f"error: {e}")


def main() -> None:
    jobs, error = preflight("train", sys.argv[1:])
    if error:
        sys.exit(f"config error: {error}")
    inspecting = any(a.split("=")[0] in INSPECT_FLAGS for a in sys.argv[1:])  # prints a config or help, runs nothing
    if not inspecting and any(job.model.name == "tiny" for job in jobs):
        build_tiny()  # once, with every core, before parallel jobs would each build it on one thread
    run()


if __name__ == "__main__":
    main()
