"""Evaluate a run directory: the base model and its checkpoints, n samples per held-out prompt.

    python -m experiments.evaluate run_dir=multirun/2026-11-30/10-00-00/0 n=32
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from experiments.common import INSPECT_FLAGS, preflight, register_configs, typed
from experiments.job_files import open_job_logs
from grpo_lab.config import EvalJobConfig, TrainConfig
from grpo_lab.run.evaluate import evaluate_checkpoints
from grpo_lab.run.guards import CONFIG_NAME, saved_config

register_configs()


def unflatten(flat: dict) -> dict:
    """{"sampler.group_size": 8} -> {"sampler": {"group_size": 8}}."""
    tree: dict = {}
    for key, value in flat.items():
        *path, leaf = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def run_config(run_dir: Path) -> TrainConfig:
    """The TrainConfig a run was trained with: its config.json, the record every start is checked against
    (Hydra's .hydra/config.yaml only for runs made before config.json existed)."""
    saved = saved_config(run_dir)
    if saved is not None:
        return typed("train", OmegaConf.create(unflatten(saved)))
    path = run_dir / ".hydra" / "config.yaml"
    if not path.exists():
        raise FileNotFoundError(f"run_dir: {run_dir} has no {CONFIG_NAME} (nor .hydra/config.yaml)")
    return typed("train", OmegaConf.load(path))


@hydra.main(version_base="1.3", config_path="../conf", config_name="evaluate")
def run(cfg: DictConfig) -> None:
    job: EvalJobConfig = typed("evaluate", cfg)
    run_dir = Path(job.run_dir)
    try:
        steps = evaluate_checkpoints(run_config(run_dir), run_dir, n=job.n, temperature=job.temperature,
                                     steps=job.steps, on_start=lambda _: open_job_logs())
    except (FileNotFoundError, ValueError) as e:  # a wrong run_dir or step: say so in one line
        sys.exit(f"error: {e}")
    print(f"evaluated steps {steps} of {run_dir}: {job.n} samples per held-out prompt")


def main() -> None:
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        from experiments.help import evaluate_help

        print(evaluate_help())
        return
    if any(a.split("=")[0] in INSPECT_FLAGS for a in sys.argv[1:]):  # prints a config, runs nothing: no run_dir needed
        run()
        return
    jobs, error = preflight("evaluate", sys.argv[1:])
    if error:
        sys.exit(f"config error: {error}")
    for job in jobs:  # before Hydra makes run_dir its output folder: a typo must not create a directory
        if not (Path(job.run_dir) / "run.json").is_file():
            what = "no such directory" if not Path(job.run_dir).exists() else "not a grpo-lab run directory (no run.json)"
            sys.exit(f"error: run_dir={job.run_dir}: {what}")
    run()


if __name__ == "__main__":
    main()
