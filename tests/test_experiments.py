"""Config composition, one-line rejection of bad overrides, and real Hydra runs into tmp_path."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from reference import findings, in_words

from experiments.common import preflight, register_configs
from grpo_lab.run.tables import read_table

register_configs()
ROOT = Path(__file__).resolve().parent.parent

INVALID = [  # (override, the key the error must name)
    ("sampler.group_size=1", "sampler.group_size"),
    ("sampler.group_size=abc", "sampler.group_size"),
    ("sampler.name=greedy", "sampler.name"),
    ("sampler.resample_on_tie.max_rounds=0", "sampler.resample_on_tie.max_rounds"),
    ("sampler.dynamic.max_rounds=0", "sampler.dynamic.max_rounds"),
    ("sampler.max_rounds=3", "sampler.resample_on_tie.max_rounds"),  # a key that moved into its sampler's block
    ("sampler.resample_on_tie.pool=first", "sampler.resample_on_tie.pool"),
    ("sampler.band.lo=1.5", "sampler.band.lo"),
    ("sampler.band_lo=0.2", "sampler.band.lo"),
    ("sampler.band.explore=2", "sampler.band.explore"),
    ("algo.eps_low=0", "algo.eps_low"),
    ("algo.eps_high=-0.1", "algo.eps_high"),
    ("algo.beta=-1", "algo.beta"),
    ("algo.mu=0", "algo.mu"),
    ("algo.std=bessel", "algo.std"),
    ("algo.loss_agg=mean", "algo.loss_agg"),
    ("algo.lr=0", "algo.lr"),
    ("rollout.max_new_tokens=0", "rollout.max_new_tokens"),
    ("rollout.temperature=-1", "rollout.temperature"),
    ("max_samples=10", "max_samples"),  # below one step's draw
    ("max_samples=100000000", "max_samples"),  # not reachable in max_steps
    ("task.difficulty=hardness", "task.difficulty"),
    ("model=gpt5", "model/gpt5"),
    ("model.dtype=int8", "model.dtype"),
    ("task.name=mathset", "task.path"),
    ("task=mathset task.path=/nonexistent/math.jsonl", "task.path"),
    ("model=local model.path=/nonexistent/model", "model.path"),
    ("max_steps=1.5", "max_steps"),
    ("prompts_per_step=0", "prompts_per_step"),
    ("dist.backend=mpi", "dist.backend"),
    ("dist.timeout_s=0", "dist.timeout_s"),
    ("eval.every_samples=-1", "eval.every_samples"),
    ("eval.every_updates=-1", "eval.every_updates"),
    ("algo.tied_batch=maybe", "algo.tied_batch"),
    ("model.dtype=float16", "model.dtype"),  # no loss scaling: refused, not silently unstable
    ("algo.micro_batch_groups=0", "algo.micro_batch_groups"),
    ("algo.unit_weight=token", "algo.unit_weight"),
    ("rollout.max_rows_per_call=0", "rollout.max_rows_per_call"),
    ("checkpoint.keep_last=0", "checkpoint.keep_last"),
    ("model.logprob_chunk=-1", "model.logprob_chunk"),
    # adaptive samplers
    ("sampler=reinforce_ada sampler.reinforce_ada.exit_rule=any", "sampler.reinforce_ada.exit_rule"),
    ("sampler=reinforce_ada sampler.reinforce_ada.max_per_prompt=4", "sampler.reinforce_ada.max_per_prompt"),
    ("sampler=knapsack sampler.knapsack.round_size=3", "sampler.knapsack.min_per_prompt"),
    ("sampler=knapsack sampler.knapsack.value=gradient", "sampler.knapsack.value"),
    ("sampler=greso sampler.greso.min_keep=0", "sampler.greso.min_keep"),
    ("sampler=greso sampler.greso.p_easy=2", "sampler.greso.p_easy"),
    ("task.answer_format=latex", "task.answer_format"),
    ("task.chat_template=true", "task.chat_template"),  # the built-in model has no chat template
    ("task.system_prompt=hi", "task.system_prompt"),
    ("rollout.stop=['']", "rollout.stop"),
    ("model.gguf_file=x.gguf", "model.gguf_file"),
    ("model=local model.path=pkg:no_such_package", "model.path"),
    # learning from ties
    ("algo.advantage=gpro", "algo.advantage"),
    ("algo.zvp_alpha=0", "algo.zvp_alpha"),
    ("sampler=pods sampler.pods.n=4", "sampler.pods.n"),
    ("sampler.replay.size=0", "sampler.replay.size"),
    ("sampler=dars sampler.dars.schedule=et2", "sampler.dars.schedule"),
    ("sampler=dars sampler.dars.max_per_prompt=4", "sampler.dars.max_per_prompt"),
    ("arm=nope", "arm/nope"),
]


@pytest.mark.parametrize("override,key", INVALID)
def test_invalid_override_is_one_line_naming_the_key(override, key):
    _, error = preflight("train", override.split())
    assert error is not None and key in error and "\n" not in error


def test_valid_presets_compose_and_a_bad_swept_value_is_caught():
    for args in (["experiment=ties_by_difficulty"], ["experiment=fixed_vs_adaptive"], ["experiment=equal_budget"],
                 ["algo=dapo", "sampler=dynamic"], ["algo=dr_grpo", "sampler=band"], ["launcher=joblib"],
                 ["-m", "seed=0,1", "sampler=fixed,resample_on_tie"], ["-m", "experiment=samplers"],
                 ["sampler=reinforce_ada"], ["sampler=knapsack"], ["sampler=greso"], ["algo=ngrpo"],
                 ["algo=rl_zvp", "sampler=replay"], ["sampler=pods"], ["sampler=dars"], ["arm=dars"],
                 ["-m", "experiment=tie_learning"]):
        jobs, error = preflight("train", args)
        assert error is None and jobs, args
    assert "sampler.group_size" in preflight("train", ["-m", "sampler.group_size=4,1"])[1]


def test_the_tie_learning_arms_differ_only_in_the_rule_and_the_sampler():
    """Each arm is one job config; arms differ from plain GRPO's in algo.advantage and sampler.name alone."""
    import dataclasses

    def flat(obj, prefix=""):
        out = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            out |= flat(v, f"{prefix}{f.name}.") if dataclasses.is_dataclass(v) else {f"{prefix}{f.name}": v}
        return out

    jobs, error = preflight("train", ["-m", "experiment=tie_learning"])
    assert error is None
    jobs = [j for j in jobs if j.algo.beta == 0.04]  # the common-recipe arms; the paper arms: tests/test_recipes.py
    arms = {(j.algo.advantage, j.sampler.name) for j in jobs}
    assert arms == {("grpo", "fixed"), ("ngrpo", "fixed"), ("rl_zvp", "fixed"), ("grpo", "pods"), ("grpo", "replay"),
                    ("grpo", "dynamic"), ("grpo", "dars"), ("spo", "spo"), ("grpo", "mopps"), ("grpo", "speed"),
                    ("grpo", "ar3po")}
    base = flat(next(j for j in jobs if (j.algo.advantage, j.sampler.name, j.seed) == ("grpo", "fixed", 0)))
    for j in jobs:
        changed = {k for k, v in flat(j).items() if v != base[k]}
        assert changed <= {"algo.advantage", "sampler.name", "seed"}, changed
    assert {j.seed for j in jobs} == set(range(13))


