"""The built-in model: a 4-layer, 128-wide character-level Llama, warm-started on arithmetic by a short
supervised recipe, built once and cached."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_lab.model.tokenizer import CharTokenizer
from grpo_lab.progress import iterate
from grpo_lab.tasks.arithmetic import LEVELS, held_out_only, sample_problem

log = logging.getLogger(__name__)
WARM_START_VERSION = 1  # bump when the warm-start recipe changes, so stale caches are not reused


@dataclass(frozen=True)
class TinySpec:
    """The built-in model and its supervised warm-start. Sizes are small enough to train on 2 CPU cores."""

    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 64  # prompt + answer of the arithmetic task stay well under this
    warm_steps: int = 3000  # about 4 minutes on 2 cores, once; the result is cached
    warm_batch: int = 128
    warm_lr: float = 3e-3
    warm_seed: int = 0
    # Share of warm-start problems per level. The middle level gets most, so the model ends
    # partly competent there: all-correct ties on easy levels, mixed groups in the middle,
    # all-wrong ties on the hardest.
    warm_mix: tuple[float, ...] = (2.0, 2.0, 6.0, 1.0)
    # Share of warm-start answers that are right, per level; the rest are near misses (off by a
    # few units, as carry slips are). Fitting that mixture leaves the model partly competent by
    # level, *calibrated* rather than only at the edge of a phase transition (level 3 still
    # sits near one: 0.16 here), and gives RL a correct mode to sharpen.
    warm_label_accuracy: tuple[float, ...] = (1.0, 0.7, 0.5, 0.1)


def cache_root() -> Path:
    return Path(os.environ.get("GRPO_LAB_CACHE", Path.home() / ".cache" / "grpo_lab"))


def tiny_config(spec: TinySpec, tokenizer: CharTokenizer) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def _near_miss(answer: int, rng: random.Random) -> int:
    return max(0, answer + rng.choice([-10, -2, -1, 1, 2, 10]))


def _warm_batch(tokenizer: CharTokenizer, rng: random.Random, size: int, spec: TinySpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+answer+eos sequences and labels that score only the answer."""
    rows, labels = [], []
    levels = list(LEVELS)
    for _ in range(size):
        level = rng.choices(levels, weights=spec.warm_mix)[0]
        p = sample_problem(rng, level)
        while held_out_only(p.prompt_id):
            p = sample_problem(rng, level)
        target = int(p.answer)
        if rng.random() >= spec.warm_label_accuracy[levels.index(level)]:
            target = _near_miss(target, rng)
        prompt = tokenizer.encode(p.prompt, add_special_tokens=False)
        answer = tokenizer.encode(str(target), add_special_tokens=False) + [tokenizer.eos_token_id]
        rows.append(prompt + answer)
        labels.append([-100] * len(prompt) + answer)
    width = max(map(len, rows))
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    lab = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    return ids, lab


def warm_start(model: LlamaForCausalLM, tokenizer: CharTokenizer, spec: TinySpec) -> None:
    """A short supervised stage on training-side problems of every level (held-out ones excluded)."""
    rng = random.Random(spec.warm_seed)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.warm_lr, weight_decay=0.0)
    # Linear warm-up, then cosine decay: the low-lr tail sharpens the sampled answers.
    warm = 50
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, 0.5 * (1 + math.cos(math.pi * min(1.0, s / spec.warm_steps)))))
    model.train()
    for _ in iterate(range(spec.warm_steps), spec.warm_steps, "warm-start steps"):
        ids, lab = _warm_batch(tokenizer, rng, spec.warm_batch, spec)
        loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()


def tiny_model_dir(spec: TinySpec) -> Path:
    key = json.dumps({"spec": asdict(spec), "levels": LEVELS, "version": WARM_START_VERSION}, sort_keys=True)
    return cache_root() / f"tiny-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def build_tiny(spec: TinySpec = TinySpec()) -> Path:
    """Build and warm-start the tiny model once; later calls return the cached folder."""
    target = tiny_model_dir(spec)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One builder at a time across processes: a second one waits for the first instead of
    # spending another 4 minutes of every core on the same weights.
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        return _build_tiny(spec, target)


def _build_tiny(spec: TinySpec, target: Path) -> Path:
    log.info("building the built-in model into %s (once; about 4 minutes on 2 cores)", target)
    tokenizer = CharTokenizer()
    with torch.random.fork_rng():  # building must not move the caller's random stream
        torch.manual_seed(spec.warm_seed)
        model = LlamaForCausalLM(tiny_config(spec, tokenizer))
        warm_start(model, tokenizer, spec)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".building-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(target)  # atomic: a reader never sees half a folder
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
