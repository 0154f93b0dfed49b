"""What the command lines say: a single run's log, --info, and one-line refusals (mistyped keys,
missing run or report directories), each checked on the real commands."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.common import preflight, register_configs

register_configs()
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run(module: str, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=ENV, text=True, capture_output=True,
                          timeout=600)


@pytest.mark.parametrize("override,hint", [
    ("sampler.grop_size=4", "did you mean 'sampler.group_size'?"),
    ("samplr.group_size=4", "did you mean 'sampler.group_size'?"),
    ("max_step=3", "did you mean 'max_steps'?"),
    ("+algo.betta=0.1", "did you mean 'algo.beta'?"),  # an added key is refused too, not silently dropped
    ("logger.every_seconds=5", "did you mean 'logger.every_s'?"),
    ("pool=all", "did you mean 'sampler.resample_on_tie.pool'?"),  # a bare key of a group
    ("sampler.pool=last", "did you mean 'sampler.resample_on_tie.pool'?"),  # a key that moved into its sampler
])
def test_mistyped_key_gets_a_did_you_mean(override, hint):
    _, error = preflight("train", [override])
    assert error is not None and hint in error and "\n" not in error


def test_unknown_key_without_a_near_name_is_still_one_line():
    _, error = preflight("train", ["+zzz=1"])
    assert error == "zzz is not a config key"


@pytest.mark.parametrize("override,needed", [("model=local", "model.path=DIR"), ("task=mathset", "task.path=FILE")])
def test_a_missing_required_value_names_the_override_to_add(override, needed):
    _, error = preflight("train", [override])
    assert error is not None and needed in error and "\n" not in error


def test_help_lists_every_key_with_its_meaning():
    from experiments.common import schema_keys
    from grpo_lab.config import TrainConfig

    out = _run("experiments.train", "--help")
    assert out.returncode == 0 and out.stderr == ""
    lines = {line.split("=", 1)[0].strip(): line for line in out.stdout.splitlines() if line.startswith("  ")}
    for key in schema_keys(TrainConfig):  # every key, and a meaning beside each (read from the code's comments)
        assert key in lines, key
        assert len(lines[key].split("  ", 2)[-1].split()) >= 3, lines[key]
    group = next(line for line in out.stdout.splitlines() if line.strip().startswith("sampler: "))
    assert {"band", "dynamic", "fixed", "pods", "replay"} <= set(group.split(": ", 1)[1].replace(",", " ").split())


def test_evaluate_help_and_config_need_no_run_dir(tmp_path):
    out = _run("experiments.evaluate", "--help")
    assert out.returncode == 0 and "run_dir" in out.stdout
    out = _run("experiments.evaluate", "--cfg", "job", cwd=tmp_path)
    assert out.returncode == 0 and "run_dir: ???" in out.stdout and not list(tmp_path.iterdir())
    out = _run("experiments.evaluate", "n=4")
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        "config error: run_dir is required: add run_dir=DIR (a run directory: runs/<date>/<time> or a sweep's job "
        "folder multirun/<date>/<time>/<n>)"]


@pytest.mark.parametrize("overrides,warned", [
    (["task=mathset", "task.path={math}"], "task=mathset with the built-in model"),
    (["eval.temperature=0"], "equal pass@1 at every k"),
    (["sampler=dars"], "hard prompts gain none"),
    (["sampler=pods", "sampler.pods.n=8"], "which is sampler=fixed"),
])
def test_settings_that_cannot_learn_are_warned_in_one_line(overrides, warned, tmp_path):
    from experiments.common import config_warnings

    math = tmp_path / "math.jsonl"
    math.write_text("".join(f'{{"problem": "What is ${i}+1$?", "answer": "{i + 1}", "level": 1}}\n' for i in range(10)))
    jobs, error = preflight("train", [o.format(math=math) for o in overrides])
    assert error is None
    warnings = config_warnings(jobs)
    assert len(warnings) == 1 and warned in warnings[0] and "\n" not in warnings[0]
    assert config_warnings(preflight("train", [])[0]) == []  # the default run is not warned about


def test_info_with_a_value_prints_and_runs_nothing(tmp_path):
    out = _run("experiments.train", "--info", "defaults", f"hydra.run.dir={tmp_path}/run")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "logger/console" in out.stdout and not (tmp_path / "run").exists()


def test_evaluate_refuses_a_missing_run_dir_without_creating_it(tmp_path):
    typo = tmp_path / "no-such-run"
    out = _run("experiments.evaluate", f"run_dir={typo}")
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [f"error: run_dir={typo}: no such directory"]
    assert not typo.exists()
    out = _run("experiments.evaluate", f"run_dir={tmp_path}")
    assert out.returncode != 0 and "not a grpo-lab run directory" in out.stderr


def test_analysis_refuses_missing_and_empty_directories(tmp_path):
    out = _run("analysis", str(tmp_path / "missing"))
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'missing'}: no such directory"]
    (tmp_path / "empty").mkdir()
    out = _run("analysis", str(tmp_path / "empty"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "no grpo-lab runs" in out.stderr
    assert not (tmp_path / "empty" / "report").exists()


def test_a_single_run_logs_progress_to_its_job_log_and_ends_with_its_numbers(tmp_path):
    run = tmp_path / "run"
    out = _run("experiments.train", "max_steps=3", "prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]",
               "task.train_per_level=4", "task.eval_per_level=2", "eval.n=2", "logger.every_s=0",
               f"hydra.run.dir={run}")
    assert out.returncode == 0, out.stderr[-3000:]
    log = (run / "train.log").read_text()
    assert log.strip(), "the job log is empty"
    for expected in ("loading the model", "starting at step 1", "eval at step 0: accuracy", "step 1/3 | samples 4 |",
                     "step 3/3 | samples 12 |", "run finished:", "held-out accuracy: step 0",
                     f"report: python -m analysis {run}"):
        assert expected in log, expected
    assert "run finished:" in out.stdout  # the console shows the same lines


def _holds(job, values: dict) -> bool:
    """Every key=value of an option is what the job's typed config says."""
    def get(key):
        obj = job
        for part in key.split("."):
            obj = getattr(obj, part)
        return list(obj) if isinstance(obj, tuple) else obj
    return all(get(k) == v for k, v in values.items() if not k.startswith("hydra."))


@pytest.mark.parametrize("experiment,group", [("smollm2_ties", "eval"), ("smollm2_ties", "sampler"),
                                              ("tie_learning", "sampler")])
def test_a_group_chosen_on_the_command_line_holds_or_is_refused(experiment, group):
    """An experiment's own keys come after the config groups: `experiment=smollm2_ties eval=none` once ran
    with evaluation on. Every option of the group, under each experiment: either every job has the option's
    values, or the preflight refuses in one line naming the choice and the key that undoes it."""
    from experiments.common import _option_values

    refused = 0
    for option in sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml")):
        jobs, error = preflight("train", ["-m", f"experiment={experiment}", f"{group}={option}"])
        values = _option_values(group, option)
        if error is None:
            assert jobs and all(_holds(job, values) for job in jobs), (experiment, group, option)
        else:
            assert f"{group}={option} sets " in error and "\n" not in error, error
            key = error.split(" sets ")[1].split("=")[0]
            assert key in values and f"add {key}=" in error
            refused += 1
    assert refused  # eval=none under smollm2_ties; a sampler against its sweep of sampler.name, or the arms


def test_an_explicit_key_keeps_a_choice_the_experiment_would_undo():
    jobs, error = preflight("train", ["experiment=smollm2_ties", "eval=none", "eval.n=0"])
    assert error is None and jobs[0].eval.n == 0