def test_one_spelling_per_sampler_gives_one_run():
    """`sampler=X` and `sampler.name=X` compose the same config, for every sampler (its keys come with it)."""
    from grpo_lab.samplers import SAMPLERS

    for name, kind in SAMPLERS.items():
        rule = ["algo=spo"] * kind.one_answer  # a one-answer sampler trains only under its own rule
        (group,), error = preflight("train", [f"sampler={name}", *rule])
        (field,), error2 = preflight("train", [f"sampler.name={name}", *rule])
        assert error is None and error2 is None and group == field, name
        assert group.sampler.name == name


def _cli(args, cwd, timeout=600):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=timeout)


def test_cli_rejects_bad_override_before_loading_a_model(tmp_path):
    out = _cli(["sampler.group_size=1", f"hydra.run.dir={tmp_path}/run"], ROOT)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        "config error: sampler.group_size=1 is invalid: must be >= 2 (a group of one has no baseline)"]
    assert not (tmp_path / "run").exists()


def test_multirun_fixed_vs_adaptive_at_equal_samples(tmp_path):
    sweep = tmp_path / "sweep"
    budget = 4 * 4 * 5  # five fixed steps of 4 prompts x 4 samples
    out = _cli(["-m", "experiment=fixed_vs_adaptive", f"max_samples={budget}", "prompts_per_step=4",
                "sampler.group_size=4", "task.levels=[1,4]", "task.train_per_level=8", "task.eval_per_level=2",
                "eval.n=4", "seed=0", f"hydra.sweep.dir={sweep}"], ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if (p / "run.json").exists())
    assert len(jobs) == 2
    for job in jobs:
        assert {"config.yaml", "hydra.yaml", "overrides.yaml"} <= {p.name for p in (job / ".hydra").iterdir()}
        assert json.loads((job / "run.json").read_text())["status"] == "done"
        g = read_table(job, "groups").to_pandas()
        assert g["samples_total"].tolist() == g["group_size"].cumsum().tolist()  # every sample counted
        per_step = g.groupby("step")["group_size"].sum()
        assert budget <= g["samples_total"].iloc[-1] < budget + per_step.iloc[-1]  # stopped within one step's draw
        ev = read_table(job, "eval").to_pandas()
        assert set(ev["step"]) == {0, g["step"].max()} and ev["answer"].notna().any()
        assert (ev.groupby(["step", "prompt_id"]).size() == 4).all()
    (adaptive_job,) = [j for j in jobs
                       if "sampler.name=resample_on_tie" in (j / ".hydra" / "overrides.yaml").read_text()]
    adaptive = read_table(adaptive_job, "groups").to_pandas()
    assert (adaptive["round"] > 0).any()  # level 1 and 4 prompts tie often: extra rounds were drawn
    assert (sweep / "report" / "REPORT.md").exists()  # the on_multirun_end callback built it


