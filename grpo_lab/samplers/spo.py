"""SPO's prompt draw and value tracker (Xu et al. 2025, "Single-stream Policy Optimization", arXiv:2509.13232; code:
verl-project/verl-recipe `spo/spo_ray_trainer.py` at 48ea0a797fa2, the lines cited below).

The method, as its code: one answer a prompt, no groups. Each prompt keeps a Beta(alpha, beta) whose mean
v = alpha / (alpha + beta) is the baseline of its next answer (`algo.advantage=spo`: A = r - v, then normalised
over the batch, grpo_lab/advantage/spo.py). Before training every prompt's tracker is set from `offline_n` answers
of the base policy: with s right, alpha0 = N0 (s + 0.5) / (n + 1), beta0 = N0 (n - s + 0.5) / (n + 1), N0 =
1 / (1 - rho_min) (:357-372). A batch is drawn from the pool without replacement with probability proportional to
sqrt(v (1 - v)) + epsilon (:380-414). After the update each answered prompt's tracker forgets by rho and counts
its reward: alpha <- rho alpha + r, beta <- rho beta + (1 - r) (:657-665), rho = 2^(-D / d_half) clipped to
[rho_min, rho_max], D the token mean of |log p_then - log p_now| over the answer this prompt gave at its previous
visit, log p_then the policy's right after that visit's update, log p_now the policy's right after this one (a
prompt's first visit: its own answer, D = 0) (:240-305).

Here: a step draws prompts_per_step x group_size prompts of one answer each, so it draws as many samples as a
step of fixed groups (the code's batch is likewise its GRPO batch's samples, 1,024 = 128 x 8). The offline answers
are drawn by the base policy at the first step (the code reads them from a file made by another model) and count
in the budget: they are that step's groups of `offline_n`, not used (`offline_n=0`: every prompt starts at
Beta(0.5, 0.5), the code's prior for a prompt with no offline answers, and the first draw is uniform). A group of
one answer is never a tie (there is nothing for it to tie with). Where a step's prompts outnumber the pool, the
draw takes every prompt once and the priorities choose nothing: they act where the pool is larger than a step.
Runs on one process (the trackers' log-prob passes are not split across ranks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group, Rollout
from grpo_lab.samplers.base import Sampler, SamplerSettings, use

if TYPE_CHECKING:  # torch: only once answers exist, never at config time
    import torch


MAX_OFFLINE = 256  # sampler.spo.offline_n's largest value


@dataclass
class SpoSettings(SamplerSettings):
    """Its code's values: spo/config/spo_trainer.yaml:16-20, spo_ray_trainer.py:289-292, :381."""

    offline_n: int = 8  # base-policy answers a prompt that set its tracker before training (the code's offline_N)
    rho_min: float = 0.875  # the forgetting factor's floor (rho.clip_lower); also sets N0 = 1 / (1 - rho_min) = 8
    rho_max: float = 0.96  # its ceiling (hard-coded in the code): a first visit, D = 0, forgets this much
    d_half: float = 0.06  # the log-prob change that halves a tracker's memory (hard-coded in the code)
    epsilon: float = 0.05  # the priority's floor: sqrt(v (1 - v)) + epsilon, so a solved prompt is still drawn

    def check(self, key: str) -> None:
        require(0 <= self.offline_n <= MAX_OFFLINE, f"{key}.offline_n", self.offline_n,
                f"must be in [0, {MAX_OFFLINE}]: a prior counts N0 = 1 / (1 - rho_min) answers however many were "
                "drawn, and every prompt of the pool draws offline_n at the first step")
        require(0 < self.rho_max < 1, f"{key}.rho_max", self.rho_max,
                "must be in (0, 1): at 1 a tracker never forgets, at 0 it keeps only the last answer")
        require(0 < self.rho_min <= self.rho_max, f"{key}.rho_min", self.rho_min,
                f"must be in (0, rho_max={self.rho_max}]")
        require(self.d_half > 0, f"{key}.d_half", self.d_half, "must be > 0")
        require(self.epsilon > 0, f"{key}.epsilon", self.epsilon,
                "must be > 0 (a prompt of weight 0 is never drawn again, so never re-measured)")


def prior(right: int, n: int, rho_min: float) -> tuple[float, float]:
    """A tracker's (alpha, beta) from `right` of `n` offline answers: N0 = 1 / (1 - rho_min) pseudo-answers split
    as (right + 0.5) : (n - right + 0.5); Beta(0.5, 0.5) with none."""
    if n == 0:
        return 0.5, 0.5
    n0 = 1 / (1 - rho_min)
    return n0 * (right + 0.5) / (n + 1), n0 * (n - right + 0.5) / (n + 1)


def priority(value: np.ndarray, epsilon: float) -> np.ndarray:
    """Each prompt's draw probability from its tracked value: sqrt(v (1 - v)) + epsilon, normalised."""
    w = np.sqrt(value * (1 - value)) + epsilon
    return w / w.sum()


def forgetting(shift: float, d_half: float, rho_min: float, rho_max: float) -> float:
    """rho = 2^(-D / d_half) clipped to [rho_min, rho_max]: the more the policy moved on this prompt's last
    answer, the less of its old count the tracker keeps."""
    return min(max(2.0 ** (-shift / d_half), rho_min), rho_max)


