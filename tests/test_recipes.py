"""The papers' recipes (docs/RECIPES.md): each arm's departures from its method's published recipe, listed from its
config and nothing else; the paper arms of experiment=tie_learning compose to their papers' recipes; and
`sampler.dynamic.drop=all_correct` (NGRPO's script's filter) drops exactly what a plain loop over the groups table
drops."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.data.config import flatten
from analysis.data.load import Tables
from analysis.measures.recipes import AS_PAPER, RECIPES, UNPUBLISHED, UNVERIFIED, method_of, recipe_rows, shared_base
from analysis.render.writer import Files
from analysis.sections.tie_learning import recipes as recipes_section
from experiments.common import preflight, register_configs
from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import ConfigError
from grpo_lab.run.tables import read_table
from grpo_lab.train.trainer import train

register_configs()
ROOT = Path(__file__).resolve().parent.parent
ARM = ["arm"]
BASE = {"algo.advantage": "grpo", "sampler.name": "fixed", "sampler.group_size": 8, "sampler.pods.n": 16,
        "sampler.dynamic.drop": "tied", "sampler.dars.max_per_prompt": 32, "sampler.dars.schedule": "et",
        "algo.eps_low": 0.2, "algo.eps_high": 0.2, "algo.beta": 0.04, "algo.loss_agg": "sequence",
        "algo.std": "population", "algo.std_eps": 1e-8, "algo.mu": 1, "algo.unit_weight": "sample",
        "algo.zvp_alpha": 0.1}


def jobs_of(arms: dict[str, dict], seeds=(0, 1), per_seed: dict | None = None) -> pd.DataFrame:
    """A jobs table (one row per job, its flattened config) of `arms` (name -> keys set over BASE) x seeds;
    `per_seed`: {(arm, seed): keys} set on single jobs."""
    rows = []
    for name, keys in arms.items():
        for seed in seeds:
            rows.append({"job": f"{name}-{seed}", "arm": name, "seed": seed, **BASE, **keys,
                         **(per_seed or {}).get((name, seed), {})})
    return pd.DataFrame(rows)


def departed(text: str) -> set[str]:
    """The keys a departures cell names ("algo.beta 0.04 (paper: 0); keep 8 of 16 (...)" -> {algo.beta, keep})."""
    return set() if text in (AS_PAPER, UNVERIFIED, UNPUBLISHED) else {p.split(" ")[0] for p in text.split("; ")}


# each arm: the keys set over the common recipe, and the departures that must be listed (none else)
CASES = {
    "grpo": ({}, set()),
    "ngrpo": ({"algo.advantage": "ngrpo"}, {"sampler.name", "algo.eps_low", "algo.eps_high", "algo.beta",
                                             "algo.loss_agg"}),
    "ngrpo_paper": ({"algo.advantage": "ngrpo", "sampler.name": "dynamic", "sampler.dynamic.drop": "all_correct",
                     "algo.eps_low": 0.16, "algo.eps_high": 0.24, "algo.beta": 0.0, "algo.loss_agg": "token"}, set()),
    "rl_zvp_half": ({"algo.advantage": "rl_zvp", "algo.eps_high": 0.28, "algo.zvp_alpha": 0.3}, {
        "algo.beta", "algo.loss_agg", "algo.zvp_alpha"}),
    "pods": ({"sampler.name": "pods"}, {"keep", "algo.std", "algo.std_eps", "algo.beta"}),
    "pods_paper": ({"sampler.name": "pods", "sampler.pods.n": 32, "algo.std": "sample", "algo.std_eps": 1e-4,
                    "algo.beta": 0.0}, set()),
    "dars_clip": ({"sampler.name": "dars", "algo.std": "none", "algo.beta": 0.0, "algo.loss_agg": "constant",
                   "algo.mu": 2, "algo.eps_high": 0.3, "sampler.dars.schedule": "hw"},
                  {"algo.eps_high", "sampler.dars.schedule"}),
    "dapo": ({"sampler.name": "dynamic", "algo.eps_high": 0.28, "algo.beta": 0.0, "algo.loss_agg": "token",
              "sampler.pods.n": 4, "sampler.dars.max_per_prompt": 8}, set()),  # other samplers' keys: not read
    "replay": ({"sampler.name": "replay"}, set()),
}


def test_each_arm_lists_exactly_the_departures_set_in_its_config():
    rows = recipe_rows(jobs_of({name: keys for name, (keys, _) in CASES.items()}), ARM).set_index("arm")
    assert list(rows.index) == list(CASES)  # one row per arm, in order of first appearance
    for name, (_, want) in CASES.items():
        assert departed(rows.loc[name, "departures"]) == want, (name, rows.loc[name, "departures"])
    # GRPO's values are the ones grpo-lab cites, not re-read (docs/RECIPES.md): no departure, but not "as the paper"
    assert rows.loc["grpo", "departures"] == UNVERIFIED and rows.loc["replay", "departures"] == UNPUBLISHED
    assert rows.loc["ngrpo_paper", "departures"] == AS_PAPER and rows.loc["ngrpo_paper", "verified"] == "yes"
    assert rows.loc["grpo", "method"] == "GRPO (DeepSeekMath)" and rows.loc["dapo", "method"].startswith("DAPO")
    # the values are named as the config and the paper give them; a clip at mu = 1 is inert, at mu = 2 it is not
    ngrpo = rows.loc["ngrpo", "departures"].split("; ")
    assert "algo.beta 0.04 (paper: 0)" in ngrpo and "sampler.name fixed (paper: dynamic)" in ngrpo
    assert "algo.eps_low 0.2 (paper: 0.16, inert at algo.mu=1)" in ngrpo
    assert "algo.eps_high 0.3 (paper: 0.2)" in rows.loc["dars_clip", "departures"].split("; ")  # mu 2: not inert
    assert "keep 8 of 16 (paper: 0.25 of those drawn)" in rows.loc["pods", "departures"]
    assert "algo.zvp_alpha 0.3 (paper: 0.1)" in rows.loc["rl_zvp_half", "departures"]
    assert rows.loc["ngrpo_paper", "not_settable"] == "; ".join(RECIPES["ngrpo"].not_settable)
    assert rows.loc["pods", "not_settable"] == ""


SPO = {"algo.advantage": "spo", "sampler.name": "spo", "sampler.spo.offline_n": 8, "sampler.spo.rho_min": 0.875,
       "sampler.spo.rho_max": 0.96, "sampler.spo.d_half": 0.06, "sampler.spo.epsilon": 0.05}
NEWER = {  # the newer methods: the keys set over the common recipe, and the departures that must be listed
    "spo": (SPO, {"algo.eps_high", "algo.beta", "algo.loss_agg"}),
    "spo_paper": ({**SPO, "algo.eps_high": 0.28, "algo.beta": 0.0, "algo.loss_agg": "token"}, set()),
    "spo_slow": ({**SPO, "sampler.spo.d_half": 0.5, "algo.eps_high": 0.28, "algo.beta": 0.0, "algo.loss_agg": "token"},
                 {"sampler.spo.d_half"}),
    "mopps": ({"sampler.name": "mopps", "sampler.mopps.prior_alpha": 1.0, "sampler.mopps.prior_beta": 1.0,
               "sampler.mopps.decay": 0.5, "sampler.mopps.target": 0.5, "sampler.mopps.candidates": 8,
               "sampler.mopps.selection": "mean"}, {"sampler.mopps.selection"}),
    "speed": ({"sampler.name": "speed", "sampler.speed.screen_size": 4, "sampler.speed.screen_factor": 4,
               "sampler.speed.max_rounds": 49}, {"algo.beta", "algo.loss_agg"}),
    "ar3po": ({"sampler.name": "ar3po"}, set()),
}


def test_the_newer_methods_list_exactly_their_departures():
    rows = recipe_rows(jobs_of({name: keys for name, (keys, _) in NEWER.items()}), ARM).set_index("arm")
    for name, (_, want) in NEWER.items():
        assert departed(rows.loc[name, "departures"]) == want, (name, rows.loc[name, "departures"])
    assert rows.loc["spo", "method"] == "SPO" and rows.loc["ar3po", "method"] == "AR3PO"
    assert "algo.eps_high 0.2 (paper: 0.28, inert at algo.mu=1)" in rows.loc["spo", "departures"].split("; ")
    assert rows.loc["speed", "not_settable"] == "; ".join(RECIPES["speed"].not_settable)


def test_seeds_that_disagree_and_keys_not_recorded_are_said():
    jobs = jobs_of({"dapo": {"sampler.name": "dynamic", "algo.eps_high": 0.28, "algo.loss_agg": "token"}},
                   per_seed={("dapo", 0): {"algo.beta": 0.0}})
    assert recipe_rows(jobs, ARM)["departures"].tolist() == ["algo.beta 0 / 0.04 (paper: 0)"]
    older = jobs.drop(columns=["sampler.dynamic.drop"]).assign(**{"algo.beta": 0.0})  # a run before the key
    assert recipe_rows(older, ARM)["departures"].tolist() == ["sampler.dynamic.drop not recorded (paper: tied)"]


def test_the_method_is_read_from_the_rule_then_the_sampler():
    assert method_of({"algo.advantage": "ngrpo", "sampler.name": "dynamic"}) == "ngrpo"
    assert method_of({"algo.advantage": "rl_zvp", "sampler.name": "pods"}) == "rl_zvp"
    assert method_of({"algo.advantage": "grpo", "sampler.name": "dars"}) == "dars"
    assert method_of({"algo.advantage": "grpo", "sampler": "replay"}) == "replay"  # load's alias
    assert method_of({"algo.advantage": "grpo", "sampler.name": "greso"}) == "grpo"
    assert method_of({"algo.advantage": "spo", "sampler.name": "spo"}) == "spo"
    assert [method_of({"algo.advantage": "grpo", "sampler.name": n}) for n in ("mopps", "speed", "ar3po")] == [
        "mopps", "speed", "ar3po"]


def test_what_makes_a_job_a_method_is_named_as_the_registries_name_it():
    """The analysis never imports grpo_lab, so each recipe names its rule or sampler as text: each name, and each
    sampler a recipe sets, must be a member of grpo_lab's registries (a renamed member would silently make its jobs
    plain GRPO's)."""
    from grpo_lab.advantage import RULES
    from grpo_lab.samplers import SAMPLERS

    assert {r.rule for r in RECIPES.values() if r.rule} <= set(RULES) - {"grpo"}
    assert {r.sampler for r in RECIPES.values() if r.sampler} <= set(SAMPLERS) - {"fixed"}
    assert {r.keys["sampler.name"] for r in RECIPES.values() if "sampler.name" in r.keys} <= set(SAMPLERS)
    assert all(method_of({"algo.advantage": r.rule or "grpo", "sampler.name": r.sampler or "fixed"}) == name
               for name, r in RECIPES.items())


