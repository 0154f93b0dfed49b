"""Samplers decide how many samples each prompt gets, and which groups enter the gradient.

Every group drawn is returned (and written to the group table, `used` or not), so the run's
sample and token counters are its true inference cost.
"""

from grpo_lab.samplers.band import BandSampler
from grpo_lab.samplers.base import Draw, Group, PromptStream, Sampler
from grpo_lab.samplers.dynamic import DynamicSampler
from grpo_lab.samplers.fixed import FixedSampler
from grpo_lab.samplers.greso import GresoSampler
from grpo_lab.samplers.knapsack import KnapsackSampler
from grpo_lab.samplers.reinforce_ada import ReinforceAdaSampler
from grpo_lab.samplers.resample_on_tie import ResampleOnTieSampler

SAMPLERS = {"fixed": FixedSampler, "resample_on_tie": ResampleOnTieSampler, "dynamic": DynamicSampler,
            "band": BandSampler, "reinforce_ada": ReinforceAdaSampler, "knapsack": KnapsackSampler,
            "greso": GresoSampler}


def build_sampler(cfg, stream: PromptStream) -> Sampler:
    """cfg: a SamplerConfig; its `name` picks the class."""
    if cfg.name not in SAMPLERS:
        raise ValueError(f"sampler.name={cfg.name!r} is not supported. Must be one of {', '.join(map(repr, SAMPLERS))}.")
    return SAMPLERS[cfg.name](cfg, stream)


__all__ = ["Draw", "Group", "PromptStream", "Sampler", "SAMPLERS", "build_sampler"]
