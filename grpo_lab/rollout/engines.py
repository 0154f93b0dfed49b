"""Rollout engines (`rollout.engine`): what draws a step's samples and a checkpoint's evaluation.

Each engine owns its rules (grpo_lab/rollout/engine.py: `name`, `settings_type`, `check`, `build`, `draw`, `sync`,
`rest`) and is registered here, once. The config's `rollout` block is made from the registry
(grpo_lab/config/blocks.py): the keys every engine reads, then one block of keys per engine that has its own
(`rollout.vllm.*`). Members: `hf` (grpo-lab's own decode loop) and `vllm` (a colocated vLLM engine; vLLM itself is
imported only when it is chosen: it needs the `vllm` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpo_lab.errors import require
from grpo_lab.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings
from grpo_lab.rollout.hf_engine import HFEngine
from grpo_lab.rollout.vllm_engine import VLLMEngine

ENGINES: dict[str, type[RolloutEngine]] = {cls.name: cls for cls in (HFEngine, VLLMEngine)}


def engine_kind(name: str) -> type[RolloutEngine]:
    """The engine `rollout.engine` names (one line naming the key where none is)."""
    require(name in ENGINES, "rollout.engine", name, f"must be one of {', '.join(map(repr, ENGINES))}")
    return ENGINES[name]


def check_engine(cfg: Any) -> None:
    """rollout.engine and every engine's own keys (whatever the engine: a value is checked where it is set), then
    what the chosen engine needs of the rest of the config; before any model loads, one line naming the key."""
    kind = engine_kind(cfg.rollout.engine)
    for name, cls in ENGINES.items():
        if cls.settings_type is not None:
            getattr(cfg.rollout, name).check(f"rollout.{name}")
    kind.check(cfg)


def build_engine(cfg: Any, model, tokenizer, device, prompts: Sequence[str] = ()) -> RolloutEngine:
    """The engine `cfg.rollout.engine` names, holding `model`'s current weights, for a run whose every prompt is among
    `prompts` (an engine sized by them, vLLM's, takes its context from the longest)."""
    return engine_kind(cfg.rollout.engine).build(model, tokenizer, cfg, device, prompts)


__all__ = ["ENGINES", "EngineSettings", "HFEngine", "RolloutEngine", "SamplingSettings",
           "VLLMEngine", "build_engine", "check_engine", "engine_kind"]
