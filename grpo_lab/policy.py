"""Policies: the built-in tiny model (built and warm-started locally, cached) or any local
transformers causal LM; device and dtype choice; the frozen reference copy."""

from __future__ import annotations

import contextlib
import copy
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
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging as hf_logging

from grpo_lab.model_files import check_model_files, resolve_model_path
from grpo_lab.progress import iterate
from grpo_lab.tasks.arithmetic import LEVELS, held_out_only, sample_problem
from grpo_lab.tokenizer import CharTokenizer

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


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype the weights are stored in. "auto" keeps fp32 weights everywhere: on CUDA the passes
    run in bf16 under autocast (see `amp`), while Adam's small steps still land on fp32 weights
    (stored in bf16 they would mostly round away). An explicit dtype stores the weights in it."""
    allowed = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in allowed:
        raise ValueError(f"model.dtype={dtype!r} is not supported. Must be one of {', '.join(map(repr, allowed))}.")
    return allowed[dtype]


def amp(dtype: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the model's passes run in: bf16 autocast for "auto" on a CUDA device with bf16,
    nothing otherwise (CPU runs stay in exact fp32)."""
    if dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


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


def load_policy(name: str, path: str | None, device: str = "auto", dtype: str = "auto", spec: TinySpec = TinySpec(),
                gguf_file: str | None = None):
    """Returns (model, tokenizer) on the chosen device. name: "tiny" or "hf" (a local folder or pkg:NAME,
    see model_files; with gguf_file, that GGUF file in it, dequantized by transformers)."""
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    hf_logging.disable_progress_bar()  # one bar per shard per job floods sweep logs
    if name == "tiny":
        folder = build_tiny(spec)
        tokenizer = CharTokenizer.from_pretrained(folder)
    elif name == "hf":
        check_model_files(path, gguf_file)
        folder = resolve_model_path(path, gguf_file)
        if gguf_file is None and _tokenizer_class(folder) == CharTokenizer.__name__:
            tokenizer = CharTokenizer.from_pretrained(folder)  # a model folder written by grpo-lab itself
        else:
            tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left", gguf_file=gguf_file)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        raise ValueError(f"model.name={name!r} is not supported. Must be one of 'tiny', 'hf'.")
    # Eager attention: at a few dozen tokens it beats SDPA's dispatch overhead on CPU.
    attn = "eager" if dev.type == "cpu" else "sdpa"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dt, attn_implementation=attn,
                                                 gguf_file=gguf_file if name == "hf" else None).to(dev)
    if gguf_file is not None:
        _drop_gguf_quantizer(model, gguf_file)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _drop_gguf_quantizer(model, gguf_file: str) -> None:
    """transformers dequantizes GGUF weights into plain floats on this path, yet keeps its GGUF quantizer
    attached, which refuses save_pretrained (so every checkpoint). The weights are an ordinary model's:
    detach the quantizer so they train and save as one."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if not all(p.is_floating_point() for p in model.parameters()):
        raise ValueError(f"model.gguf_file={gguf_file!r}: transformers kept quantized GGUF blocks; grpo-lab trains "
                         "dequantized weights only")
    quantizer.remove_quantization_config(model)


def _tokenizer_class(folder: Path) -> str | None:
    config = folder / "tokenizer_config.json"
    return json.loads(config.read_text()).get("tokenizer_class") if config.exists() else None


def frozen_copy(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The reference policy for the KL term: a copy that never trains, stored in `dtype` if given."""
    ref = copy.deepcopy(model).eval()
    if dtype is not None:  # parameters only: buffers such as the rotary inv_freq stay fp32 (bf16 would shift
        for p in ref.parameters():  # the angles of distant positions)
            p.data = p.data.to(dtype)
    ref.requires_grad_(False)
    return ref


def eos_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a completion (the tokenizer's, plus the generation config's)."""
    ids = {tokenizer.eos_token_id}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    ids.update(extra if isinstance(extra, list) else [extra])
    return sorted(i for i in ids if i is not None)
