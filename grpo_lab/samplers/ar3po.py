"""AR3PO (Zhang, Yao, Yu, Liu, Yin, Yin, Yun and Li 2025, "Improving Sampling Efficiency in RLVR through Adaptive
Rollout and Response Reuse", arXiv:2509.25808; the OpenReview reviews say its code is open, but no copy of it could
be found or read here).

The paper's rule, as far as it could be read (its abstract, Figure 1's caption, its reviews):
- adaptive rollout: a prompt is sampled in stages (rounds) of `round_size` answers; a prompt with at least one
  right answer gets no more rounds (an all-right round stops it too: it has a right answer); a prompt whose answers
  are all wrong gets another round, up to `max_rounds` rounds;
- response reuse: a prompt whose answers are still all wrong after its last round is given a right answer it
  produced at an earlier step (kept per prompt), so its group is no longer tied all wrong.
The advantages are those of the run's rule (`algo.advantage`) over the prompt's final group: every answer of every
round, and the reused answer where there is one, pooled into one baseline. The reused answer was sampled by an
older policy: its ratio divides by the log-probs of that policy (its behaviour log-probs, kept with it), as the
replay buffer's do (grpo_lab/samplers/replay.py, whose helpers this uses).

Here (every choice below the paper's text could not settle is ours, and says so):
- the round size, the number of rounds and how the reused answer enters the group were not found: `round_size` 4
  (Figure 1's final mean of 5.7 sampled answers a prompt puts it below 6, as every prompt gets one round at
  least), `max_rounds` 4, and the reused answer is *added* to the prompt's answers (no drawn answer is dropped),
  one a prompt;
- kept answers: one per prompt, the latest right answer drawn (the last right answer of the prompt's last round
  at its latest visit), with the log-probs of the first policy pass of the step that drew it; so the store holds
  at most one answer a prompt of the training pool. An answer is kept after its step's update, so it is reused
  from the next step on; a reused answer is never kept again;
- a prompt whose answers stay all wrong with nothing kept trains with zero advantage (as GRPO's tied groups do),
  and all-right groups train too (zero advantage): nothing is dropped;
- each round is a groups-table row (round k: the prompt's (k+1)-th round), all rows of a prompt one training
  unit; the reused answer is a row of one sample with `reused` true, `source_step` the step that drew it and
  `round` its round then. It was drawn (and counted) at its source step: it does not count again in samples
  drawn, as the replay buffer's groups do not;
- the completions of a kept answer stay on the rank that drew it (every rank keeps the same entries), which trains
  it when it is reused; a checkpoint keeps every rank's store;
- a step with a reused answer (a group of one) trains its units in chunks of one sample (train/batching.py cuts
  units to their greatest common size): the same gradient, more prompt passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.base import Sampler, SamplerSettings, use
from grpo_lab.samplers.replay import kept_rollout, replayed_group


@dataclass
class Ar3poSettings(SamplerSettings):
    # answers a prompt gets each round (the paper's per-stage count: not found; Figure 1's final mean of 5.7
    # answers a prompt bounds it below 6, every prompt having one round at least)
    round_size: int = 4
    max_rounds: int = 4  # rounds a prompt gets at most, its cap max_rounds x round_size (the paper's: not found)

    def check(self, key: str) -> None:
        require(self.round_size >= 2, f"{key}.round_size", self.round_size,
                "must be >= 2 (a prompt that stops after a round of one has no baseline)")
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")


def another_round(rounds: list[np.ndarray], max_rounds: int) -> bool:
    """Whether a prompt whose rounds so far had these answers (each round's `correct`) gets one more: none of
    them right yet, and rounds left."""
    return len(rounds) < max_rounds and not any(c.any() for c in rounds)


def latest_right(groups: list[Group]) -> tuple[Group, int] | None:
    """The last right answer among these groups (in draw order), as (its group, its index), or None."""
    found = None
    for g in groups:
        right = np.flatnonzero(g.correct)
        if len(right):
            found = (g, int(right[-1]))
    return found


class Ar3poSampler(Sampler):
    name = "ar3po"
    reads_group_size = False
    settings_type = Ar3poSettings
    rank_local = True  # a kept answer's completion stays on the rank that drew it

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        own = cfg.ar3po  # every prompt right in its first round, or every prompt wrong to the cap
        return prompts * own.round_size, prompts * own.round_size * own.max_rounds

    def draw(self, draw_round, prompts: int) -> Draw:
        c = self.settings
        problems = self.stream.take(prompts)
        store = self.extra_state.setdefault("store", {})
        units: list[list[Group]] = [[] for _ in problems]
        every: list[Group] = []
        active = list(range(len(problems)))
        rnd = 0
        while active:  # one batched rollout a round, over the prompts still without a right answer
            fresh = draw_round([problems[i] for i in active], rnd, c.round_size)
            every += fresh
            for i, g in zip(active, fresh):
                units[i].append(g)
            rnd += 1
            active = [i for i in active if another_round([g.correct for g in units[i]], c.max_rounds)]
        reused = []
        for i, unit in enumerate(units):
            entry = store.get(problems[i].prompt_id)
            if entry is not None and not any(g.correct.any() for g in unit):  # all wrong at the cap
                unit.append(replayed_group(entry))
                reused.append(unit[-1])
        for unit in units:
            use(unit)
        return Draw(every + reused, units)

    def observe(self, step: int, draw: Draw, trained: dict, behaviour: dict) -> None:
        """Keep each prompt's latest right answer drawn this step, with its behaviour log-probs."""
        from grpo_lab import distributed  # torch: only once groups exist, never at config time
        from grpo_lab.rollout.generate import take_rows
        store = self.extra_state.setdefault("store", {})
        latest: dict[str, tuple[Group, int]] = {}
        for g in draw.groups:  # draw order: a later right answer of the same prompt replaces an earlier one
            found = None if g.reused else latest_right([g])
            if found is not None:
                latest[g.problem.prompt_id] = found
        held = {pid: (int(g.samples.lengths[j]), int(g.samples.truncated[j]))
                for pid, (g, j) in latest.items() if g.samples is not None}
        sizes = {pid: v for part in distributed.gather_objects(held) for pid, v in part.items()}  # every rank's
        for pid, (g, j) in latest.items():
            samples = None
            if id(g) in behaviour:  # this rank drew it: keep the one completion, on the CPU, with its log-probs
                samples = kept_rollout(take_rows(g.samples, np.array([j])), behaviour[id(g)][j:j + 1])
            tokens, truncated = sizes[pid]
            store[pid] = dict(step=step, problem=g.problem, round=g.round, index=j, rewards=g.rewards[j:j + 1].copy(),
                              correct=g.correct[j:j + 1].copy(), advantages=None, rank=g.rank, tokens=tokens,
                              truncated=truncated, samples=samples)
