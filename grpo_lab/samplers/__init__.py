"""Samplers decide how many samples each prompt gets, and which groups enter the gradient.

Every group drawn is returned (and written to the group table, `used` or not), so the run's
sample and token counters are its true inference cost.

Each sampler owns its rules (samplers/base.py: `name`, `settings_type`, `check`, `draw_bounds`) and is
registered here, once. The config's `sampler` block is made from the registry (grpo_lab/config/blocks.py): `name`
and `group_size`, shared by all, and one block of keys per sampler that has its own (`sampler.band.lo`, ...), so
`sampler=band` and `sampler.name=band` are the same run.
"""

from __future__ import annotations

from grpo_lab.errors import require
from grpo_lab.records import Draw, Group
from grpo_lab.samplers.ar3po import Ar3poSampler
from grpo_lab.samplers.band import BandSampler
from grpo_lab.samplers.base import PromptStream, Sampler
from grpo_lab.samplers.dars import DarsSampler
from grpo_lab.samplers.dynamic import DynamicSampler
from grpo_lab.samplers.fixed import FixedSampler
from grpo_lab.samplers.greso import GresoSampler
from grpo_lab.samplers.knapsack import KnapsackSampler
from grpo_lab.samplers.learnability import LearnabilitySampler
from grpo_lab.samplers.mopps import MoppsSampler
from grpo_lab.samplers.pilot_commit import PilotCommitSampler
from grpo_lab.samplers.pods import PodsSampler
from grpo_lab.samplers.reinforce_ada import ReinforceAdaSampler
from grpo_lab.samplers.replay import ReplaySampler
from grpo_lab.samplers.resample_on_tie import ResampleOnTieSampler
from grpo_lab.samplers.retire_solved import RetireSolvedSampler
from grpo_lab.samplers.speed import SpeedSampler
from grpo_lab.samplers.spo import SpoSampler
from grpo_lab.samplers.thompson_bins import ThompsonBinsSampler

SAMPLERS: dict[str, type[Sampler]] = {cls.name: cls for cls in (
    FixedSampler, ResampleOnTieSampler, DynamicSampler, BandSampler, ReinforceAdaSampler, KnapsackSampler,
    GresoSampler, PodsSampler, ReplaySampler, DarsSampler, MoppsSampler, SpeedSampler,
    Ar3poSampler, SpoSampler, RetireSolvedSampler, PilotCommitSampler,
    LearnabilitySampler, ThompsonBinsSampler)}

def check_sampler(cfg) -> None:
    """Every sampler block's own ranges, then the chosen sampler's rules against the shared keys."""
    require(cfg.name in SAMPLERS, "sampler.name", cfg.name, f"must be one of {', '.join(map(repr, SAMPLERS))}")
    require(cfg.group_size >= 2, "sampler.group_size", cfg.group_size, "must be >= 2 (a group of one has no baseline)")
    for name, cls in SAMPLERS.items():
        if cls.settings_type is not None:
            getattr(cfg, name).check(f"sampler.{name}")
    SAMPLERS[cfg.name].check(cfg)


def draw_bounds(cfg, prompts: int) -> tuple[int, int]:
    """The fewest and the most samples one step of the configured sampler can draw over `prompts` prompts."""
    return SAMPLERS[cfg.name].draw_bounds(cfg, prompts)


def build_sampler(cfg, stream: PromptStream) -> Sampler:
    """The sampler `cfg.name` names (cfg: the SamplerConfig), reading its own block of cfg."""
    require(cfg.name in SAMPLERS, "sampler.name", cfg.name, f"must be one of {', '.join(map(repr, SAMPLERS))}")
    return SAMPLERS[cfg.name](cfg, stream)


__all__ = ["Draw", "Group", "PromptStream", "Sampler", "SAMPLERS", "build_sampler", "check_sampler",
           "draw_bounds"]
