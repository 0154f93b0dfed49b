"""Rollout engines (`rollout.engine`): what draws a step's samples and a checkpoint's evaluation.

Each engine owns its rules (grpo_lab/rollout/engine.py: `name`, `settings_type`, `check`, `draw`, `sync`) and is
registered here, once. The config's `rollout` block is made from the registry: the keys every engine reads, then
one block of keys per engine that has its own (`rollout.vllm.*`). Members: `hf` (grpo-lab's own decode loop) and
`vllm` (a colocated vLLM engine; vLLM itself is imported only when it is chosen: it needs the `vllm` extra).
"""

from __future__ import annotations

from dataclasses import field, make_dataclass
from typing import Any

from grpo_lab.errors import require
from grpo_lab.rollout.engine import EngineSettings, RolloutEngine, SamplingSettings
from grpo_lab.rollout.hf_engine import HFEngine
from grpo_lab.rollout.vllm_engine import VLLMEngine

ENGINES: dict[str, type[RolloutEngine]] = {cls.name: cls for cls in (HFEngine, VLLMEngine)}


def rollout_config_type(engines: dict[str, type[RolloutEngine]]) -> type:
    """The `rollout` block's dataclass for a registry of engines: the keys every engine reads, then each engine's own
    block under its name. The shared keys' types are written as config.py's are (annotations, read by Hydra)."""
    help_engine = (f"which engine draws every sample: {' | '.join(engines)} (grpo_lab/rollout/<name>_engine.py); "
                   "samples, budgets and tables are the same with any")
    made = make_dataclass("RolloutConfig", [
        ("engine", "str", field(default="hf", metadata={"help": help_engine})),
        ("temperature", "float", field(default=1.0, metadata={
            "help": "sampling temperature of training rollouts (0: greedy, every group tied)"})),
        ("max_new_tokens", "int", field(default=6, metadata={
            "help": "tokens a completion may have (arithmetic answers are <= 4 digits + the end token)"})),
        ("max_rows_per_call", "int | None", field(default=None, metadata={
            "help": "rows (prompts x samples) per generation call, here and in eval; None: all"})),
        ("stop", "list[str]", field(default_factory=list, metadata={
            "help": "strings that end a completion (cut before them, as vLLM)"})),
        *((name, cls.settings_type, field(default_factory=cls.settings_type))
          for name, cls in engines.items() if cls.settings_type is not None),
    ])
    made.__module__ = __name__  # pickled with the config by sweep launchers: found here by name
    made.__doc__ = ("The `rollout` block: the keys every engine reads, then each engine's own keys under its name "
                    "(grpo_lab/rollout/<name>_engine.py)")
    return made


RolloutConfig = rollout_config_type(ENGINES)


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


def build_engine(cfg: Any, model, tokenizer, device) -> RolloutEngine:
    """The engine `cfg.rollout.engine` names, holding `model`'s current weights."""
    return engine_kind(cfg.rollout.engine)(model, tokenizer, cfg, device)


__all__ = ["ENGINES", "EngineSettings", "HFEngine", "RolloutConfig", "RolloutEngine", "SamplingSettings",
           "VLLMEngine", "build_engine", "check_engine", "engine_kind", "rollout_config_type"]
