"""A key that the chosen option never reads is refused when the user sets or sweeps it (grpo_lab/config/reads.py): the
cases are generated from the options' own declarations, so every key of every option (each sampler's block, each
task's keys, ...) is set and swept under an option that does not read it, through the real preflight, and set
under the option that does. Every other key is listed as read by every job: a new key fails here until it is
one or the other."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.common import preflight, register_configs
from grpo_lab.advantage import RULES
from grpo_lab.config import TrainConfig, leaves
from grpo_lab.config.reads import OPTIONS, Option, owners, refuse_unread
from grpo_lab.footprint import TINY_CONFIG
from grpo_lab.rollout.engines import ENGINES
from grpo_lab.samplers import SAMPLERS
from grpo_lab.tasks import TASKS

register_configs()
ROOT = Path(__file__).resolve().parent.parent
TINY = str(TINY_CONFIG.parent)  # a real model folder for model=local
MATH = "{math}"  # the math-set file a test writes

# For each key an option is chosen by: command lines that set it, and the value each gives that key.
CHOICES: dict[str, list[tuple[list[str], object]]] = {
    # a one-answer sampler (spo) trains only under a rule that takes its baseline from it
    "sampler.name": [([f"sampler={name}", *(["algo=spo"] * cls.one_answer)], name) for name, cls in SAMPLERS.items()],
    "task.name": [(["task=arithmetic"], "arithmetic"), (["task=mathset", f"task.path={MATH}"], "mathset"),
                  (["task=gym"], "gym")],
    "model.name": [(["model=tiny"], "tiny"), (["model=local", f"model.path={TINY}"], "hf")],
    "model.lora.rank": [([], 0), (["model.lora.rank=4"], 4)],
    "algo.advantage": [(["algo=ngrpo"], "ngrpo"), (["algo.advantage=grpo"], "grpo"), (["algo=rl_zvp"], "rl_zvp")],
    "eval.n": [(["eval=none"], 0), (["eval.n=2"], 2)],
    "task.difficulty": [([], "level"), (["task.difficulty=pass_rate"], "pass_rate")],
    "task.chat_template": [([], False), (["model=local", f"model.path={TINY}", "task.chat_template=true"], True)],
    "checkpoint.keep_last": [([], None), (["checkpoint.keep_last=2"], 2)],
    "rollout.engine": [([], "hf"), (["rollout.engine=vllm"], "vllm")],
    "logger.backends": [(["logger=none"], []), (["logger=console"], ["console"]),
                        (["logger=wandb"], ["console", "wandb"])],
}
# valid values for keys whose default the option that reads them refuses
VALID = {"model.path": TINY, "task.path": MATH}
READ_BY_EVERY_JOB = {  # every key no option claims: the loop, the model, the rollout, the update, the records
    "out_dir", "seed", "max_steps", "stop_untrainable", "max_samples", "max_tokens", "prompts_per_step",
    "checkpoint_every", "threads",
    "model.name", "model.device", "model.dtype", "model.logprob_chunk", "model.length_buckets",
    "model.gradient_checkpointing",
    "model.fast_math", "model.lora.rank", "task.name", "task.difficulty", "task.chat_template", "algo.lr", "algo.beta",
    "algo.eps_low", "algo.eps_high", "algo.mu", "algo.advantage", "algo.std_eps", "algo.loss_agg",
    "algo.max_grad_norm", "algo.weight_decay", "algo.micro_batch_groups", "algo.micro_batch_tokens",
    "algo.unit_weight", "algo.mask_truncated", "algo.rollout_correction", "algo.rollout_correction_cap",
    "algo.tied_batch", "algo.tied_kl", "algo.tied_norm", "algo.kl_grad_every",
    "rollout.engine", "sampler.name", "rollout.temperature",
    "rollout.max_new_tokens", "rollout.max_rows_per_call", "rollout.stop", "reward.accuracy", "reward.format",
    "eval.n", "eval.every", "eval.every_samples", "eval.every_tokens", "eval.every_updates",
    "checkpoint.keep_last",
    "checkpoint.final_weights_only", "logger.backends", "log_completions", "resume", "dist.backend",
    "dist.timeout_s", "dist.strategy",
}


def hydra_value(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str) and re.search(r"[{}\[\],:'\" ]", value):
        return repr(value)  # quoted, as Hydra's grammar needs
    return str(value)


def choose(option: Option, on: bool, others: list[Option] = ()) -> list[str]:
    """A command line under which `option` is chosen (on) or not, and none of `others` is."""
    for overrides, value in CHOICES[option.key]:
        if option.chosen(value) == on and not any(o.chosen(value) for o in others if o.key == option.key):
            return overrides
    raise AssertionError(f"CHOICES has no way to {'choose' if on else 'avoid'} {option.name}: add one")


def off(key: str) -> list[str]:
    """A command line under which no option that reads `key` is chosen."""
    out: list[str] = []
    for option in owners(key):
        out += [o for o in choose(option, False, owners(key)) if o not in out]
    return out


CASES = [(o, key) for o in OPTIONS for key, _ in leaves(TrainConfig()) if o in owners(key) and
         any(key == k or key.startswith(f"{k}.") for k in o.reads)]
DEFAULTS = dict(leaves(TrainConfig()))


@pytest.fixture(scope="module")
def math(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("math") / "math.jsonl"
    path.write_text("".join(json.dumps({"problem": f"What is ${i}+1$?", "answer": str(i + 1), "level": 1}) + "\n"
                            for i in range(30)))
    return str(path)


def run(args: list[str], math: str):
    return preflight("train", [a.replace(MATH, math) for a in args])


def test_every_key_is_read_by_every_job_or_owned_by_options():
    keys = {k for k, _ in leaves(TrainConfig())}
    owned = {k for k in keys if owners(k)}
    assert owned | READ_BY_EVERY_JOB == keys, sorted(keys - owned - READ_BY_EVERY_JOB)
    assert not owned & READ_BY_EVERY_JOB, sorted(owned & READ_BY_EVERY_JOB)
    for o in OPTIONS:  # every declared key is a key or a block of keys; every chooser has choices here
        assert all(any(k == r or k.startswith(f"{r}.") for k in keys) for r in o.reads), o.name
        assert o.key in keys and o.key in CHOICES, o.key
    claimed = {r for o in OPTIONS for r in o.reads}  # every member's block is claimed by its member
    for block, registry in (("sampler", SAMPLERS), ("rollout", ENGINES), ("task", TASKS), ("algo", RULES)):
        assert {f"{block}.{name}" for name, cls in registry.items() if cls.settings_type} <= claimed, block


@pytest.fixture(scope="module")
def composed(math):
    """The job a command line composes, once per command line."""
    made: dict[tuple[str, ...], TrainConfig] = {}

    def job(args: list[str]) -> TrainConfig:
        if tuple(args) not in made:
            jobs, error = run(args, math)
            assert error is None and len(jobs) == 1, error
            made[tuple(args)] = jobs[0]
        return made[tuple(args)]
    return job


@pytest.mark.parametrize("option,key", CASES, ids=[f"{k}@{o.name.split()[0]}" for o, k in CASES])
def test_a_key_set_or_swept_where_no_chosen_option_reads_it_is_refused(option, key, math, composed):
    value = hydra_value(DEFAULTS[key])
    base = off(key)
    _, error = run(["-m", *base, f"{key}={value},{value}"], math)  # a sweep: its jobs would be identical
    assert error is not None and "\n" not in error, (base, key)
    assert error.lower().startswith(f"{key} is swept ({value}, {value}) but read only by ".lower()), error
    assert option.name in error, error
    error = refuse_unread([composed(base)], {key: f"{key}={value}"}, {})  # set once, in a job that reads it not
    assert error is not None and error.startswith(f"{key}={value} is read only by ") and option.name in error, error


@pytest.mark.parametrize("option", OPTIONS, ids=[o.name for o in OPTIONS])
def test_the_keys_an_option_reads_are_accepted_where_it_is_chosen(option, math):
    keys = [k for o, k in CASES if o is option]
    sets = [f"{k}={hydra_value(VALID.get(k, DEFAULTS[k]))}" for k in keys]
    jobs, error = run([*choose(option, True), *sets], math)
    if option.key == "rollout.engine" and importlib.util.find_spec("vllm") is None:  # CI: its own environment
        assert error is not None and error.startswith("rollout.engine='vllm' is invalid: needs vLLM"), error
        return
    assert error is None and len(jobs) == 1, error


def test_a_key_some_jobs_read_may_be_set_but_not_swept(math):
    jobs, error = run(["-m", "sampler=fixed,pods", "sampler.pods.n=16"], math)  # the pods arm reads it
    assert error is None and len(jobs) == 2
    _, error = run(["-m", "sampler=fixed,pods", "sampler.pods.n=16,32"], math)  # fixed x 16 and fixed x 32: twins
    assert error == ("sampler.pods.n is swept (16, 32) but read only by sampler=pods, which the jobs with "
                     "sampler.name=fixed do not run: they would be identical but for a key nothing reads; sweep "
                     "sampler.pods.n only where every job runs sampler=pods")
    jobs, error = run(["-m", "arm=grpo,rl_zvp", "algo.zvp_alpha=0.2"], math)  # a group's sweep chooses too
    assert error is None and len(jobs) == 2


def test_presets_may_set_keys_for_the_options_their_arms_switch_to(math):
    # experiment=tie_learning sets sampler.pods.n, sampler.replay.size, ... for every arm; the user's own value of
    # one is read by the arm that runs it, and refused where no arm of the sweep does
    jobs, error = run(["experiment=tie_learning", "sampler.pods.n=32", "seed=0"], math)
    assert error is None and {j.sampler.name for j in jobs} >= {"fixed", "pods"}
    assert {j.sampler.pods.n for j in jobs} == {32}
    _, error = run(["experiment=main", "sampler.pods.n=32", "seed=0"], math)
    assert error == ("sampler.pods.n=32 is read only by sampler=pods; none of the 2 jobs composed does (they run "
                     "sampler.name=fixed, resample_on_tie)")


def test_refuse_unread_on_the_configs_themselves():
    fixed, pods = TrainConfig(), TrainConfig()
    pods.sampler.name = "pods"
    assert refuse_unread([fixed, pods], {"sampler.pods.n": "sampler.pods.n=8"}, {}) is None
    assert refuse_unread([fixed], {}, {"seed": ["0", "1"]}) is None  # read by every job
    assert refuse_unread([pods], {}, {"sampler.pods.n": ["8", "16"]}) is None
    assert "sampler=pods" in refuse_unread([fixed, pods], {}, {"sampler.pods.n": ["8", "16"]})
    lora = TrainConfig()
    lora.model.lora.rank = 8
    assert refuse_unread([lora], {"model.lora.alpha": "model.lora.alpha=16"}, {}) is None
    assert refuse_unread([fixed], {"model.lora.alpha": "model.lora.alpha=16"}, {}) == (
        "model.lora.alpha=16 is read only by model.lora.rank > 0 (LoRA adapters); this job runs model.lora.rank=0")


@pytest.mark.parametrize("args,message", [
    (["-m", "sampler.pods.n=8,16"], "sampler.pods.n is swept (8, 16) but read only by sampler=pods"),
    (["model.path=/nonexistent"], "model.path=/nonexistent is read only by model=local (model.name=hf); this job "
                                  "runs model.name=tiny"),
    (["out_dir=/tmp/elsewhere"], "out_dir=/tmp/elsewhere is not read: out_dir is the job's folder, set from "
                                 "hydra.run.dir"),
])
def test_the_issue_cases_from_the_command_line(tmp_path, args, message):
    out = subprocess.run([sys.executable, "-m", "experiments.train", *args, f"hydra.run.dir={tmp_path / 'run'}",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, text=True, capture_output=True,
                         timeout=600)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and lines == [f"config error: {lines[0].removeprefix('config error: ')}"], lines
    assert message in lines[0] and not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()
