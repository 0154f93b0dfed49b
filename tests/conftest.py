import os

# Two cores, two torch threads; the subprocess runs of the tests ask for one each and run alone.
os.environ.setdefault("OMP_NUM_THREADS", "2")

import pytest  # noqa: E402
import torch  # noqa: E402

from grpo_lab.config import TrainConfig  # noqa: E402

torch.set_num_threads(2)


def pytest_sessionstart(session):
    """Build (or find cached) the built-in model once, with both cores, before any test or
    subprocess needs it; a subprocess limited to one thread would take twice as long."""
    from grpo_lab.model.tiny import build_tiny

    build_tiny()


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
