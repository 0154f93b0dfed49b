"""What an advantage rule (`algo.advantage`) owns: its name, the `algo` keys only it reads, its checks and advice,
and what each sample of a training unit learns from the unit's rewards (tied units included)."""

from __future__ import annotations

import numpy as np
import torch


class AdvantageRule:
    """One rule, registered once in grpo_lab/advantage/__init__.py. Subclasses set the class attributes and
    override `advantages` (and, where `token_level`, `shape_tokens`)."""

    name: str = ""
    keys: tuple[str, ...] = ()  # shared `algo` keys only this rule reads: set under another rule they are refused
    settings_type: type | None = None  # a dataclass of its own keys, the `algo.<name>.*` block (None: none)
    reads_std: bool = True  # whether `algo.std` shapes its advantages (else set it and it is refused)
    # a tied unit is shaped token by token in the update, from the policy's entropies (its first pass keeps them)
    token_level: bool = False
    # its baseline is each prompt's pass rate as the sampler predicted it before the draw (Group.predicted_rate), and
    # its scale the step's: it defines `step_advantages` over the step's samples instead of `advantages` per unit
    predicted: bool = False

    def __init_subclass__(cls, **kwargs) -> None:
        """A rule says what it computes where it is defined: `advantages`, and `shape_tokens` where token level."""
        super().__init_subclass__(**kwargs)
        needed = ["step_advantages" if cls.predicted else "advantages", *(["shape_tokens"] * cls.token_level)]
        missing = [m for m in needed if getattr(cls, m).__func__ is getattr(AdvantageRule, m).__func__]
        if missing:
            raise TypeError(f"advantage rule {cls.__name__} ({cls.name!r}) must define {', '.join(missing)}")

    @classmethod
    def check(cls, algo) -> None:
        """Its own keys' ranges (grpo_lab.errors.require: one line naming the key); checked whatever the rule."""

    @classmethod
    def advice(cls, cfg) -> list[str]:
        """Warnings about valid settings that will not do what they seem to, for a config that chose this rule."""
        return []

    @classmethod
    def advantages(cls, rewards: torch.Tensor, correct: torch.Tensor, *, std: str, eps: float,
                   max_reward: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages [B, G], direction [B, G] int8) of groups of `rewards` [B, G] with `correct` [B, G]; the
        direction is nonzero only where a token-level rule shapes a tied unit (+1 all right, -1 all wrong). Every rule
        defines it (checked where it is defined); a rule with keys of its own (`settings_type`) is also given
        `settings=`, its `algo.<name>` block."""
        raise TypeError(f"{cls.__name__} defines no advantages")

    @classmethod
    def step_advantages(cls, rewards: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        """A predicted-baseline rule's advantages (P,) of the step's samples from their `rewards` (P,) and their
        prompts' `predicted` pass rates (P,). Defined by every such rule (checked where it is defined)."""
        raise TypeError(f"{cls.__name__} is not a predicted-baseline rule")

    @classmethod
    def shape_tokens(cls, advantages: torch.Tensor, direction: torch.Tensor, entropy: torch.Tensor,
                     mask: torch.Tensor, algo) -> torch.Tensor:
        """A token-level rule's token advantages (N, T) from the samples' `advantages` (N,) and `direction` (N,),
        the policy's detached `entropy` (N, T) and the completions' `mask` (N, T). Defined by every token-level rule
        (checked where it is defined); the update calls it for those only."""
        raise TypeError(f"{cls.__name__} is not a token-level rule: it shapes no tokens")


def no_direction(rewards: torch.Tensor) -> torch.Tensor:
    """The direction of a rule that shapes nothing token by token: zeros [B, G] int8."""
    return torch.zeros_like(rewards, dtype=torch.int8)
