"""MoPPS, Model Predictive Prompt Selection (Qu, Wang, Mao, Hu, Ommer and Ji 2025, "Can Prompt Difficulty be Online
Predicted for Accelerating RL Finetuning of Reasoning Models?", arXiv:2507.04632; code: thu-rllab/MoPPS,
recipe/ours/mopps.py).

The paper's rule, as its code: each prompt's pass rate has a Beta(alpha, beta) posterior, Beta(alpha_0, beta_0)
before its first visit. A step draws a candidate set of `candidates` x `prompts` prompts, predicts each one's pass
rate from its posterior without sampling it (Thompson: one draw from Beta(alpha, beta)), and keeps the `prompts`
candidates whose prediction is nearest the target: the smallest (prediction - target)^2 (its "topk" strategy,
target 0.5). Each kept prompt gets one group of `group_size` answers, and every kept group trains (ties included:
the code runs without DAPO's filter). Its posterior then takes the group's s right answers of k:
  alpha <- decay alpha + (1 - decay) alpha_0 + s,    beta <- decay beta + (1 - decay) beta_0 + (k - s),
a discounted Bayesian update: the old evidence fades toward the prior as the policy moves (decay 1: none fades).
Only the prompts sampled are updated; a candidate passed over keeps its posterior as it was.

Here: the candidate set is the next prompts of the run's prompt stream (the code's: the next batch of its shuffled
dataloader, `ts_ratio` times the train batch), capped at the pool's size (as the code's min(ts_ratio x batch,
dataset)); a prompt met twice while filling it (across an epoch's end) is passed over the second time. The
candidates not kept are passed over unsampled: they cost no samples, and are counted in the steps table
(`skipped_prompts`). Ties in the ranking go to the earlier candidate (a stable sort; the code's argsort breaks them
arbitrarily); the kept prompts are drawn nearest first, the code's order. `selection=mean` ranks by the posterior
mean alpha / (alpha + beta) instead of a draw (no randomness: the code has no such option; it makes the rule
replayable from the tables). Each kept group records its prompt's predicted pass rate, the posterior mean
alpha / (alpha + beta) before the draw (`predicted_rate`: the posterior predictive chance that one answer is right;
a Thompson draw is how the ranking explores, not a prediction), so the report can measure the prediction's error
against the group's pass rate. The posterior, keyed by
prompt id, is the sampler's state; the draws come from its own seeded generator. A step whose prompts outnumber the
pool's distinct prompts cannot keep `prompts` distinct ones: the run stops there, saying so, having drawn nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, distinct_candidates, use

SELECTIONS = ("thompson", "mean")


@dataclass
class MoppsSettings(SamplerSettings):
    """The official code's defaults; `decay` and `candidates` are the README's example run's (Countdown,
    recipe/ours/scripts/countdown/cd_verl_3b_topk_noinit.sh)."""

    prior_alpha: float = 1.0  # alpha_0 (mopps.py PosteriorSampler(prior_alpha=1.0); the trainer passes none)
    prior_beta: float = 1.0  # beta_0 (mopps.py prior_beta=1.0): Beta(1, 1), uniform on [0, 1]
    # lambda: how much of a prompt's posterior survives each update (cd/geo3k scripts 0.5; their MATH scripts keep
    # our_trainer.yaml's 1.0, no forgetting)
    decay: float = 0.5
    target: float = 0.5  # gamma*: the rate kept prompts are predicted nearest (our_trainer.yaml bandit_target_mean)
    candidates: int = 8  # candidate set as a multiple of prompts (ts_ratio: 8 in cd/geo3k scripts, 16 in MATH ones)
    selection: str = "thompson"  # thompson: rank by one posterior draw (the paper's) | mean: by the posterior mean

    def check(self, key: str) -> None:
        for name in ("prior_alpha", "prior_beta"):
            require(getattr(self, name) > 0, f"{key}.{name}", getattr(self, name), "must be > 0 (a Beta parameter)")
        require(0 <= self.decay <= 1, f"{key}.decay", self.decay, "must lie in [0, 1]")
        require(0 <= self.target <= 1, f"{key}.target", self.target, "must lie in [0, 1]")
        require(self.candidates >= 1, f"{key}.candidates", self.candidates,
                "must be >= 1 (a multiple of prompts_per_step; 1 keeps every candidate)")
        require(self.selection in SELECTIONS, f"{key}.selection", self.selection,
                f"must be one of {', '.join(map(repr, SELECTIONS))}")


def posterior_update(alpha: float, beta: float, right: int, drawn: int, prior: tuple[float, float],
                     decay: float) -> tuple[float, float]:
    """A prompt's Beta posterior after `right` of `drawn` answers: the old one discounted by `decay` toward `prior`,
    plus the new counts (the code's PosteriorSampler.train)."""
    return (decay * alpha + (1 - decay) * prior[0] + right,
            decay * beta + (1 - decay) * prior[1] + (drawn - right))


def nearest(predicted: np.ndarray, target: float, keep: int) -> list[int]:
    """Indices of the `keep` predictions nearest `target`, nearest first; ties to the earlier index."""
    return np.argsort((np.asarray(predicted, dtype=np.float64) - target) ** 2, kind="stable")[:keep].tolist()


def prediction_error(predicted, n_correct, group_size) -> np.ndarray:
    """|predicted - n_correct / group_size| per groups-table row: how far the sampler's predicted pass rate was
    from the pass rate the group then had; NaN where the sampler predicted none."""
    predicted, right, size = (np.asarray(x, dtype=np.float64) for x in (predicted, n_correct, group_size))
    return np.abs(predicted - right / size)


class MoppsSampler(Sampler):
    name = "mopps"
    settings_type = MoppsSettings

    def draw(self, draw_round, prompts: int) -> Draw:
        c = self.settings
        posterior = self.extra_state.setdefault("posterior", {})  # prompt_id -> [alpha, beta]
        size = min(c.candidates * prompts, len({p.prompt_id for p in self.stream.pool}))  # the code's min(.., dataset)
        if size < prompts:
            return Draw([], [], exhausted=(
                f"mopps sampler: prompts_per_step={prompts} is more than the training pool's {size} distinct "
                "prompts; a step keeps that many distinct prompts"))
        candidates, taken = distinct_candidates(self.stream, size)
        prior = (c.prior_alpha, c.prior_beta)
        a, b = (np.array([posterior.get(p.prompt_id, prior)[k] for p in candidates], dtype=np.float64) for k in (0, 1))
        predicted = self.rng.beta(a, b) if c.selection == "thompson" else a / (a + b)
        kept = nearest(predicted, c.target, prompts)
        groups = draw_round([candidates[i] for i in kept], 0)
        for i, g in zip(kept, groups):
            g.predicted_rate = float(a[i] / (a[i] + b[i]))  # the posterior predictive pass rate, whatever ranked it
            right = int(g.correct.sum())
            new = posterior_update(float(a[i]), float(b[i]), right, len(g.correct), prior, c.decay)
            posterior[g.problem.prompt_id] = [float(new[0]), float(new[1])]
        return Draw(groups, [[g] for g in use(groups)], skipped=taken - len(kept))