def test_the_base_recipe_the_common_arms_share_is_named():
    jobs = jobs_of({name: keys for name, (keys, _) in CASES.items()})
    arms, recipe = shared_base(jobs, ARM)
    assert arms == ["grpo", "ngrpo", "pods", "replay"]
    assert recipe["algo.beta"] == "0.04" and recipe["algo.loss_agg"] == "sequence" and recipe["algo.mu"] == "1"
    assert shared_base(jobs_of({"a": {}, "b": {"algo.beta": 0.0}}), ARM) is None  # no two arms agree
    section = recipes_section(Tables(root=Path("."), jobs=jobs, groups=pd.DataFrame(), steps=pd.DataFrame(),
                                     eval=pd.DataFrame()), ARM, files := Files())
    text = "\n".join(section)
    assert "4 of the 9 arms (grpo, ngrpo, pods, replay) run on one base recipe (algo.eps_low 0.2," in text
    assert list(files.csvs) == ["recipes"] and len(files.csvs["recipes"]) == len(CASES)
    two = jobs_of({"a": {}, "b": {"algo.advantage": "ngrpo"}})  # arms named by two keys: labels with commas
    text = "\n".join(recipes_section(Tables(root=Path("."), jobs=two, groups=pd.DataFrame(), steps=pd.DataFrame(),
                                            eval=pd.DataFrame()), ["sampler.name", "algo.advantage"], Files()))
    assert ("All 2 arms (sampler.name=fixed, algo.advantage=grpo; sampler.name=fixed, algo.advantage=ngrpo) run on "
            "one base recipe") in text


