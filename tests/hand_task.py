"""A hand-built task for the samplers' oracle tests: each prompt answers right at a fixed rate (the first k of its
G = 4 answers), and a sampler of any registered name drawing from it with its own keys set."""

from __future__ import annotations

import numpy as np

from grpo_lab.config import TrainConfig
from grpo_lab.records import Group, Problem
from grpo_lab.samplers import PromptStream, Sampler, build_sampler, check_sampler

G = 4


def rate_round(rates: dict[str, float]):
    """A DrawRound whose prompt `pid` answers right round(rates[pid] x G) times of G, the first ones."""
    def draw_round(problems, rnd, size=None):
        out = []
        for p in problems:
            c = np.arange(G) < round(rates[p.prompt_id] * G)
            out.append(Group(p, rnd, None, c.astype(np.float32), c, bool(c.all() or not c.any()), tokens=G))
        return out
    return draw_round


def sampler_on(name: str, pool: tuple[Problem, ...] | dict, **keys) -> Sampler:
    """Sampler `name` (groups of G, `keys` set on its own block, checked) over `pool`, a stream seeded 5; a dict of
    rates is a pool of one prompt each, id and question the key, difficulty "1"."""
    cfg = TrainConfig().sampler
    cfg.name, cfg.group_size = name, G
    for k, v in keys.items():
        setattr(getattr(cfg, name), k, v)
    check_sampler(cfg)
    if isinstance(pool, dict):
        pool = tuple(Problem(pid, pid, "0", "1") for pid in pool)
    return build_sampler(cfg, PromptStream(pool, seed=5))