def test_a_sweep_of_batch_sizes_at_one_budget_is_compared_at_equal_updates_too(tmp_path):
    """Unequal updates at one budget, through Hydra: `prompts_per_step=2,4` at one `max_samples` takes 8 and 4
    optimizer steps to the budget (an update every step: `algo.tied_batch=step`); with `eval.every_updates=2` every
    job is evaluated at 4 updates, the report's equal-updates point. The held-out comparisons have rows at equal
    updates (both sides at step 4), and the Findings name both arms' updates."""
    import pandas as pd

    sweep, budget = tmp_path / "sweep", 8 * 2 * 4  # eight steps of 2 prompts x 4 samples, four of 4 prompts
    out = _cli(["-m", "prompts_per_step=2,4", "seed=0,1", f"max_samples={budget}", "max_steps=100",
                "sampler.group_size=4", "task.levels=[1,2]", "task.train_per_level=8", "task.eval_per_level=4",
                "eval.n=4", "eval.every_updates=2", "eval.every_samples=0", "threads=1", f"hydra.sweep.dir={sweep}"],
               ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    steps = {job.name: read_table(job, "steps").to_pandas()["step"].max() for job in sweep.iterdir()
             if (job / "run.json").exists()}
    assert sorted(steps.values()) == [4, 4, 8, 8]
    table = pd.read_csv(sweep / "report" / "tables" / "at_k_comparisons.csv", dtype={"steps_a": str, "steps_b": str})
    at_steps = table[table["alignment"] == "updates"]
    assert len(at_steps) and set(at_steps["checkpoint"]) == {"4 updates"}
    assert set(at_steps["steps_a"]) == set(at_steps["steps_b"]) == {"4, 4"}
    assert set(at_steps["updates_a"]) == set(at_steps["updates_b"]) == {4}
    final = table[(table["checkpoint"] == "final") & (table["metric"] == "pass@k") & (table["k"] == 1)]
    assert final["alignment"].tolist() == ["samples"] and final["samples_a"].iloc[0] == final["samples_b"].iloc[0]
    line = next(ln for ln in in_words(sweep / "report" / "REPORT.md") if ln.startswith("held-out pass@1:"))
    assert "At equal samples 2 took 8 updates and 4 4; at equal updates (4 updates): " in line, line
    said = findings(sweep / "report" / "REPORT.md")  # the first screen: a verdict at each alignment
    assert [b.split("**")[1] for b in said if b.startswith("**Equal")] == ["Equal samples", "Equal updates"]


def test_standalone_evaluation_of_base_and_checkpoints(tmp_path):
    run = tmp_path / "run"
    out = _cli(["max_steps=2", "checkpoint_every=1", "prompts_per_step=2", "sampler.group_size=2", "task.levels=[1,2]",
                "task.train_per_level=4", "task.eval_per_level=3", "eval=none", f"hydra.run.dir={run}"], ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert not (run / "eval").exists()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ev = subprocess.run([sys.executable, "-m", "experiments.evaluate", f"run_dir={run}", "n=5"], cwd=ROOT, env=env,
                        text=True, capture_output=True, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    rows = read_table(run, "eval").to_pandas()
    assert sorted(set(rows["step"])) == [0, 1, 2]
    assert (rows.groupby(["step", "prompt_id"])["sample"].apply(sorted).apply(list) == [list(range(5))] * 18).all()
    assert rows["run_id"].unique().tolist() == [json.loads((run / "run.json").read_text())["run_id"]]
    drawn = read_table(run, "groups").to_pandas().groupby("step")["samples_total"].max()
    assert rows.groupby("step")["samples_total"].first().to_dict() == {0: 0, 1: drawn[1], 2: drawn[2]}  # from state.pt
    bad = subprocess.run([sys.executable, "-m", "experiments.evaluate", f"run_dir={run}", "steps=[7]"], cwd=ROOT,
                         env=env, text=True, capture_output=True, timeout=600)
    assert bad.returncode != 0 and "steps: no checkpoint for step 7" in bad.stderr


def test_submitit_local_sweep_writes_its_report(tmp_path):
    """launcher=submitit_local: the submitit path of launcher=slurm, as local processes."""
    sweep = tmp_path / "sweep"
    out = _cli(["-m", "launcher=submitit_local", "seed=0,1", "max_steps=2", "prompts_per_step=2",
                "sampler.group_size=2", "task.levels=[1,2]", "task.train_per_level=4", "task.eval_per_level=2",
                "eval.n=2", f"hydra.sweep.dir={sweep}"], ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if (p / "run.json").exists())
    assert [j.name for j in jobs] == ["0", "1"]
    for job in jobs:
        assert json.loads((job / "run.json").read_text())["status"] == "done"
        assert read_table(job, "steps").num_rows == 2
    assert (sweep / ".submitit").is_dir()  # it went through submitit
    assert (sweep / "report" / "REPORT.md").exists()


def test_sweep_job_k_runs_on_gpu_k_mod_n():
    from experiments.train import on_sweep_gpu
    from grpo_lab.config import TrainConfig

    assert [on_sweep_gpu(TrainConfig(), k, 3).model.device for k in range(5)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:0", "cuda:1"]
    assert on_sweep_gpu(TrainConfig(), 3, 1).model.device == "auto"  # one GPU (or none): left to "auto"
    pinned = TrainConfig()
    pinned.model.device = "cpu"
    assert on_sweep_gpu(pinned, 1, 4).model.device == "cpu"  # an explicit device is kept


@pytest.mark.parametrize("args,jobs", [(["-m", "experiment=main"], 11),  # both samplers, seeds 0-9
                                       (["-m", "seed=0,1", "sampler.name=fixed,dynamic", "algo.lr=1e-4,0.2",
                                         "task.levels=[1],[2,4]", "sampler=fixed,greso", "max_samples=null,4096"], 7)])
def test_swept_values_set_on_one_compose_equal_a_compose_per_job(args, jobs):
    """compose_jobs composes once and sets each swept plain value on a copy; the plain way composes every job."""
    from experiments.common import compose_each_job, compose_jobs

    plain = compose_each_job("train", args)
    assert compose_jobs("train", args) == plain
    assert len(plain) == jobs and len({(j.seed, j.sampler.name, j.algo.lr, tuple(j.task.levels)) for j in plain}) > 2


@pytest.mark.parametrize("args,key", [(["-m", "seed=0,abc"], "seed"),
                                      (["-m", "sampler.group_size=4,x"], "sampler.group_size"),
                                      (["-m", "seed=0,1", "sampler.group_size=8,1"], "sampler.group_size")])
def test_a_bad_swept_value_is_named_whatever_its_position(args, key):
    _, error = preflight("train", args)
    assert error is not None and key in error and "\n" not in error
