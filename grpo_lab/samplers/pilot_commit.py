"""Pilot-Commit (Kim, Yang, Yan and Liu 2026, "Spend Your Rollouts Where It Counts: Rollout Allocation for Group-Based
RL Post-Training", arXiv:2605.26606; code: databricks/pilot-commit, recipe/pc/pc_ray_trainer.py, replay_buffer.py,
config/pc_trainer.yaml and train_scripts/pc_*.sh).

The paper's rule, as its code: each generation round pilots a batch of fresh prompts with k answers each
(`exploration.n`). A prompt whose pilot's share of right answers lies in [p_lower, 1 - p_upper] passes
(`filter_batch`); one above is too easy, one below too hard ("deferred": it comes back next epoch). A prompt whose
pilot reaches p_solve is evicted: left out of the data from the next epoch on (`exclude_batch`, applied at the
epoch's end). Passing prompts wait in a buffer; the round's commit draws n more answers (`rollout.n`) for as many
buffered prompts as the batch still lacks (`random`ly chosen, or those of largest pilot std, when more wait), and
each trains as one group of its k pilot answers and its n commit answers under one baseline (same uid; all k pilot
answers: `n_effective` is unset). Rounds go on until the batch is full; after `max_num_gen_batches` rounds it raises.

Here: the pilot draws `pilot_size` answers and the commit `group_size - pilot_size`, so every trained unit has
exactly group_size answers (the paper's n: p32c96 of 128, p16c48 of 64). A round pilots the next `pilot_factor` x
prompts prompts of the run's stream not yet evicted (one rollout, round 0), then commits the passing ones at once,
only as many as the batch still lacks (a second rollout, round 1): pilot and commit are two groups-table rows pooled
into one training unit. Every pilot counts in the sample budget, committed or not. An evicted prompt is passed over
from the epoch after the one its pilot was drawn in (as sampler=retire_solved), counted in `skipped_prompts`; a pilot
passed over after sampling (too easy, too hard, or beyond the batch's need) is drawn, counted and unused, not skipped.
Departures, each because a step here draws and trains only its own samples:
- the code commits from a buffer one round late (a round's commits share its inference call with the next round's
  pilots) and keeps passing prompts beyond the batch's need up to `buffer_max_off_steps` (4) steps, so pilots of an
  earlier policy train beside commits of the new one. Here a round's passing prompts are committed in that round
  and nothing carries over but the stream cursor and the evicted prompts: passers beyond the need go unused;
- the code cuts a round's commits so that its rollouts divide by the GPU count; here any sizes;
- the code flushes a step's partial batch and the buffer at an epoch's end; here a step may span an epoch's end;
- all prompts evicted stops the run here, saying so (the code's loader would run out of batches).
The evicted prompts, each with the epoch it was evicted in, are the sampler's state; `choose=random` draws from the
sampler's own seeded generator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use
from grpo_lab.samplers.retire_solved import retires, take_unretired

CHOICES = ("random", "max_variance")  # the code's buffer_sampling_method values its scripts use


@dataclass
class PilotCommitSettings(SamplerSettings):
    """The paper runs' values (train_scripts/pc_qwen2.5-1.5b_p32c96.sh, pc_qwen3-4b_p16c48.sh) where the config's
    default differs (recipe/pc/config/pc_trainer.yaml)."""

    # k, answers a prompt's pilot draws: a quarter of the unit in both runs (32 of 128, 16 of 64), 2 of our 8 (the
    # config's exploration.n 8 is a count for its own rollout.n); the commit draws group_size - pilot_size
    pilot_size: int = 2
    # prompts piloted a round, per prompt the step trains: gen_prompt_bsz / train_prompt_bsz = 384 / 128 in both runs
    # (the config's gen_batch_size defaults to the train batch: 1)
    pilot_factor: int = 3
    # a pilot passes when its share right is >= p_lower (the runs' 0.125; the config's 0.25) ...
    p_lower: float = 0.125
    p_upper: float = 0.25  # ... and <= 1 - p_upper (0.25 in the runs and the config)
    # a pilot whose share right reaches it evicts its prompt from the next epoch on: 1.0 in the runs (an all-right
    # pilot), the config's null: never
    p_solve: float | None = 1.0
    # which passing prompts are committed when more pass than the batch lacks (the code's buffer_sampling_method):
    # random (the config, the 4B run) | max_variance (the 1.5B run: the largest pilot std first)
    choose: str = "random"
    # generation rounds a step, then the run stops saying so (max_num_gen_batches: 10 in the config and the runs)
    max_rounds: int = 10

    def check(self, key: str) -> None:
        require(self.pilot_size >= 1, f"{key}.pilot_size", self.pilot_size, "must be >= 1")
        require(self.pilot_factor >= 1, f"{key}.pilot_factor", self.pilot_factor,
                "must be >= 1 (a round pilots pilot_factor x prompts_per_step prompts)")
        for name in ("p_lower", "p_upper"):
            require(0 <= getattr(self, name) <= 1, f"{key}.{name}", getattr(self, name), "must lie in [0, 1]")
        require(self.p_lower <= 1 - self.p_upper, f"{key}.p_lower", self.p_lower,
                f"must be <= 1 - {key}.p_upper = {1 - self.p_upper:g} (else no pilot passes)")
        require(self.p_solve is None or 0 < self.p_solve <= 1, f"{key}.p_solve", self.p_solve,
                "must lie in (0, 1], or be null (no prompt is evicted)")
        require(self.choose in CHOICES, f"{key}.choose", self.choose, f"must be one of {', '.join(map(repr, CHOICES))}")
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")


def passes_pilot(correct: np.ndarray, p_lower: float, p_upper: float) -> bool:
    """Whether a pilot's prompt is committed: p_lower <= its share right <= 1 - p_upper (the code's filter_batch)."""
    share = float(np.mean(correct))
    return p_lower <= share <= 1 - p_upper


def to_commit(pilots: list[np.ndarray], need: int, p_lower: float, p_upper: float, choose: str,
              rng: np.random.Generator) -> list[int]:
    """Which pilots of a round (each a prompt's (k,) correct) are committed, in stream order: every passing one
    when at most `need` pass; else `need` of them, drawn at random or the largest pilot std first (ties to the
    earlier, as the code's stable sort)."""
    passing = [i for i, c in enumerate(pilots) if passes_pilot(c, p_lower, p_upper)]
    if len(passing) <= need:
        return passing
    if choose == "random":
        return sorted(rng.choice(passing, size=need, replace=False).tolist())
    return sorted(sorted(passing, key=lambda i: -float(np.std(pilots[i].astype(np.float64))))[:need])


class PilotCommitSampler(Sampler):
    name = "pilot_commit"
    settings_type = PilotCommitSettings

    @classmethod
    def check(cls, cfg) -> None:
        require(cfg.pilot_commit.pilot_size < cfg.group_size, "sampler.pilot_commit.pilot_size",
                cfg.pilot_commit.pilot_size,
                f"must be < sampler.group_size={cfg.group_size} (the commit draws group_size - pilot_size more; "
                "pilot and commit train as one group of group_size)")

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        own = cfg.pilot_commit
        piloted = own.pilot_factor * prompts * own.pilot_size  # one round's pilots
        committed = prompts * (cfg.group_size - own.pilot_size)  # the batch's commits, however many rounds
        return piloted + committed, own.max_rounds * piloted + committed

    def draw(self, draw_round, prompts: int) -> Draw:
        own = self.settings
        evicted = self.extra_state.setdefault("evicted", {})  # prompt_id -> the epoch its pilot evicted it in
        every, units, skipped = [], [], 0
        for _ in range(own.max_rounds):
            taken = take_unretired(self.stream, evicted, own.pilot_factor * prompts)
            if taken is None:
                pool = len({p.prompt_id for p in self.stream.pool})
                return Draw(every, [], skipped=skipped, exhausted=(
                    f"pilot_commit sampler: every one of the training pool's {pool} prompts has been evicted (a "
                    f"pilot's pass rate reached sampler.pilot_commit.p_solve={own.p_solve}); nothing is left to draw"))
            problems, epochs, passed = taken
            skipped += passed
            pilots = draw_round(problems, 0, own.pilot_size)
            every += pilots
            if own.p_solve is not None:
                for g, epoch in zip(pilots, epochs):
                    if retires(g.correct, own.p_solve):
                        evicted.setdefault(g.problem.prompt_id, epoch)
            chosen = to_commit([g.correct for g in pilots], prompts - len(units), own.p_lower, own.p_upper,
                               own.choose, self.rng)
            if chosen:
                rest = draw_round([pilots[i].problem for i in chosen], 1, self.cfg.group_size - own.pilot_size)
                every += rest
                units += [[pilots[i], g] for i, g in zip(chosen, rest)]
            if len(units) == prompts:
                return Draw(every, [use(unit) for unit in units], skipped=skipped)
        return Draw(every, [], skipped=skipped, exhausted=(
            f"pilot_commit sampler: {own.max_rounds} generation rounds (sampler.pilot_commit.max_rounds) found only "
            f"{len(units)} of {prompts} prompts whose {own.pilot_size} pilot answers were between "
            f"sampler.pilot_commit.p_lower={own.p_lower} and 1 - p_upper={1 - own.p_upper:g} right; the prompts are "
            "too easy or too hard for this model"))