PAPER_ARMS = ("ngrpo_paper", "rl_zvp_paper", "pods_paper", "dars_paper", "spo_paper", "speed_paper")
COMMON = {"grpo": set(), "ngrpo": CASES["ngrpo"][1], "rl_zvp": {"algo.eps_high", "algo.beta", "algo.loss_agg"},
          "pods": CASES["pods"][1], "replay": set(),
          "dynamic": {"algo.eps_high", "algo.beta", "algo.loss_agg"},
          "dars": {"algo.std", "algo.beta", "algo.loss_agg", "algo.mu"},
          "spo": {"algo.eps_high", "algo.beta", "algo.loss_agg"}, "mopps": set(),
          "speed": {"algo.beta", "algo.loss_agg"}, "ar3po": set()}


def test_the_tie_learning_arms_compose_to_their_recipes():
    """Every arm of experiment=tie_learning as Hydra composes it: the paper arms are their papers' recipes, the
    common-recipe arms depart where the common recipe does, and only they share one base recipe."""
    swept = yaml.safe_load((ROOT / "conf/experiment/tie_learning.yaml").read_text())["hydra"]["sweeper"]["params"]
    names = swept["arm"].split(",")
    assert names == [*COMMON, *PAPER_ARMS]
    composed, error = preflight("train", ["-m", "experiment=tie_learning", "seed=0"])  # one job an arm, in order
    assert error is None and len(composed) == len(names), error
    for job in composed:
        validate(job)
    jobs = pd.DataFrame([{"job": name, "arm": name, **flatten(dataclasses.asdict(job))}
                         for name, job in zip(names, composed)])
    shown = recipe_rows(jobs, ARM).set_index("arm")
    for name in PAPER_ARMS:  # no departure; "as the paper" only where the recipe is verified (not RL-ZVP's)
        want = AS_PAPER if RECIPES[method_of(jobs.set_index("arm").loc[name])].verified else UNVERIFIED
        assert shown.loc[name, "departures"] == want, (name, shown.loc[name, "departures"])
    assert shown.loc["rl_zvp_paper", "departures"] == UNVERIFIED
    for name, want in COMMON.items():
        assert departed(shown.loc[name, "departures"]) == want, (name, shown.loc[name, "departures"])
    arms, _ = shared_base(jobs, ARM)
    assert arms == list(COMMON)


