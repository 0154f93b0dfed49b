"""Each tie method's published recipe, as data, and where each arm departs from it.

A tie-method study runs every method on one base recipe (its clip, KL, loss aggregation, std, updates a batch),
so that the arms differ in what they do with ties; a reader must still know how far each arm is from the
recipe its paper trained with. The papers' values are here as data (docs/RECIPES.md gives the file and line, or
the paper's section, each was read from): the analysis never imports the training code, so the config keys
below are its contract (`grpo_lab/config/schema.py`). A key a paper leaves open is absent from its recipe and never
compared; what a recipe needs that no key sets is listed (`not_settable`), never passed over. A recipe is `verified`
only where docs/RECIPES.md says its values were read in a source (the official code at a commit): an arm is "as the
paper" only then; an unverified recipe's arm without departures is said to have none from the values found
(`tests/test_recipes.py` holds the flag to RECIPES.md's words).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd

from analysis.data.arms import iter_arms, short_label, value_text

KEEP = "keep"  # PODS's share of the answers drawn that train: sampler.group_size / sampler.pods.n
# the objective's keys: arms that agree on all of them share one base recipe
OBJECTIVE = ("algo.eps_low", "algo.eps_high", "algo.beta", "algo.loss_agg", "algo.std", "algo.std_eps", "algo.mu",
             "algo.unit_weight", "algo.zvp_alpha")
CLIP = ("algo.eps_low", "algo.eps_high")
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Recipe:
    """One method's published recipe: `keys` (config key -> the paper's value; a key the paper leaves open is
    absent) and `not_settable` (parts of it no config key sets)."""

    method: str  # as the report names it
    keys: Mapping[str, object] = field(default_factory=dict)
    not_settable: tuple[str, ...] = ()
    published: bool = True  # False: no paper gives a recipe (a library's trainer)
    verified: bool = False  # docs/RECIPES.md: every value compared was read in a source reachable here
    # what makes a job this method, by its name in grpo_lab's registries (`tests/test_recipes.py` holds them to
    # those): its advantage rule (`algo.advantage`), else its sampler (`sampler.name`); neither: plain GRPO's
    rule: str | None = None
    sampler: str | None = None


AS_PAPER = "as the paper"  # no departure from a verified recipe
UNVERIFIED = "none from the values found, which are not verified (docs/RECIPES.md)"  # no departure, unverified recipe
UNPUBLISHED = "no published recipe"


def mini_batches(count: int) -> str:
    """What a recipe's mini-batches are, in words: grpo-lab updates on a whole batch (`algo.mu` times)."""
    return f"{count} optimizer steps a rollout batch, one a mini-batch (its clip acts through them)"


ENTROPY_BONUS = "entropy bonus 0.001"

