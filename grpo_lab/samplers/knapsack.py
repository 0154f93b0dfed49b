"""KnapsackRL (Li et al. 2025, "Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget
Allocation", arXiv:2509.25849).

The paper's rule, as here: each step splits a fixed total of samples, `prompts_per_step x group_size`,
across the step's prompts so as to maximise the sum over prompts of Value(N_i, p_i), p_i the prompt's
estimated pass rate. Value(N, p) = (1 - p^N - (1-p)^N) * p(1-p)^2: the chance that N answers are not
all alike (a nonzero gradient) times the paper's InfoGain p(1-p)^2 (`value=info_gain`;
`nontie` drops the InfoGain factor). Each prompt gets between `min_per_prompt` and `max_per_prompt`;
a prompt never seen gets `group_size` (the uniform allocation: nothing is known of it); a prompt last
seen at p = 0 or 1 has value 0 and gets the minimum. What the values leave over (every mixed prompt at
its cap) goes to the prompts last seen all wrong, then all right (the paper's fallback: budget moves
from saturated to hard prompts).

Here: allocations move in units of `round_size` samples; the value is concave in N (its increments
p^N(1-p) + (1-p)^N p shrink), so handing out units one at a time to the largest marginal gain is
exact (tested against exhaustive search). The estimate of p is the pass rate of the prompt's last
visit. Each prompt's N samples are one groups-table row (group_size N) and one training unit.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.base import Sampler, SamplerSettings

VALUES = ("info_gain", "nontie")


@dataclass
class KnapsackSettings(SamplerSettings):
    round_size: int = 4  # the allocation's unit of samples (the samplers study's; each unit is one rollout chunk)
    min_per_prompt: int = 4  # the fewest samples a prompt is allotted (a prompt last seen at p 0 or 1 gets this)
    max_per_prompt: int = 32  # the most samples a prompt is allotted
    # the value of a group: info_gain, the paper's (1 - p^N - (1-p)^N) p(1-p)^2 | nontie, 1 - p^N - (1-p)^N
    value: str = "info_gain"

    def check(self, key: str) -> None:
        require(self.round_size >= 1, f"{key}.round_size", self.round_size, "must be >= 1")
        require(self.value in VALUES, f"{key}.value", self.value, f"must be one of {', '.join(map(repr, VALUES))}")


def group_value(n: np.ndarray | int, p: np.ndarray | float, kind: str = "info_gain") -> np.ndarray:
    """Value of a group of n answers at pass rate p: P(not all alike), times p(1-p)^2 for info_gain."""
    n, p = np.asarray(n, dtype=float), np.asarray(p, dtype=float)
    mixed = 1 - p**n - (1 - p) ** n
    return mixed * p * (1 - p) ** 2 if kind == "info_gain" else mixed


def allocate(rates: list[float | None], total: int, unit: int, least: int, most: int, fallback: int,
             kind: str = "info_gain") -> list[int]:
    """Samples per prompt summing to `total`, each a multiple of `unit` in [least, most].

    rates: each prompt's estimated pass rate, None if never seen (it gets `fallback`). Greedy on
    marginal value (exact for concave values); the remainder goes to prompts seen at p = 0, then p = 1,
    then to any prompt below `most`, in order. Requires len(rates) * least <= total <= len(rates) * most.
    """
    n = len(rates)
    if not n * least <= total <= n * most:
        raise ValueError(f"cannot split {total} samples over {n} prompts with {least} to {most} each")
    alloc = [fallback if r is None else least for r in rates]
    left = total - sum(alloc)
    if left < 0:  # too many unseen prompts for the fallback: they share what there is, evenly
        alloc = [least] * n
        left = total - n * least
        unseen = [i for i, r in enumerate(rates) if r is None]
        for k in range(left // unit):
            alloc[unseen[k % len(unseen)]] += unit
        return alloc
    heap = []  # (-gain of the next unit, index)
    for i, r in enumerate(rates):
        if r is not None and 0 < r < 1 and alloc[i] < most:
            heap.append((-_gain(alloc[i], r, unit, kind), i))
    heapq.heapify(heap)
    while left >= unit and heap:
        gain, i = heapq.heappop(heap)
        if gain >= 0:  # no positive gain left
            break
        alloc[i] += unit
        left -= unit
        if alloc[i] < most:
            heapq.heappush(heap, (-_gain(alloc[i], rates[i], unit, kind), i))
    for group in ([i for i, r in enumerate(rates) if r == 0], [i for i, r in enumerate(rates) if r == 1], range(n)):
        while left >= unit:
            room = [i for i in group if alloc[i] < most]
            if not room:
                break
            for i in room:
                if left < unit:
                    break
                alloc[i] += unit
                left -= unit
    return alloc


def _gain(n: int, p: float, unit: int, kind: str) -> float:
    """group_value(n + unit) - group_value(n) in plain floats (the greedy loop's hot path)."""
    q = 1 - p
    gain = p**n + q**n - p ** (n + unit) - q ** (n + unit)
    return gain * p * q * q if kind == "info_gain" else gain


def merge_groups(groups: list[Group]) -> Group:
    """Groups of one prompt drawn side by side (chunks of one rollout) as one group of all their samples.
    It is tied when every chunk is tied to the same reward."""
    if len(groups) == 1:
        return groups[0]
    first = groups[0]
    rewards = np.concatenate([g.rewards for g in groups])
    correct = np.concatenate([g.correct for g in groups])
    tie = all(g.tie for g in groups) and len({float(g.rewards[0]) for g in groups}) == 1
    # chunks of one rollout: nothing to pad. Across processes they were drawn on one rank (None elsewhere)
    from grpo_lab.rollout.generate import join_rollouts  # torch: only once groups exist, never at config time

    samples = join_rollouts([g.samples for g in groups], pad_id=0) if first.samples is not None else None
    answered = None if any(g.answered is None for g in groups) else np.concatenate([g.answered for g in groups])
    answers = None if any(g.answers is None for g in groups) else np.concatenate([g.answers for g in groups])
    return Group(first.problem, first.round, samples, rewards, correct, tie, rank=first.rank,
                 tokens=sum(g.tokens for g in groups), answered=answered, answers=answers,
                 prompt_tokens=sum(g.prompt_tokens for g in groups))  # each chunk's prompt was prefilled


class KnapsackSampler(Sampler):
    name = "knapsack"
    settings_type = KnapsackSettings

    @classmethod
    def check(cls, cfg) -> None:
        own, key, g = cfg.knapsack, "sampler.knapsack", cfg.group_size
        require(own.min_per_prompt >= 2 and own.min_per_prompt % own.round_size == 0, f"{key}.min_per_prompt",
                own.min_per_prompt, f"must be >= 2 and a multiple of {key}.round_size={own.round_size}")
        require(g % own.round_size == 0 and own.min_per_prompt <= g, "sampler.group_size", g,
                f"knapsack needs a multiple of {key}.round_size={own.round_size} within "
                f"[{key}.min_per_prompt={own.min_per_prompt}, {key}.max_per_prompt={own.max_per_prompt}]")
        require(own.max_per_prompt >= g and own.max_per_prompt % own.round_size == 0, f"{key}.max_per_prompt",
                own.max_per_prompt, f"must be >= sampler.group_size={g} and a multiple of "
                f"{key}.round_size={own.round_size}")

    def draw(self, draw_round, prompts: int) -> Draw:
        c, group_size = self.settings, self.cfg.group_size
        problems = self.stream.take(prompts)
        seen = self.extra_state.setdefault("pass_rate", {})  # prompt_id -> pass rate at its last visit
        alloc = allocate([seen.get(p.prompt_id) for p in problems], prompts * group_size, c.round_size,
                         c.min_per_prompt, c.max_per_prompt, group_size, c.value)
        chunks = [k for k, a in enumerate(alloc) for _ in range(a // c.round_size)]  # prompt of each chunk
        drawn = draw_round([problems[k] for k in chunks], 0, c.round_size)
        groups = []
        start = 0
        for k, a in enumerate(alloc):
            parts = drawn[start:start + a // c.round_size]
            start += len(parts)
            g = merge_groups(parts)
            g.used = True
            seen[problems[k].prompt_id] = float(g.correct.mean())
            groups.append(g)
        return Draw(groups, [[g] for g in groups])
