"""The built-in model: a 4-layer, 128-wide character-level Llama, warm-started on arithmetic by a short
supervised recipe. Its weights ship inside the package (`tiny_weights/` beside this file), so nothing is
built on first use; this module is the recipe that made them, and `build_tiny` makes them again
(`python -m experiments.build_tiny --out DIR` also measures the result against the shipped model)."""

from __future__ import annotations

import json
import logging
import math
import platform
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpo_lab.model.tokenizer import CharTokenizer
from grpo_lab.progress import iterate
from grpo_lab.tasks.arithmetic import LEVELS, held_out_only, sample_problem

log = logging.getLogger(__name__)
RECIPE_VERSION = 2  # bump when the recipe changes (the shipped weights' recipe.json records the one that made them)
WEIGHTS = Path(__file__).resolve().parent / "tiny_weights"  # package data (pyproject.toml)
RECIPE_FILE = "recipe.json"  # how a folder's weights were made, and how they measured


@dataclass(frozen=True)
class TinySpec:
    """The built-in model and its supervised warm-start. Sizes are small enough to train on 2 CPU cores."""

    hidden_size: int = 128
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 64  # prompt + answer of the arithmetic task stay well under this
    warm_steps: int = 3000
    warm_batch: int = 128
    warm_lr: float = 3e-3
    warm_seed: int = 0
    # Share of warm-start problems per level. The middle levels get most, so the model masters them.
    warm_mix: tuple[float, ...] = (2.0, 2.0, 6.0, 1.0)
    # The first `clean_steps` steps give every answer of levels 1-3 right: the model learns to add
    # before it learns to slip. Without this phase, whether level 3 was learned at all by the end
    # depended on the seed (held-out accuracy 0.16 or 0.54 from one recipe): a phase transition.
    clean_steps: int = 2000
    # After it, the share of answers that are right, per level; the rest are near misses (off by a
    # few units, as carry slips are). A model that can add and fits this mixture samples right with
    # about these probabilities: calibrated, partly competent by level, with a correct mode for RL
    # to sharpen. Level 4 (3+3 digits) is never learned: its answers are wrong in any phase.
    warm_label_accuracy: tuple[float, ...] = (1.0, 0.7, 0.5, 0.1)


def tiny_weights() -> Path:
    """The folder of the shipped built-in model (config, safetensors, tokenizer files)."""
    if not (WEIGHTS / "model.safetensors").is_file():
        raise FileNotFoundError(f"the built-in model's weights are missing from the package ({WEIGHTS}): reinstall "
                                "grpo-lab, or rebuild them with python -m experiments.build_tiny --out DIR and run "
                                "with model=local model.path=DIR")
    return WEIGHTS


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


def _label_accuracy(spec: TinySpec, step: int) -> tuple[float, ...]:
    if step < spec.clean_steps:
        return tuple(1.0 if level < max(LEVELS) else acc for level, acc in zip(LEVELS, spec.warm_label_accuracy))
    return spec.warm_label_accuracy


def _warm_batch(tokenizer: CharTokenizer, rng: random.Random, size: int, spec: TinySpec,
                label_accuracy: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded prompt+answer+eos sequences (size, T) and labels (size, T) that score only the answer."""
    rows, labels = [], []
    levels = list(LEVELS)
    for _ in range(size):
        level = rng.choices(levels, weights=spec.warm_mix)[0]
        p = sample_problem(rng, level)
        while held_out_only(p.prompt_id):
            p = sample_problem(rng, level)
        target = int(p.answer)
        if rng.random() >= label_accuracy[levels.index(level)]:
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
    for step in iterate(range(spec.warm_steps), spec.warm_steps, "warm-start steps"):
        ids, lab = _warm_batch(tokenizer, rng, spec.warm_batch, spec, _label_accuracy(spec, step))
        loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    model.eval()


def build_tiny(out: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Build the built-in model from its recipe into `out` (a new folder, written whole or not at all), with
    its recipe.json. The caller's random streams are left where they were; torch's thread count is the
    caller's (the result does not depend on it on the machines measured: docs in experiments/build_tiny.py)."""
    out = Path(out)
    if out.exists():
        raise FileExistsError(f"--out {out}: already exists (the build writes a new folder)")
    out.parent.mkdir(parents=True, exist_ok=True)
    log.info("building the built-in model into %s (%d warm-start steps, %d torch threads)", out, spec.warm_steps,
             torch.get_num_threads())
    start = time.monotonic()
    tokenizer = CharTokenizer()
    with torch.random.fork_rng():  # building must not move the caller's random stream
        torch.manual_seed(spec.warm_seed)
        model = LlamaForCausalLM(tiny_config(spec, tokenizer))
        warm_start(model, tokenizer, spec)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.building-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {"recipe_version": RECIPE_VERSION, "spec": asdict(spec), "levels": LEVELS,
                  "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
                  "build_s": round(time.monotonic() - start, 1)}
        (tmp / RECIPE_FILE).write_text(json.dumps(record, indent=1) + "\n")
        tmp.rename(out)  # atomic: a reader never sees half a folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