RECIPES: dict[str, Recipe] = {
    # DeepSeekMath (arXiv:2402.03300) sec. 4.1-4.2: the clip's eps is not given (and at one update a batch the
    # ratio is 1); the std's ddof is not given; the values grpo-lab cites, not re-read (no code was published)
    "grpo": Recipe("GRPO (DeepSeekMath)", {"sampler.name": "fixed", "algo.beta": 0.04, "algo.loss_agg": "sequence",
                                           "algo.mu": 1}),
    # NGRPO's train_scripts/train_qwen2.5-math-7b_ngrpo.sh and its verl config
    "ngrpo": Recipe("NGRPO", {"sampler.name": "dynamic", "sampler.dynamic.drop": "all_correct", "algo.eps_low": 0.16,
                              "algo.eps_high": 0.24, "algo.beta": 0.0, "algo.loss_agg": "token", "algo.mu": 1},
                    (mini_batches(4), ENTROPY_BONUS, "surplus kept groups carried to the next step",
                     "no cap on generation rounds"), verified=True, rule="ngrpo"),
    # conf/algo/rl_zvp.yaml (the paper's appendix C), not verified; its updates a batch were not found
    "rl_zvp": Recipe("RL-ZVP", {"sampler.name": "fixed", "algo.eps_low": 0.2, "algo.eps_high": 0.28, "algo.beta": 0.0,
                                "algo.loss_agg": "token", "algo.zvp_alpha": 0.1}, rule="rl_zvp"),
    # PODS's trainer/maxvargrpo_trainer.py, config/train.yaml and its runs (64 -> 16, 32 -> 8); no clip at mu = 1
    "pods": Recipe("PODS", {"sampler.name": "pods", KEEP: 0.25, "algo.std": "sample", "algo.std_eps": 1e-4,
                            "algo.beta": 0.0, "algo.loss_agg": "sequence", "algo.mu": 1}, verified=True,
                   sampler="pods"),
    # DARS's experiments/DARS-*-ET-Breadth.sh, ray_dars_trainer.py, core_algos.py and verl's ppo_trainer.yaml
    "dars": Recipe("DARS", {"sampler.name": "dars", "sampler.dars.max_per_prompt": 32, "sampler.dars.schedule": "et",
                            "algo.std": "none", "algo.eps_low": 0.2, "algo.eps_high": 0.2, "algo.beta": 0.0,
                            "algo.loss_agg": "constant", "algo.unit_weight": "sample", "algo.mu": 2},
                   (ENTROPY_BONUS,), verified=True, sampler="dars"),
    # DAPO (arXiv:2503.14476) and verl's recipe/dapo/run_dapo_qwen2.5_32b.sh
    "dynamic": Recipe("DAPO (dynamic sampling)", {"sampler.name": "dynamic", "sampler.dynamic.drop": "tied",
                                                  "algo.eps_low": 0.2, "algo.eps_high": 0.28, "algo.beta": 0.0,
                                                  "algo.loss_agg": "token", "algo.mu": 1},
                      (mini_batches(16), "overlong reward shaping"), verified=True, sampler="dynamic"),
    "replay": Recipe("replay buffer (TRL's trainer)", published=False, sampler="replay"),
    # verl-recipe spo/train.sh, spo/config/spo_trainer.yaml and spo_ray_trainer.py (48ea0a797fa2); verl's actor.yaml
    "spo": Recipe("SPO", {"sampler.name": "spo", "sampler.spo.offline_n": 8, "sampler.spo.rho_min": 0.875,
                          "sampler.spo.rho_max": 0.96, "sampler.spo.d_half": 0.06, "sampler.spo.epsilon": 0.05,
                          "algo.eps_low": 0.2, "algo.eps_high": 0.28, "algo.beta": 0.0, "algo.loss_agg": "token",
                          "algo.mu": 1},
                  (mini_batches(8), "dual clip c = 10", "offline answers by another model, read from a file"),
                  verified=True, rule="spo"),
    # thu-rllab/MoPPS recipe/ours (a883f519bb2e): the sampler's values; its scripts' objective was not read, so the
    # recipe is not verified as a whole
    "mopps": Recipe("MoPPS", {"sampler.name": "mopps", "sampler.mopps.prior_alpha": 1.0,
                              "sampler.mopps.prior_beta": 1.0, "sampler.mopps.decay": 0.5, "sampler.mopps.target": 0.5,
                              "sampler.mopps.candidates": 8, "sampler.mopps.selection": "thompson"},
                    sampler="mopps"),
    # Zanette-Labs/speed-rl run_fast_rloo_7b.sh and data_controller.py (80e47b5f7bd7)
    "speed": Recipe("SPEED-RL", {"sampler.name": "speed", "sampler.speed.screen_size": 4,
                                 "sampler.speed.screen_factor": 4, "sampler.speed.max_rounds": 49, "algo.beta": 0.0,
                                 "algo.eps_low": 0.2, "algo.eps_high": 0.2, "algo.loss_agg": "token"},
                    ("RLOO advantages", "qualified prompts beyond the batch carried to the next step"), verified=True,
                    sampler="speed"),
    # arXiv:2509.25808: its rounds, cap and reuse were not reachable (docs/RECIPES.md): nothing to compare
    "ar3po": Recipe("AR3PO", {"sampler.name": "ar3po"},
                    ("its round size, cap and how a reused answer enters a group: not found in a reachable source",),
                    sampler="ar3po"),
}


BY_RULE = {recipe.rule: method for method, recipe in RECIPES.items() if recipe.rule}
BY_SAMPLER = {recipe.sampler: method for method, recipe in RECIPES.items() if recipe.sampler}


def method_of(config: Mapping[str, object]) -> str:
    """The tie method a job config runs (a key of RECIPES): the one its advantage rule makes it (`Recipe.rule`),
    else the one its sampler makes it (`Recipe.sampler`), else plain GRPO."""
    rule = value_text(config.get("algo.advantage"))
    if rule in BY_RULE:
        return BY_RULE[rule]
    return BY_SAMPLER.get(value_text(config.get("sampler.name", config.get("sampler"))), "grpo")


def _values(rows: pd.DataFrame, key: str) -> list[object] | None:
    """The arm's values of `key` (several where its jobs differ), or None where the jobs do not record it."""
    if key == KEEP:
        if "sampler.group_size" not in rows or "sampler.pods.n" not in rows:
            return None
        pairs = rows[["sampler.group_size", "sampler.pods.n"]].map(value_text).drop_duplicates()
        try:
            return [(int(float(kept)), int(float(drawn))) for kept, drawn in pairs.itertuples(index=False)]
        except ValueError:  # a null size: not recorded
            return None
    if key not in rows:
        return None
    seen = {value_text(v): v for v in rows[key]}
    return list(seen.values())


