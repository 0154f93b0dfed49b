"""Retiring solved prompts: ScaleRL's "no-positive-resampling" (Khatri et al. 2025, "The Art of Scaling
Reinforcement Learning Compute for LLMs", arXiv:2510.13786: a prompt whose pass rate reaches 0.9 is left out of
later epochs; no official code) as open-instruct's `no_resampling_pass_rate` implements it (allenai/open-instruct,
open_instruct/data_loader.py, the data loader of grpo_fast.py).

The rule, as open-instruct's code: after each group, its prompt's pass rate is the group's mean reward over the
highest score; at or above `pass_rate` the prompt's index joins the loader's excluded set (`exclude_index`), judged
from that one visit alone. The excluded set is read only when the loader reshuffles for a new epoch (`_reshard`), so a
prompt retired during an epoch is still served for the rest of that epoch and leaves from the next one on; the set
is never emptied (saved in the loader's checkpoint). The group that retired its prompt still trains as any other. An
epoch with every prompt excluded raises ("All dataset examples have been excluded").

Here: prompts come from the run's prompt stream (an epoch is one pass of its seeded permutations); a prompt retired by
a group drawn at a stream position of epoch e is passed over from epoch e + 1 on, each time counted in the steps
table (`skipped_prompts`); it costs no samples. A step takes the next `prompts_per_step` prompts not passed over
(across an epoch's end a prompt may come twice in one step, as with sampler=fixed) and draws one group of
`group_size` for each; every group trains (ties at zero advantage: the sampler chooses prompts, not groups). The pass
rate is the share of right answers (`correct`; the code's mean reward over the maximum, the same for 0/1 rewards).
The retired prompts, each with the epoch it was retired in, are the sampler's state. When a whole epoch of the stream
has no prompt left (every prompt of the pool retired), the run stops there, saying so, having drawn nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Problem
from grpo_lab.samplers.base import PromptStream, Sampler, SamplerSettings, use


@dataclass
class RetireSolvedSettings(SamplerSettings):
    # a group's share of right answers at or above which its prompt is retired from the next epoch on: ScaleRL's
    # 0.9 (open-instruct's flag has no default, None: off; its OLMo 3 scripts set 0.875, e.g. 7b_rlzero_math.sh:38)
    pass_rate: float = 0.9

    def check(self, key: str) -> None:
        require(0 < self.pass_rate <= 1, f"{key}.pass_rate", self.pass_rate,
                "must lie in (0, 1] (0 would retire every prompt at its first visit)")


def retires(correct: np.ndarray, threshold: float) -> bool:
    """Whether one group retires its prompt: its share of right answers reaches `threshold` (the code's >=)."""
    return bool(np.mean(correct) >= threshold)


def take_unretired(stream: PromptStream, retired: dict[str, int],
                   count: int) -> tuple[list[Problem], list[int], int] | None:
    """The next `count` prompts of `stream` still served: a prompt retired during epoch e (`retired[id] = e`) is passed
    over from epoch e + 1 on. Returns the prompts, the epoch each was taken in, and how many were passed over; None,
    with the cursor as it was, when a whole epoch of the stream has none left (every prompt of the pool retired)."""
    n, start = len(stream.pool), stream.cursor
    out, epochs, passed, served, whole = [], [], 0, 0, False
    while len(out) < count:
        epoch = stream.cursor // n
        if stream.cursor % n == 0:  # an epoch starts: the scan will see all of it
            served, whole = 0, True
        (p,) = stream.take(1)
        if retired.get(p.prompt_id, epoch) < epoch:
            passed += 1
        else:
            out.append(p)
            epochs.append(epoch)
            served += 1
        if stream.cursor % n == 0 and whole and not served:
            stream.cursor = start
            return None
    return out, epochs, passed


class RetireSolvedSampler(Sampler):
    name = "retire_solved"
    settings_type = RetireSolvedSettings

    def draw(self, draw_round, prompts: int) -> Draw:
        retired = self.extra_state.setdefault("retired", {})  # prompt_id -> the epoch it was retired in
        taken = take_unretired(self.stream, retired, prompts)
        if taken is None:
            pool = len({p.prompt_id for p in self.stream.pool})
            return Draw([], [], exhausted=(
                f"retire_solved sampler: every one of the training pool's {pool} prompts has been retired (a "
                f"group's pass rate reached sampler.retire_solved.pass_rate={self.settings.pass_rate}); nothing is "
                "left to draw"))
        problems, epochs, passed = taken
        groups = draw_round(problems, 0)
        for g, epoch in zip(groups, epochs):
            if retires(g.correct, self.settings.pass_rate):
                retired.setdefault(g.problem.prompt_id, epoch)
        return Draw(groups, [[g] for g in use(groups)], skipped=passed)
