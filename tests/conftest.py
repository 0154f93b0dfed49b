import os

# Two cores: the session's torch runs on both, unless pytest-xdist runs two workers (one thread each).
# Subprocess runs of the tests ask for one thread each.
if os.environ.get("PYTEST_XDIST_WORKER"):
    THREADS = 1
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["GRPO_LAB_REPORT_PROCESSES"] = "1"  # a report's figures drawn in its own process, not a second one
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


# The heaviest tests (30-110 s each on 2 idle cores: whole torchrun runs under both strategies, kill-and-resume
# of two ranks, a refused sweep resume, disk faults, benchmark smokes) are marked slow here, in one place: with
# them the README's command took 24 minutes, past CI's 20 with the install. `python -m pytest -m slow -n 0`
# runs them; run it before changing what they guard (the distributed strategies, guards, benchmarks).
SLOW = {
    "tests/test_distributed.py::test_killed_rank_fails_the_run_and_the_same_command_resumes",
    "tests/test_distributed.py::test_two_rank_replay_keeps_one_buffer_resumes_exactly",
    "tests/test_distributed.py::test_fsdp_run_equals_the_ddp_run",
    "tests/test_distributed.py::test_two_rank_shaped_and_reused_update_equals_one_process[fsdp]",
    "tests/test_distributed.py::test_two_rank_update_equals_one_process_on_the_combined_batch[fsdp]",
    "tests/test_distributed.py::test_a_stuck_rank_fails_the_run_after_the_timeout",
    "tests/test_distributed.py::test_fsdp_rollout_gathers_once_and_decodes_without_collectives",
    "tests/test_refused_start.py::test_a_refused_sweep_resume_leaves_the_whole_sweep_as_it_was",
    "tests/test_faults.py::test_a_disk_that_fills_during_a_checkpoint_fails_the_run_and_loses_nothing",
    "tests/test_faults.py::test_a_read_only_run_directory_is_one_line_and_stays_as_it_was",
    "tests/test_benchmarks.py::test_analysis_speed_benchmark_smoke_and_its_guard",
    "tests/test_benchmarks.py::test_speed_regression_benchmark_smoke",
    "tests/test_cli_messages.py::test_evaluate_help_and_config_need_no_run_dir",
    "tests/test_experiments.py::test_submitit_local_sweep_writes_its_report",
}


# Tests of several seconds to a minute each (real command lines and sweeps in subprocesses, torchrun, the
# SmolLM2 model, report rebuilds), by file or by test, are marked heavy: the README's `python -m pytest -q`
# leaves them out, so a newcomer's first run ends in minutes; CI (.ci/run) runs them all the same, with
# `-m 'not slow'`. Chosen from one idle run's durations (`--durations=0`): the heaviest files whole (their
# module fixtures are paid once a file), then the heaviest tests of the rest.
HEAVY: set[str] = set()


def _listed(nodeid: str, names: set[str]) -> bool:
    """Whether a test is named in `names`: by its id, its id without parameters, or its file."""
    return nodeid in names or nodeid.split("[")[0] in names or nodeid.split("::")[0] in names


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _listed(item.nodeid, SLOW):
            item.add_marker(pytest.mark.slow)
        elif _listed(item.nodeid, HEAVY):
            item.add_marker(pytest.mark.heavy)
