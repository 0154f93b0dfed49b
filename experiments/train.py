"""Train one GRPO job (or a sweep of them with -m). Composes the config and calls the library.

    python -m experiments.train max_steps=50 sampler.group_size=4
    python -m experiments.train -m experiment=fixed_vs_adaptive seed=0,1
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from experiments.common import preflight, register_configs, to_train_config
from grpo_lab.trainer import train

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="train")
def run(cfg: DictConfig) -> None:
    train(to_train_config(cfg))


def main() -> None:
    error = preflight("train", sys.argv[1:])
    if error:
        sys.exit(f"config error: {error}")
    run()


if __name__ == "__main__":
    main()