def answers_rollout(answers: list[dict], device) -> Rollout:
    """One Rollout (groups of one) of stored answers: {"prompt": ids, "completion": ids}, left-padded prompts."""
    import torch

    width = max(len(a["prompt"]) for a in answers)
    length = max(len(a["completion"]) for a in answers)
    pids = torch.zeros(len(answers), width, dtype=torch.long)
    pmask = torch.zeros(len(answers), width, dtype=torch.long)
    cids = torch.zeros(len(answers), length, dtype=torch.long)
    cmask = torch.zeros(len(answers), length, dtype=torch.bool)
    for i, a in enumerate(answers):
        p, c = a["prompt"], a["completion"]
        pids[i, width - len(p):], pmask[i, width - len(p):] = torch.tensor(p), 1
        cids[i, :len(c)], cmask[i, :len(c)] = torch.tensor(c), True
    lengths = cmask.sum(1)
    return Rollout(pids.to(device), pmask.to(device), cids.to(device), cmask.to(device), torch.zeros_like(cids,
                   dtype=torch.float32).to(device), [""] * len(answers), lengths.to(device),
                   torch.zeros(len(answers), dtype=torch.bool).to(device), 1)


def answer_of(group: Group) -> dict:
    """A one-answer group's prompt and completion token ids (the real tokens only), as plain lists."""
    ro = group.samples
    prompt = ro.prompt_ids[0][ro.prompt_mask[0].bool()].tolist()
    completion = ro.completion_ids[0][ro.completion_mask[0].bool()].tolist()
    return {"prompt": prompt, "completion": completion}


class SpoSampler(Sampler):
    name = "spo"
    settings_type = SpoSettings
    predicts = True
    one_answer = True
    reward_ceiling = 1.0

    def draw(self, draw_round, prompts: int) -> Draw:
        from grpo_lab import distributed  # torch: only once a run draws, never at config time

        c, st = self.settings, self.extra_state
        require(distributed.world() == 1, "sampler.name", self.name,
                "runs on one process: its trackers' log-prob passes are not split across ranks")
        pool = self.stream.pool
        estimate = []
        if "alpha" not in st:  # the first step: every prompt's tracker from offline_n answers of the base policy
            st["alpha"], st["beta"], st["last"] = {}, {}, {}
            for start in range(0, len(pool) if c.offline_n else 0, prompts):
                estimate += draw_round(list(pool[start:start + prompts]), 0, c.offline_n)
            right = {g.problem.prompt_id: int(g.correct.sum()) for g in estimate}
            for p in pool:
                st["alpha"][p.prompt_id], st["beta"][p.prompt_id] = prior(right.get(p.prompt_id, 0), c.offline_n,
                                                                          c.rho_min)
        value = np.array([self.value(p.prompt_id) for p in pool])
        size = prompts * self.cfg.group_size
        picked = self.rng.choice(len(pool), size=size, replace=size > len(pool), p=priority(value, c.epsilon))
        groups = draw_round([pool[i] for i in picked], 0, 1)
        for g, i in zip(groups, picked):
            g.predicted_rate = float(value[i])
        return Draw(estimate + groups, [[g] for g in use(groups)])

    def value(self, prompt_id: str) -> float:
        st = self.extra_state
        return st["alpha"][prompt_id] / (st["alpha"][prompt_id] + st["beta"][prompt_id])

    def after_update(self, step: int, draw: Draw, logprobs: Callable[[Rollout], torch.Tensor]) -> None:
        """Each answered prompt's tracker forgets by how far this update moved the policy on its previous answer,
        then counts this answer's reward; this answer and its log-probs now are kept for its next visit."""
        c, st = self.settings, self.extra_state
        answered = [g for g in draw.groups if g.used]
        if not answered:
            return
        device = answered[0].samples.completion_ids.device
        now = [answer_of(g) for g in answered]
        then = [st["last"].get(g.problem.prompt_id) for g in answered]
        earlier = [t for t in then if t is not None]
        new_logp = logprobs(answers_rollout(now, device))  # (B, T) under the updated policy
        old_logp = logprobs(answers_rollout(earlier, device)) if earlier else None
        row = 0
        for g, t in zip(answered, then):
            shift = 0.0
            if t is not None:  # a first visit compares its answer with itself: D = 0
                n = len(t["completion"])
                shift = float(np.mean(np.abs(np.asarray(t["logp"][:n]) - old_logp[row, :n].double().cpu().numpy())))
                row += 1
            rho = forgetting(shift, c.d_half, c.rho_min, c.rho_max)
            pid, r = g.problem.prompt_id, float(g.rewards[0])
            st["alpha"][pid] = rho * st["alpha"][pid] + r
            st["beta"][pid] = rho * st["beta"][pid] + (1 - r)
        for k, g in enumerate(answered):  # a prompt drawn twice in a step (a pool smaller than it): the last answer
            n = len(now[k]["completion"])
            st["last"][g.problem.prompt_id] = {**now[k], "logp": new_logp[k, :n].double().cpu().tolist()}