def _text(value: object) -> str:
    """A value as the table names it: floats in their shortest form (0 for 0.0, 0.0001 for 1e-4)."""
    return f"{value:g}" if isinstance(value, float) else value_text(value)


def _same(value: object, paper: object) -> bool:
    """Whether a config value is the paper's: numbers as numbers (1e-4 is 0.0001), the rest by name."""
    if isinstance(paper, (int, float)) and not isinstance(paper, bool):
        try:
            return math.isclose(float(value), float(paper), rel_tol=1e-9, abs_tol=1e-12)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return False
    return value_text(value) == value_text(paper)


def _read(rows: pd.DataFrame, key: str) -> str | None:
    """The arm's one value of `key` as text, or None (absent, or its jobs differ)."""
    values = _values(rows, key)
    return value_text(values[0]) if values is not None and len(values) == 1 else None


def departures(rows: pd.DataFrame, recipe: Recipe) -> list[str]:
    """Where an arm (its jobs' config rows) departs from `recipe`, one phrase a key: "algo.beta 0.04 (paper: 0)".
    A sampler's own key is compared only where the arm runs that sampler (else `sampler.name` says it all); a clip
    departure at one update a batch of fresh samples is marked inert (every ratio is then exactly 1)."""
    sampler = _read(rows, "sampler.name")
    mu = _values(rows, "algo.mu")
    inert = mu is not None and all(_same(v, 1) for v in mu) and sampler != "replay"
    out = []
    for key, paper in recipe.keys.items():
        parts = key.split(".")
        if (key == KEEP and sampler != "pods") or (parts[0] == "sampler" and len(parts) == 3 and sampler != parts[1]):
            continue
        values = _values(rows, key)
        if values is None:
            out.append(f"{key} {NOT_RECORDED} (paper: {_text(paper)})")
        elif key == KEEP:
            if not all(_same(kept / drawn, paper) for kept, drawn in values):
                shown = " / ".join(f"{kept} of {drawn}" for kept, drawn in values)
                out.append(f"keep {shown} (paper: {_text(paper)} of those drawn)")
        elif not all(_same(v, paper) for v in values):
            note = ", inert at algo.mu=1" if key in CLIP and inert else ""
            out.append(f"{key} {' / '.join(_text(v) for v in values)} (paper: {_text(paper)}{note})")
    return out


COLUMNS = ("arm", "method", "departures", "not_settable", "verified")


def recipe_rows(jobs: pd.DataFrame, arm: Sequence[str]) -> pd.DataFrame:
    """One row per arm of `jobs` (one row per job, its flattened config), in order of first appearance: the arm
    as the report names it, the tie method its config runs (`method`), its departures from that method's
    published recipe ("; "-joined; none: `AS_PAPER` where the recipe is verified, else `UNVERIFIED`), what that
    recipe needs that no config key sets (`not_settable`) and whether docs/RECIPES.md verified the recipe
    (`verified`: yes, no, or empty for no published recipe)."""
    records = []
    for label, rows in iter_arms(jobs, list(arm)):
        recipe = RECIPES[method_of(rows.iloc[0])]
        found = departures(rows, recipe)
        none = (AS_PAPER if recipe.verified else UNVERIFIED) if recipe.published else UNPUBLISHED
        records.append({"arm": short_label(label), "method": recipe.method,
                        "departures": "; ".join(found) if found else none,
                        "not_settable": "; ".join(recipe.not_settable),
                        "verified": ("yes" if recipe.verified else "no") if recipe.published else ""})
    return pd.DataFrame(records, columns=list(COLUMNS))


def shared_base(jobs: pd.DataFrame, arm: Sequence[str]) -> tuple[list[str], dict[str, str]] | None:
    """(arm labels, {key: value}) of the largest set of two or more arms that agree on every objective key
    (OBJECTIVE) the jobs record: the base recipe they share. None where no two arms do."""
    keys = [k for k in OBJECTIVE if k in jobs]
    if not keys:
        return None
    by_recipe: dict[tuple[str, ...], list[str]] = {}
    for label, rows in iter_arms(jobs, list(arm)):
        values = tuple(_read(rows, k) or "" for k in keys)
        if "" not in values:  # an arm whose jobs differ on a key shares nothing
            by_recipe.setdefault(values, []).append(label)
    if not by_recipe:
        return None
    values, labels = max(by_recipe.items(), key=lambda item: len(item[1]))
    return ([short_label(label) for label in labels], dict(zip(keys, values))) if len(labels) > 1 else None
