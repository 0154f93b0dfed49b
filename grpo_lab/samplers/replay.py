"""A replay buffer for tied groups (TRL PR #4060's design; TRL's experimental GRPOWithReplayBufferTrainer).

The rule, as TRL's: every group whose rewards differ (sigma > 0) that trained is offered to a buffer of `size`
groups with score s = sum_i |A_i| * sigma; the buffer keeps the highest scores (a full buffer takes a group only
when its score beats the lowest, which then leaves). Each tied group of a batch is replaced by a buffered group
drawn with probability proportional to s, which trains again with its completions and the advantages it had.

What TRL's version got wrong (issue #6804, where it was withdrawn) and why this one cannot:
- its buffer took per-sample (B,) tensors where it expected (groups, G) ones, so `std.max(dim=0) > 0` reduced the
  whole batch to one boolean and only "group 0" was ever buffered (and a replacement overwrote one row's
  advantage). Here the buffer is offered Group objects, one at a time, each scored from its own rewards and
  advantages: there is no tensor shape to get wrong (tests/test_samplers_ties.py replays the buffer from the
  groups table of a real run and finds every mixed group offered);
- on the on-policy path it stored no old log-probs, so a replayed sample's ratio divided by the current policy's
  (ratio 1: no off-policy correction). Here every buffered group keeps its behaviour log-probs (the first policy
  pass of the step that drew it, the policy that sampled it) as its rollout's old_logp, and the update divides
  by them;
- equal scores (common: with binary rewards the score depends only on the number right) made heapq compare the
  stored dicts. Here entries carry a sequence number: the oldest of the lowest scores leaves first;
- each process kept a buffer of its own groups. Here every rank holds the same entries (scores, rewards,
  advantages: global quantities) and the completions stay on the rank that drew them, which trains them when
  they are replayed; a checkpoint keeps every rank's state.

Here too: replays are drawn from the groups buffered at earlier steps (this step's are offered after its
update, with their behaviour log-probs), without replacement within a step (successive draws, each with
probability proportional to s among those not yet drawn), with the sampler's seeded generator; a tie that
finds the buffer short stays in the batch (it trains with zero advantage, as fixed groups do). A replayed group
is a groups-table row with `reused` true and `source_step` set, not counted again in samples drawn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.base import Sampler, SamplerSettings, use


@dataclass
class ReplaySettings(SamplerSettings):
    size: int = 64  # groups the buffer keeps, the highest scores (TRL's replay_buffer_size)

    def check(self, key: str) -> None:
        require(self.size >= 1, f"{key}.size", self.size, "must be >= 1")


def replay_score(rewards: np.ndarray, advantages: np.ndarray) -> float:
    """A group's score in the buffer: the sum of its samples' |advantage| times its rewards' (population) std."""
    return float(np.abs(np.asarray(advantages, np.float64)).sum() * np.asarray(rewards, np.float64).std())


def offer(buffer: list[dict], entry: dict, size: int) -> bool:
    """Keep the `size` highest scores: a full buffer takes `entry` only when its score beats the lowest, which
    leaves (the oldest of them when several tie). `buffer` stays in the order entries came in. Returns taken."""
    if len(buffer) < size:
        buffer.append(entry)
        return True
    low = min(range(len(buffer)), key=lambda k: (buffer[k]["score"], buffer[k]["seq"]))
    if entry["score"] <= buffer[low]["score"]:
        return False
    buffer.pop(low)
    buffer.append(entry)
    return True


def draw_replays(scores: list[float], k: int, rng: np.random.Generator) -> list[int]:
    """k distinct indices: each draw picks among those not yet drawn with probability proportional to its score."""
    left, out = list(range(len(scores))), []
    for _ in range(min(k, len(scores))):
        cum = np.cumsum([scores[i] for i in left])
        j = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
        out.append(left.pop(min(j, len(left) - 1)))
    return out


class ReplaySampler(Sampler):
    name = "replay"
    settings_type = ReplaySettings
    rank_local = True  # the buffered completions stay on the rank that drew them

    def draw(self, draw_round, prompts: int) -> Draw:
        fresh = use(draw_round(self.stream.take(prompts), 0))
        buffer = self.extra_state.setdefault("buffer", [])
        ties = [i for i, g in enumerate(fresh) if g.tie]
        units = [[g] for g in fresh]
        replays = []
        for i, k in zip(ties, draw_replays([e["score"] for e in buffer], len(ties), self.rng)):
            fresh[i].used = False  # replaced: drawn and counted, not trained
            units[i] = [replayed_group(buffer[k])]
            replays.append(units[i][0])
        return Draw(fresh + replays, units)

    def observe(self, step: int, draw: Draw, trained: dict, behaviour: dict) -> None:
        """Offer every group drawn this step that trained with differing rewards, with its behaviour log-probs."""
        buffer = self.extra_state.setdefault("buffer", [])
        for g in draw.groups:
            if g.reused or not g.used or g.tie:
                continue
            advantages = trained[id(g)].advantages
            samples = None
            if id(g) in behaviour:  # this rank drew it: keep its completions, on the CPU, with their log-probs
                samples = kept_rollout(g.samples, behaviour[id(g)])
            seq = self.extra_state.get("seq", 0)
            self.extra_state["seq"] = seq + 1
            offer(buffer, dict(seq=seq, step=step, problem=g.problem, round=g.round, rewards=g.rewards,
                               correct=g.correct, advantages=advantages, score=replay_score(g.rewards, advantages),
                               rank=g.rank, tokens=g.tokens, truncated=g.truncated, samples=samples),
                  self.settings.size)


def kept_rollout(ro, behaviour):
    """A rollout to keep across steps: its old_logp replaced by `behaviour` (the log-probs of the policy that
    sampled it), every tensor detached and on the CPU."""
    ro = dataclasses.replace(ro, old_logp=behaviour)
    return dataclasses.replace(ro, **{f.name: getattr(ro, f.name).detach().cpu()
                                      for f in dataclasses.fields(ro) if hasattr(getattr(ro, f.name), "cpu")})


def replayed_group(entry: dict) -> Group:
    """A kept group as one that trains again: its completions (on the rank that drew it), and the advantages it
    had (None: it takes those of the unit it joins, as sampler=ar3po's reused answers do)."""
    return Group(entry["problem"], entry["round"], entry["samples"], entry["rewards"], entry["correct"], False,
                 used=True, rank=entry["rank"], tokens=entry["tokens"], truncated=entry["truncated"],
                 source_step=entry["step"], advantages=entry["advantages"])
