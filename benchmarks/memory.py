"""Peak memory of one training step at a real vocabulary: does it grow with the completion length?

A random-weight Qwen2-style model with Qwen2.5's 151,936-token vocabulary (hidden 64, one layer,
built here, nothing downloaded) runs one whole GRPO step (sampling, reference pass, policy pass,
backward, optimizer) on N = 32 completions of 8 and of 128 new tokens; each run is a fresh
process, and its peak resident memory (ru_maxrss) is compared. Goal: growth from 8 to 128 tokens
<= half of one fp32 (N, 128, V) tensor. The same runs with model.logprob_chunk=0 (full logits,
the path before chunking) show what it replaces, at N = 8 to spare the shared machine.

    python benchmarks/memory.py
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

V = 151_936


def build_model(folder: Path) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpo_lab.model.tokenizer import CharTokenizer

    tok = CharTokenizer()
    cfg = Qwen2Config(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=512, tie_word_embeddings=False,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)


def child(folder: str, n: int, tokens: int, chunk: int) -> None:
    """One step in this process; prints its peak RSS before and after the step, in MiB."""
    from grpo_lab.config import TrainConfig
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(out_dir=out, max_steps=1, prompts_per_step=n // 8)
        cfg.model.name, cfg.model.path, cfg.model.logprob_chunk = "hf", folder, chunk
        cfg.sampler.group_size = 8
        cfg.rollout.max_new_tokens = tokens
        cfg.eval.n = 0
        trainer = Trainer(cfg, RunRecord(Path(out), cfg.seed))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        row = trainer.step()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        tokens_run = int(row["tokens_total"])
    print(json.dumps({"before": before, "peak": after, "tokens": tokens_run}))


def measure(folder: Path, n: int, tokens: int, chunk: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), str(n), str(tokens), str(chunk)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, metavar=("FOLDER", "N", "TOKENS", "CHUNK"))
    args = parser.parse_args()
    if args.child:
        folder, n, tokens, chunk = args.child
        child(folder, int(n), int(tokens), int(chunk))
        return
    from grpo_lab.config import ModelConfig

    default_chunk = ModelConfig().logprob_chunk
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen2-random"
        build_model(folder)
        print(f"random Qwen2-style model, vocabulary {V:,}, hidden 64, one layer; one step each, fresh process\n")
        print("| logits path | N | new tokens | generated | peak RSS before step (MiB) | peak RSS after step (MiB) |")
        print("|---|---|---|---|---|---|")
        results = {}
        for chunk, n in ((default_chunk, 32), (0, 8)):
            for tokens in (8, 128):
                r = measure(folder, n, tokens, chunk)
                results[chunk, tokens] = r
                path = f"chunked ({chunk} positions)" if chunk else "full (N, T, V) logits"
                print(f"| {path} | {n} | {tokens} | {r['tokens']} | {r['before']:.0f} | {r['peak']:.0f} |")
        print()
        for chunk, n in ((default_chunk, 32), (0, 8)):
            growth = results[chunk, 128]["peak"] - results[chunk, 8]["peak"]
            tensor = n * 128 * V * 4 / 2**20  # one fp32 (N, 128, V) tensor, MiB
            print(f"{'chunked' if chunk else 'full logits'}, N={n}: peak grows {growth:.0f} MiB from 8 to 128 tokens "
                  f"= {growth / tensor:.2f} x one fp32 (N, 128, V) tensor ({tensor:.0f} MiB)"
                  + (f"; goal <= 0.5: {'met' if growth <= tensor / 2 else 'NOT met'}" if chunk else ""))


if __name__ == "__main__":
    main()
