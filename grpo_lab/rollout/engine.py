"""What a rollout engine is (`rollout.engine`): the calls the trainer and evaluation make of it, and the keys and
checks it owns. Each engine is one module (`hf_engine`, `vllm_engine`), registered once in
grpo_lab/rollout/engines.py, which makes the config's `rollout` block from the registry.

An engine takes prompts and G and returns a Rollout: the drawn tokens, their log-probs under the sampling
distribution, and the ends, counts and texts that grpo_lab/rollout/generate.py's `assemble` makes by one rule for
every engine; samplers, budgets and tables never know which engine ran. After every optimizer step the trainer
calls `sync` with the policy, so the next draw comes from the weights just updated; before each update it calls
`rest`, so an engine that can sleep frees its memory for the update.

Nothing here imports torch: the registry, and the config made from it, load at config time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # annotations only
    import torch

    from grpo_lab.records import Rollout


@dataclass(frozen=True)
class SamplingSettings:
    """How one draw samples, beside its prompts, G and random generator."""

    max_new_tokens: int
    temperature: float  # 0: greedy
    end_ids: Sequence[int]  # tokens that end a completion (the tokenizer's end tokens, the chat template's)
    stop: Sequence[str] = ()  # strings that end a completion; its text is cut before the first (as vLLM)
    # rows (prompts x samples) per generation call of an engine that batches as it is told (hf; None: all at once);
    # an engine that batches by its own KV cache ignores it
    max_rows: int | None = None
    fast: bool = False  # model.fast_math: the hf loop's one-pass sampler (another engine has its own kernels)

    @classmethod
    def for_training(cls, cfg: Any, end_ids: Sequence[int]) -> SamplingSettings:
        """A training run's draws (cfg: the TrainConfig): rollout.*, and model.fast_math."""
        r = cfg.rollout
        return cls(r.max_new_tokens, r.temperature, tuple(end_ids), tuple(r.stop), r.max_rows_per_call,
                   cfg.model.fast_math)


@dataclass
class EngineSettings:
    """An engine's own keys, under `rollout.<its name>.` in the config (its defaults are its reasons)."""

    def check(self, key: str) -> None:
        """Raise ConfigError naming `key`.<field> for a value that cannot work on its own (checked whatever the
        engine: a value is checked where it is set)."""


class RolloutEngine(ABC):
    """One engine. `grpo_lab.rollout.engines` registers it once and builds it as `cls(model, tokenizer, cfg,
    device)` for a run of `cfg` (the TrainConfig) whose policy is `model`, holding the policy's weights as they are.

    A subclass owns its rules: `name` (its one spelling, `rollout.engine=<name>`), `settings_type` (its keys,
    `rollout.<name>.*`), `check` (what a config that chose it needs), `build` (made for a run's prompts), `draw`
    (one call's samples), `sync` (the policy's new weights), `rest` (before an update) and `close`. Callers call
    `sample`."""

    name: ClassVar[str]
    settings_type: ClassVar[type[EngineSettings] | None] = None  # None: no keys of its own

    @classmethod
    def check(cls, cfg: Any) -> None:
        """Raise ConfigError (one line naming the key) for a config that chose this engine and that it cannot run:
        what it needs installed, settings that cannot work with the rest of the config. Before any model loads."""
        return None  # an engine that needs nothing beyond the generic checks

    @classmethod
    def build(cls, model: Any, tokenizer: Any, cfg: Any, device: Any, prompts: Sequence[str] = ()) -> RolloutEngine:
        """The engine for a run whose every prompt (training's and evaluation's) is among `prompts`: an engine sized
        by them (vLLM's context) overrides this; the rest are `cls(model, tokenizer, cfg, device)`."""
        return cls(model, tokenizer, cfg, device)

    def sample(self, prompts: list[str], group_size: int, sampling: SamplingSettings | None = None, *,
               generator: torch.Generator, **settings: Any) -> Rollout:
        """`group_size` completions of each prompt (sample j of prompt i is row i*G + j), drawn from `generator` as
        `sampling` says, or as its fields given as keywords say (`max_new_tokens=`, `temperature=`, `end_ids=`,
        ...: the callers that name each one)."""
        if sampling is None:
            sampling = SamplingSettings(**settings)
        elif settings:
            raise TypeError(f"{type(self).__name__}.sample takes its settings as `sampling` or as keywords, not both "
                            f"(got {', '.join(settings)} beside it)")
        return self.draw(prompts, group_size, sampling, generator)

    @abstractmethod
    def draw(self, prompts: list[str], group_size: int, sampling: SamplingSettings,
             generator: torch.Generator) -> Rollout:
        """`sample`'s Rollout. Its random draws come from `generator` alone, so a run and its resume draw the same
        samples; its rows end, count and decode by generate.assemble's rule."""

    @abstractmethod
    def sync(self, model: torch.nn.Module) -> None:
        """`model` (the policy) took an optimizer step, or had a checkpoint's weights loaded: the next draw comes
        from its weights as they are now."""

    def rest(self) -> None:
        """The trainer is about to update the policy (once a step, after the step's last draw): give back what the
        update may need (an engine that sleeps: its weights and KV cache); the next draw takes it again."""
        return None  # an engine that holds nothing beside the policy gives nothing back

    def close(self) -> None:
        """Free what the engine holds beside the policy (a cache, a folder, a process); it draws no more."""
        return None  # an engine that holds nothing beside the policy frees nothing
