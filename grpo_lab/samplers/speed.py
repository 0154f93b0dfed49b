"""SPEED (Zhang, Arora, Mei and Zanette 2025, "SPEED-RL: Faster Training of Reasoning Models via Online
Curriculum Learning", arXiv:2506.09016; code: Zanette-Labs/speed-rl, its `verl/trainer/ppo/data_controller.py`
and `recipe/dapo/src/fast_dapo_ray_trainer.py`).

The paper's rule, as its code: each generation round screens a batch of fresh prompts with N_init answers each
(the screening phase). A prompt whose screen is neither all right nor all wrong (the std of its 0/1 accuracies is
> 0) qualifies and gets N_cont more answers (the continuation phase); a prompt screened out is dropped, its
answers unused. The screen's answers join the continuation's: a qualified prompt trains as one group of
N_init + N_cont answers under one baseline (its advantages are grouped by the prompt's id). Rounds go on until
the batch's prompts have completed both phases; a step whose rounds run past the cap stops the run.

Here: N_init is `screen_size` and N_init + N_cont is `sampler.group_size`, so every trained unit has exactly
group_size samples and the continuation draws group_size - screen_size. A round screens `screen_factor` x
prompts fresh prompts from the stream (one rollout), then continues the qualified ones in stream order, only as
many as the batch still lacks (a second rollout). The screen is a groups-table row (round 0) and the
continuation another (round 1), pooled into one training unit; every screen counts in the sample budget.
Departures, each because a step here draws and trains only its own samples:
- the code pre-fetches: a round's continuations are drawn in the same inference call as the next round's
  screens, and prompts qualified or completed beyond the batch are kept for the next step, where screens of an
  earlier policy would train beside continuations of the new one. Here nothing carries over but the stream
  cursor: qualified prompts beyond the batch's need are not continued (their screens are drawn, counted, unused);
- the code's N_cont must be a multiple of N_init and its continuations are cut to a multiple of the GPU count
  (how it batches the inference engine); here any sizes;
- the code's loop takes a data-loader batch at each training step and does not use it (those prompts are
  skipped for the epoch); here no prompt of the stream is passed over;
- the cap counts screening rounds (`max_rounds`); the code counts inference calls, each of which screens one
  fresh batch (at most 49 a step: it raises at its 50th).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grpo_lab.errors import require
from grpo_lab.records import Draw
from grpo_lab.samplers.base import Sampler, SamplerSettings, use


@dataclass
class SpeedSettings(SamplerSettings):
    # N_init, answers a prompt's screen draws: 4 in the paper's runs (run_fast_rloo_7b.sh:39, n_resp_per_prompt=4
    # of 4 + 20) and in its config (recipe/dapo/src/config/fast_dapo_trainer.yaml:36, n: 4 of 4 + 12)
    screen_size: int = 4
    # prompts screened a round, per prompt the step trains: the code's gen_batch_size / train_batch_size, 64 / 16 in
    # its run scripts (run_fast_rloo_7b.sh:36-37); its config's default is 1 (gen_batch_size = train_batch_size)
    screen_factor: int = 4
    # screening rounds a step, then the run stops saying so: the code's scripts set max_num_gen_batches=50
    # (run_fast_rloo_7b.sh:33) and it raises once a step's inference calls reach it (data_controller.py:85-87)
    max_rounds: int = 49

    def check(self, key: str) -> None:
        require(self.screen_size >= 2, f"{key}.screen_size", self.screen_size,
                "must be >= 2 (the screen's test, a std of its accuracies above 0, needs two answers)")
        require(self.screen_factor >= 1, f"{key}.screen_factor", self.screen_factor,
                "must be >= 1 (a round screens screen_factor x prompts_per_step prompts)")
        require(self.max_rounds >= 1, f"{key}.max_rounds", self.max_rounds, "must be >= 1")


def passes_screen(correct: np.ndarray) -> bool:
    """Whether a screen qualifies its prompt: some answers right and some wrong (the code's std > 0 on accuracy)."""
    right = int(np.sum(correct))
    return 0 < right < len(correct)


def to_continue(screens: list[np.ndarray], need: int) -> list[int]:
    """Which screens of a round (each a prompt's (N_init,) correct) are continued: the first `need` that pass."""
    return [i for i, correct in enumerate(screens) if passes_screen(correct)][:need]


class SpeedSampler(Sampler):
    name = "speed"
    settings_type = SpeedSettings

    @classmethod
    def check(cls, cfg) -> None:
        require(cfg.speed.screen_size < cfg.group_size, "sampler.speed.screen_size", cfg.speed.screen_size,
                f"must be < sampler.group_size={cfg.group_size} (the continuation draws group_size - screen_size "
                "more; screen and continuation train as one group of group_size)")

    @classmethod
    def draw_bounds(cls, cfg, prompts: int) -> tuple[int, int]:
        own = cfg.speed
        screened = own.screen_factor * prompts * own.screen_size  # one round's screens
        continued = prompts * (cfg.group_size - own.screen_size)  # the batch's continuations, however many rounds
        return screened + continued, own.max_rounds * screened + continued

    def draw(self, draw_round, prompts: int) -> Draw:
        own = self.settings
        more = self.cfg.group_size - own.screen_size
        every, units = [], []
        for _ in range(own.max_rounds):
            screens = draw_round(self.stream.take(own.screen_factor * prompts), 0, own.screen_size)
            every += screens
            chosen = to_continue([g.correct for g in screens], prompts - len(units))
            if chosen:
                rest = draw_round([screens[i].problem for i in chosen], 1, more)
                every += rest
                units += [[screens[i], g] for i, g in zip(chosen, rest)]
            if len(units) == prompts:
                return Draw(every, [use(unit) for unit in units])
        return Draw(every, [], exhausted=(
            f"speed sampler: {own.max_rounds} screening rounds (sampler.speed.max_rounds) found only {len(units)} of "
            f"{prompts} prompts whose {own.screen_size} screening answers were neither all right nor all wrong; "
            "the prompts are too easy or too hard for this model"))
