"""Values Hydra accepts but the code cannot use are refused before anything loads. A walk over every key of
TrainConfig tries NaN and infinities on every float, negative, zero and huge on every count, empty and
out-of-range lists and empty strings: each is refused in one line naming its key, or listed in ACCEPTED with
the reason it works. A new key is walked too, so it cannot go unconsidered. The cases the issue named run
through the real command line."""

import copy
import dataclasses
import math

import pytest

from fixtures.runs import bad_values, cli
from grpo_lab.advantage import RULES
from grpo_lab.config import TrainConfig, leaves
from grpo_lab.config.checks import validate
from grpo_lab.errors import InputError
from grpo_lab.samplers import SAMPLERS
from grpo_lab.tasks import TASKS

HUGE = 2**40
HOSTILE = {  # label -> value, by the key's type
    "float": {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-1": -1.0, "0": 0.0, "1e30": 1e30},
    "int": {"-1": -1, "0": 0, "huge": HUGE},
    "str": {"empty": ""},
    "list[int]": {"empty": [], "[-1]": [-1], "[huge]": [HUGE]},
    "list[str]": {"empty": [], '[""]': [""]},
    "dict[str, Any]": {"{}": {}, "{no_such: 1}": {"no_such": 1}},
    "list[dict[str, Any]]": {"empty": [], "[{}]": [{}], "[{no_such: 1}]": [{"no_such": 1}]},
    "list[list[str]]": {"[[]]": [[]], '[["", ""]]': [["", ""]], '[["a"]]': [["a"]]},
}
NEVER = "never binds: "
ACCEPTED: dict[tuple[str, str], str] = {  # (key, label) -> why that value works
    ("seed", "0"): "a seed",
    ("task.seed", "-1"): "random.Random(f'{seed}-{level}') takes any integer",
    ("task.seed", "0"): "as -1",
    ("task.seed", "huge"): "as -1",
    ("max_steps", "huge"): NEVER + "a bound; max_samples or max_tokens may end the run first",
    ("checkpoint_every", "huge"): NEVER + "the last step and every evaluated step are saved anyway",
    ("threads", "0"): "torch's own default",
    ("model.path", "empty"): "unused by model=tiny (model=local refuses it)",
    ("task.path", "empty"): "unused by task=arithmetic (task=mathset refuses it)",
    ("task.eval_path", "empty"): "unused by task=arithmetic (task=mathset refuses it)",
    ("model.logprob_chunk", "0"): "full logits, documented",
    ("model.lora.rank", "0"): "the default: a full fine-tune, no adapters",
    ("model.lora.dropout", "0"): "the default: no adapter dropout",
    ("model.logprob_chunk", "huge"): "one chunk: full logits",
    ("algo.beta", "0"): "no KL term and no reference model (DAPO, Dr. GRPO)",
    ("algo.beta", "1e30"): "the KL term dominates; gradients are clipped to algo.max_grad_norm",
    ("algo.std_eps", "0"): "only an exactly zero std is a tie",
    ("algo.max_grad_norm", "1e30"): "no gradient clipping",
    ("algo.weight_decay", "0"): "the default: no decay",
    ("task.gym.config", "{}"): "the default: no key shared by every level",
    ("task.gym.levels", "[{}]"): "one level at the generator's own defaults",
    ("task.gym.shots", "0"): "the default: no worked examples",
    ("algo.kl_grad_every", "0"): "the default: the KL term's gradient is never measured",
    ("algo.kl_grad_every", "huge"): NEVER + "no step reaches it: nothing is measured",
    ("algo.micro_batch_groups", "huge"): "the whole batch in one pass",
    ("algo.micro_batch_tokens", "huge"): "no cap on a micro-batch",
    ("sampler.band.lo", "0"): "every prompt above pass rate 0 trains",
    ("sampler.band.explore", "0"): "the default: never re-measure outside the band",
    ("sampler.reinforce_ada.round_size", "huge"): "a round draws at most max_per_prompt minus what the prompt has",
    ("sampler.knapsack.max_per_prompt", "huge"): NEVER + "a step splits prompts_per_step x group_size samples",
    ("sampler.greso.p_easy", "0"): "a prompt tied all-correct is skipped down to min_keep",
    ("sampler.greso.p_hard", "0"): "as p_easy, all-wrong",
    ("sampler.greso.min_p", "0"): "the adapted bases may reach 0; min_keep still keeps a chance",
    ("sampler.greso.step", "0"): "the bases stay at p_easy and p_hard",
    ("sampler.greso.step", "1e30"): "each move is clipped to [min_p, max_p]",
    ("sampler.spo.offline_n", "0"): "no estimate: every prompt starts at Beta(0.5, 0.5), the code's prior for a "
                                     "prompt without offline answers",
    ("sampler.spo.d_half", "1e30"): "every visit forgets by rho_max: a constant forgetting (the code's rho.type "
                                    "constant)",
    ("sampler.spo.epsilon", "1e30"): "a uniform draw: the priorities choose nothing",
    ("sampler.mopps.prior_alpha", "1e30"): "a prior no answer outweighs: predictions stay at its mean and the "
                                           "earliest candidates are kept",
    ("sampler.mopps.prior_beta", "1e30"): "as prior_alpha",
    ("sampler.mopps.decay", "0"): "only a prompt's last visit counts (beside the prior)",
    ("sampler.mopps.target", "0"): "the prompts predicted hardest are kept first",
    ("sampler.mopps.candidates", "huge"): "capped at the pool: every distinct prompt is a candidate",
    ("sampler.learnability.candidates", "huge"): "capped at the pool: every distinct prompt is a candidate",
    ("sampler.learnability.prior_alpha", "1e30"): "every estimate pinned at 1: every weight 0, a uniform draw",
    ("sampler.learnability.prior_beta", "1e30"): "every estimate pinned at 0: every weight 0, a uniform draw",
    ("sampler.learnability.decay", "0"): "only a prompt's last visit counts (beside the prior)",
    ("sampler.learnability.epsilon", "0"): "no floor: a prompt estimated at 0 or 1 is not drawn",
    ("sampler.thompson_bins.prior_alpha", "1e30"): "every bin's sample near 1: near-uniform bin weights",
    ("sampler.thompson_bins.prior_beta", "1e30"): "every sample near 0, still ranked by the bins' counts",
    ("sampler.thompson_bins.decay", "0"): "only the last step's groups count (beside the prior)",
    ("sampler.thompson_bins.epsilon", "0"): "no floor: a bin's weight is its sample's share",
    ("sampler.thompson_bins.reversion_mass", "0"): "the default: no pseudo-groups",
    ("sampler.thompson_bins.reversion_mass", "1e30"): "every bin's belief pinned at 1/2: near-uniform weights",
    ("sampler.pilot_commit.p_lower", "0"): "an all-wrong pilot passes too: its prompt is committed",
    ("sampler.pilot_commit.p_upper", "0"): "an all-right pilot passes too: its prompt is committed",
    ("sampler.replay.size", "huge"): "a buffer that never evicts: it holds one entry per mixed group drawn, at most",
    ("sampler.greso.target", "0"): "a target share of no ties",
    ("rollout.max_rows_per_call", "huge"): "no cap",
    ("algo.rollout_correction_cap", "1e30"):
        NEVER + "no ratio is capped (algo.rollout_correction=none does so plainly)",
    ("rollout.stop", "empty"): "the default: no stop strings",
    ("reward.accuracy", "1e30"): "advantages are scaled by the group std (or clipped gradients with algo.std=none)",
    ("reward.format", "0"): "the default: binary rewards",
    ("reward.format", "1e30"): "as reward.accuracy",
    ("eval.n", "0"): "evaluation off, documented",
    ("eval.every", "0"): "only the base model and the last step",
    ("eval.every", "huge"): NEVER + "as 0",
    ("eval.temperature", "0"): "greedy evaluation",
    ("eval.every_samples", "0"): "off, documented",
    ("eval.every_samples", "huge"): NEVER + "as 0",
    ("eval.every_tokens", "0"): "off, documented",
    ("eval.every_tokens", "huge"): NEVER + "as 0",
    ("eval.every_updates", "0"): "off, documented",
    ("eval.every_updates", "huge"): NEVER + "as 0",
    ("checkpoint.keep_last", "huge"): "keep every checkpoint",
    ("checkpoint.keep_steps", "empty"): "the default: no pinned steps",
    ("checkpoint.keep_steps", "[huge]"): NEVER + "no such step is reached",
    ("logger.backends", "empty"): "no metric lines (logger=none)",
    ("logger.every_s", "0"): "a line every step",
    ("logger.every_s", "1e30"): "the first step's line only",
    ("logger.every", "0"): "by time only, documented",
    ("logger.every", "huge"): NEVER + "as 0",
    ("logger.project", "empty"): "unused without the wandb backend (with it, refused)",
    ("logger.name", "empty"): "a W&B display name",
    ("logger.group", "empty"): "a W&B group name",
    ("log_completions", "0"): "the default: none kept but the first step's group of each difficulty",
    ("log_completions", "huge"): "every completion kept",
}


def _type(node, name: str) -> str:
    f = {f.name: f for f in dataclasses.fields(node)}[name]
    t = f.type if isinstance(f.type, str) else f.type.__name__
    return t.replace(" | None", "")


def _set(cfg: TrainConfig, key: str, value) -> None:
    *path, name = key.split(".")
    node = cfg
    for p in path:
        node = getattr(node, p)
    setattr(node, name, copy.deepcopy(value))
    block, member = (key.split(".") + ["", ""])[:2]
    if block == "sampler" and member in SAMPLERS:  # a sampler's own key: with that sampler chosen
        cfg.sampler.name = member
        if SAMPLERS[member].one_answer:  # and the rule it trains under (spo's baseline is its prediction)
            cfg.algo.advantage = next(n for n, r in RULES.items() if r.predicted)
    if block == "task" and member in TASKS:  # a task's own key: with that task chosen
        cfg.task.name = member
    if block == "algo" and member in RULES:  # a rule's own key: with that rule chosen
        cfg.algo.advantage = member


def _key_type(key: str) -> str:
    *path, name = key.split(".")
    node = TrainConfig()
    for p in path:
        node = getattr(node, p)
    return _type(node, name)


def _trials() -> list[tuple[str, str, object]]:
    base, out = TrainConfig(), []
    for key, _ in leaves(base):
        *path, name = key.split(".")
        node = base
        for p in path:
            node = getattr(node, p)
        out += [(key, label, value) for label, value in HOSTILE.get(_type(node, name), {}).items()]
    return out


TRIALS = _trials()


def test_the_walk_covers_every_key_that_is_not_a_switch():
    walked = {k for k, _, _ in TRIALS}
    switches = {k for k, v in leaves(TrainConfig()) if isinstance(v, bool) or _key_type(k) == "bool"}  # bool | None
    assert walked | switches == {k for k, _ in leaves(TrainConfig())} and len(TRIALS) > 200
    assert {k for k, _ in ACCEPTED} <= walked  # no stale entry


@pytest.mark.parametrize("key,label,value", TRIALS, ids=[f"{k}={lab}" for k, lab, _ in TRIALS])
def test_a_value_that_cannot_work_is_refused_naming_its_key(key, label, value):
    cfg = TrainConfig()
    _set(cfg, key, value)
    try:
        validate(cfg)
    except InputError as e:
        message = str(e)
        assert "\n" not in message and key in message, message
        assert (key, label) not in ACCEPTED, f"listed as accepted but refused: {message}"
        return
    assert (key, label) in ACCEPTED, f"{key}={value!r} was accepted: refuse it, or say in ACCEPTED why it works"


def test_bounds_that_come_from_other_keys():
    cfg = TrainConfig()
    cfg.reward.accuracy, cfg.reward.format = 0.0, 0.0  # every reward 0: every group ties
    with pytest.raises(InputError, match="reward.accuracy=0.0 is invalid: .*every group ties"):
        validate(cfg)
    cfg = TrainConfig()
    cfg.algo.std_eps = 0.5  # a binary reward's std is at most 0.5: every group a tie
    with pytest.raises(InputError, match=r"algo.std_eps=0.5 is invalid: must be in \[0, 0.5\)"):
        validate(cfg)
    cfg = TrainConfig()
    cfg.sampler.name, cfg.sampler.dynamic.max_rounds = "dynamic", 10**6  # grows the step, not group_size
    with pytest.raises(InputError, match="sampler.dynamic.max_rounds=1000000 is invalid: one step could draw"):
        validate(cfg)
    cfg = TrainConfig()
    cfg.task.levels = [1, 1]
    with pytest.raises(InputError, match="level 1 is listed twice"):
        validate(cfg)
    cfg = TrainConfig()
    cfg.task.levels, cfg.task.train_per_level = [4], 700_000  # more than level 4's 607,500 training problems
    with pytest.raises(InputError, match="task.train_per_level=700000 is too large: level 4 has 607500"):
        validate(cfg)


def test_the_named_cases_through_the_command_line(tmp_path):
    for args, expected in bad_values(tmp_path):
        out = cli(*args, f"hydra.run.dir={tmp_path / 'run'}")
        lines = out.stderr.strip().splitlines()
        assert out.returncode != 0 and len(lines) == 1 and lines[0].startswith(f"config error: {expected}"), \
            (args, lines)
    assert not (tmp_path / "run").exists()  # refused before Hydra made the run directory