def test_a_bad_drop_is_one_line_naming_the_key():
    cfg = TrainConfig()
    cfg.sampler.name, cfg.sampler.dynamic.drop = "dynamic", "all_wrong"
    with pytest.raises(ConfigError, match=r"^sampler\.dynamic\.drop='all_wrong' is invalid: must be one of 'tied', "
                                          r"'all_correct'$"):
        validate(cfg)


def plain_used(g: pd.DataFrame, prompts: int, drop: str) -> list[bool]:
    """Which drawn groups train, by a plain loop over the groups table: each step's rows in draw order are rounds
    of `prompts` fresh groups; a group is kept unless `drop` removes it (tied: equal rewards; all_correct: every
    answer right), and the first `prompts` kept train."""
    used = []
    for _, rows in g.groupby("step", sort=True):
        kept = 0
        for r in rows.itertuples():
            gone = len(set(r.rewards)) == 1 if drop == "tied" else bool(np.all(r.correct))
            used.append(not gone and kept < prompts)
            kept += not gone
    return used


@pytest.mark.parametrize("drop", ["tied", "all_correct"])
def test_dynamic_drops_what_a_plain_loop_drops(tmp_path, drop):
    cfg = TrainConfig(out_dir=str(tmp_path / drop), max_steps=3, prompts_per_step=4, checkpoint_every=100)
    # level 1: often all right; 2: mostly mixed; 4: all wrong
    cfg.task.levels, cfg.task.train_per_level, cfg.eval.n = [1, 2, 4], 8, 0
    cfg.sampler.name, cfg.sampler.group_size = "dynamic", 4
    cfg.sampler.dynamic.max_rounds, cfg.sampler.dynamic.drop = 8, drop
    cfg.algo.advantage = "ngrpo"
    g = read_table(train(cfg), "groups").to_pandas()
    assert g["used"].tolist() == plain_used(g, 4, drop)
    assert (g.groupby("step")["used"].sum() == 4).all()  # every step filled its batch
    right = g["correct"].map(lambda c: bool(np.all(c)))
    wrong = g["tie"] & ~right
    assert not (g["used"] & right).any()  # an all-correct group never trains, under either filter
    assert right.any() and wrong.any()  # both kinds of tie were drawn, so the filters differ here
    if drop == "all_correct":  # an all-wrong group trains, and NGRPO's advantage gives it a signal
        assert (g["used"] & wrong).any() and (g.loc[g["used"] & wrong, "n_informative"] == 4).all()
    else:
        assert not (g["used"] & g["tie"]).any()
