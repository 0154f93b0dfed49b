"""rollout.engine=hf: grpo-lab's own decode loop (grpo_lab/rollout/generate.py's `sample_groups`), run on the policy
module itself, each group's prompt prefilled once and its KV cache shared by the G samples."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grpo_lab.rollout.engine import RolloutEngine, SamplingSettings

if TYPE_CHECKING:  # annotations only: the registry loads this module at config time, before torch
    import torch

    from grpo_lab.records import Rollout


class HFEngine(RolloutEngine):
    """The transformers decode loop on the policy module: its weights are the policy's, nothing to push."""

    name = "hf"

    def __init__(self, model, tokenizer, cfg: Any = None, device: torch.device | None = None):
        self.model, self.tokenizer = model, tokenizer

    def draw(self, prompts: list[str], group_size: int, sampling: SamplingSettings,
             generator: torch.Generator) -> Rollout:
        from grpo_lab.rollout.generate import sample_groups  # torch: once an engine draws, never at config time

        s = sampling
        return sample_groups(self.model, self.tokenizer, prompts, group_size, max_new_tokens=s.max_new_tokens,
                             temperature=s.temperature, generator=generator, end_ids=list(s.end_ids),
                             max_rows=s.max_rows, stop=s.stop, fast=s.fast)

    def sync(self, model) -> None:
        """The loop runs the policy module itself: drawing from `model` is drawing from the new weights."""
        self.model = model
