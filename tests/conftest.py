import os

# Two cores: the session's torch runs on both, unless pytest-xdist runs two workers (one thread each).
# Subprocess runs of the tests ask for one thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    THREADS = 1
    os.environ["OMP_NUM_THREADS"] = "1"
else:
    THREADS = 2
    os.environ.setdefault("OMP_NUM_THREADS", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_lab.config import TrainConfig  # noqa: E402

torch.set_num_threads(THREADS)


@pytest.fixture
def tiny_cfg(tmp_path) -> TrainConfig:
    """A run small enough for a test: 3 levels, 4 prompts a step, groups of 4."""
    cfg = TrainConfig(out_dir=str(tmp_path / "run"), max_steps=4, prompts_per_step=6, checkpoint_every=2)
    cfg.task.levels = [1, 3, 4]
    cfg.task.train_per_level = 8
    cfg.task.eval_per_level = 4
    cfg.sampler.group_size = 4
    cfg.eval.n = 4
    return cfg
