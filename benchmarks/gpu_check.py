"""The GPU path: a few GRPO steps of the built-in model and of a 0.5B-parameter-class model
(Qwen2.5-0.5B's shape, random weights, bf16; nothing downloaded) on CUDA, printing samples/s
and peak GPU memory. Without CUDA it says so and exits 0.

    python benchmarks/gpu_check.py [--steps 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_lab.config import TrainConfig
from grpo_lab.policy import tiny_config, TinySpec
from grpo_lab.tokenizer import CharTokenizer
from grpo_lab.trainer import RunRecord, Trainer


def half_b_folder(root: Path) -> Path:
    """A Qwen2.5-0.5B-shaped Llama (494M parameters with its 151,936-token vocabulary), random
    weights, saved with the character tokenizer so the trainer loads it like any local model."""
    from transformers import LlamaForCausalLM

    tok = CharTokenizer()
    cfg = tiny_config(TinySpec(), tok)
    cfg.update(dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096))
    folder = root / "half-b"
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    print(f"0.5B-class model: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def measure(name: str, cfg: TrainConfig, steps: int) -> None:
    torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    trainer.step()  # warm-up: allocator, kernels
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    samples = sum(trainer.step()["samples"] for _ in range(steps))
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"{name}: {samples / dt:8.1f} samples/s over {steps} steps, peak GPU memory {peak:.2f} GiB "
          f"({cfg.prompts_per_step} prompts x {cfg.sampler.group_size}, <= {cfg.rollout.max_new_tokens} new tokens, "
          f"{next(trainer.model.parameters()).dtype})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; skipped")
        return
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        tiny = TrainConfig(out_dir=f"{tmp}/tiny", max_steps=10**6, checkpoint_every=10**6)
        tiny.eval.n = 0
        measure("built-in tiny model", tiny, args.steps)
        big = TrainConfig(out_dir=f"{tmp}/half-b", max_steps=10**6, checkpoint_every=10**6)
        big.model.name, big.model.path = "hf", str(half_b_folder(Path(tmp)))
        big.rollout.max_new_tokens = 64
        big.eval.n = 0
        measure("0.5B-class model", big, args.steps)


if __name__ == "__main__":
    sys.exit(main())
