"""What an engine that samples outside the policy module needs (vLLM's; an SGLang engine's would): the policy's
weights to push after an update (`full_weights`), a seed for each request drawn from the run's generator
(`request_seeds`), and its drawn rows made into a Rollout by the hf loop's rules (`rollout_from_rows`: stop strings
found on the decoded tokens by `stop_marks`, then generate.assemble's ends, counts and texts)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from grpo_lab.records import Rollout
from grpo_lab.rollout.engine import SamplingSettings
from grpo_lab.rollout.generate import assemble, completes_stop

SEED_RANGE = 2**40  # request seeds are drawn below this: far from any engine's integer limits, and rarely equal


def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under their checkpoint names, one tensor at a time: a LoRA layer's as its base weight
    plus its active adapters' delta (made for the push, never kept) and its base layer's other parameters as they are
    (Qwen2's q/k/v biases: an engine started with placeholder weights would otherwise keep its own), an FSDP shard as
    the full tensor."""
    skip: set[str] = set()
    seen: set[int] = set()  # a tied weight is sent once, under its first name (an engine ties the rest itself)
    for name, module in model.named_modules():
        if any(name == s or name.startswith(f"{s}.") for s in skip):
            continue
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):  # a peft LoRA layer
            skip.add(name)
            weight = _full(module.base_layer.weight)
            if not getattr(module, "disable_adapters", False) and not getattr(module, "merged", False):
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        weight = weight + module.get_delta_weight(adapter)
            yield f"{name}.weight", weight.detach()
            for pname, p in module.base_layer.named_parameters(recurse=False):
                if pname != "weight" and id(p) not in seen:
                    seen.add(id(p))
                    yield f"{name}.{pname}", _full(p).detach()
            continue
        for pname, p in module.named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                yield (f"{name}.{pname}" if name else pname), _full(p).detach()


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def request_seeds(generator: torch.Generator, count: int) -> list[int]:
    """One seed for each of `count` requests, from the run's generator: a run and its resume (the generator is in
    every checkpoint) seed an engine's requests alike."""
    return torch.randint(0, SEED_RANGE, (count,), generator=generator, device=generator.device).tolist()


def stop_marks(tokenizer, ids: torch.Tensor, stop: Sequence[str]) -> torch.Tensor:
    """(N, T) bool: the token at which a row's first stop string completes, by the hf loop's own test (the decoded
    tail of the tokens so far). Only rows whose whole text holds a stop string are scanned."""
    marks = torch.zeros(ids.shape, dtype=torch.bool)
    if not stop:
        return marks
    texts = tokenizer.batch_decode(ids.tolist(), skip_special_tokens=True)
    live = torch.tensor([i for i, text in enumerate(texts) if any(s in text for s in stop)], dtype=torch.long)
    for t in range(ids.shape[1]):
        if not len(live):
            break
        hit = completes_stop(tokenizer, ids[live, : t + 1], stop)
        marks[live[hit], t] = True
        live = live[~hit]
    return marks


def rollout_from_rows(tokenizer, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      rows: list[tuple[Sequence[int], Sequence[float]]], group_size: int,
                      sampling: SamplingSettings, device: torch.device) -> Rollout:
    """A Rollout from an engine's samples, group-major (sample j of prompt i is row i*G + j), each its drawn token
    ids and their log-probs: padded to the longest, stop strings found by `stop_marks` (an engine that stops at end
    tokens only may run past one), then ended, counted and decoded by generate.assemble, as the hf loop's."""
    width = max(len(tokens) for tokens, _ in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)  # (N, T)
    logps = torch.zeros(len(rows), width)  # (N, T)
    for i, (tokens, logp) in enumerate(rows):
        ids[i, : len(tokens)] = torch.tensor(list(tokens), dtype=torch.long)
        logps[i, : len(tokens)] = torch.tensor(list(logp), dtype=logps.dtype)
    stopped = stop_marks(tokenizer, ids, sampling.stop)
    return assemble(prompt_ids.to(device), prompt_mask.to(device), ids.to(device), logps.to(device),
                    stopped.to(device), group_size, tokenizer=tokenizer,
                    ends=torch.tensor(list(sampling.end_ids), device=device), stop=tuple(sampling.stop))
