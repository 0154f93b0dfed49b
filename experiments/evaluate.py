"""Evaluate a run directory: the base model and its checkpoints, n samples per held-out prompt.

    python -m experiments.evaluate run_dir=multirun/2026-11-30/10-00-00/0 n=32

Every value, step, checkpoint file, the memory the rows take and rows already there at the same settings are
checked before Hydra starts or any model loads (grpo_lab/jobs/evaluate.py: plan_evaluation), each refusal one line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from experiments.common import INSPECT_FLAGS, preflight, register_configs, typed
from experiments.job_files import open_job_logs
from grpo_lab.config import EvalJobConfig, TrainConfig
from grpo_lab.errors import ConfigError, InputError
from grpo_lab.jobs.evaluate import Plan, evaluate_checkpoints, plan_evaluation, scores_table, step_scores
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
    try:  # checked again under the run's lock (evaluate_checkpoints): the preflight's view may be stale
        plan = _plan(job)
        scores: dict[int, dict] = {}
        steps = evaluate_checkpoints(run_config(run_dir), run_dir, n=job.n, temperature=job.temperature,
                                     steps=job.steps, overwrite=job.overwrite, on_start=lambda _: open_job_logs(),
                                     on_step=lambda step, rows: scores.__setitem__(step, step_scores(rows)))
    except ConfigError as e:
        sys.exit(f"config error: {e}")
    except (FileNotFoundError, ValueError) as e:  # a wrong run_dir or step, rows already there: say so in one line
        sys.exit(f"error: {e}")
    where = "the run's own eval parts" if plan.tag is None else f"eval parts tagged {plan.tag}, beside the run's own"
    print(f"evaluated steps {steps} of {run_dir}: {plan.setting.text()} ({where})")
    print(scores_table(scores))
    print(f"the report (python -m analysis {run_dir}) shows every evaluation's scores, each under its settings")


def _plan(job: EvalJobConfig) -> Plan:
    """`plan_evaluation` of a job, against the config its run was trained with."""
    run_dir = Path(job.run_dir)
    return plan_evaluation(run_config(run_dir), run_dir, n=job.n, temperature=job.temperature, steps=job.steps,
                           overwrite=job.overwrite)


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
            what = "no such directory" if not Path(job.run_dir).exists() else \
                "not a grpo-lab run directory (no run.json)"
            sys.exit(f"error: run_dir={job.run_dir}: {what}")
        try:  # values, steps, checkpoint files, memory, rows already there: before any model loads
            plan = _plan(job)
        except ConfigError as e:
            sys.exit(f"config error: {e}")
        except (FileNotFoundError, InputError) as e:
            sys.exit(f"error: {e}")
        if plan.setting.temperature == 0 and plan.setting.n > 1:
            print(f"warning: temperature=0 with n={plan.setting.n}: the n greedy samples are identical, so pass@k and "
                  "cons@k equal pass@1 at every k", file=sys.stderr)
    run()


if __name__ == "__main__":
    main()
