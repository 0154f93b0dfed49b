"""The GPU path: a few GRPO steps of the built-in model and of a 0.5B-parameter-class model
(Qwen2.5-0.5B's shape, random weights, bf16; nothing downloaded) on CUDA, printing samples/s
and peak GPU memory; then a real-shaped configuration: that model (vocabulary
151,936) at 1,024 new tokens under bf16 autocast, with chunked log-probs, micro-batches and
gradient checkpointing, printing peak GPU memory and tokens/s. Random weights rarely emit the
end token, so every completion runs to 1,024 tokens. Last, dist.strategy=ddp and fsdp under torchrun over
every GPU here (one GPU: a mesh of one, the same FSDP2 code path): per-rank bytes and peak memory, and a
sharded checkpoint resumed exactly. Where vLLM is installed, the 0.5B-class model's steps under rollout.engine=vllm
against hf. Without CUDA it says so and exits 0.

    python benchmarks/gpu_check.py [--steps 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_lab.config import TrainConfig
from grpo_lab.model.tiny import TinySpec, tiny_config
from grpo_lab.model.tokenizer import CharTokenizer
from grpo_lab.run.record import RunRecord
from grpo_lab.train.trainer import Trainer


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


def measure(name: str, cfg: TrainConfig, steps: int) -> Trainer:
    torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
    trainer.step()  # warm-up: allocator, kernels
    torch.cuda.synchronize()
    tokens_before = trainer.counters["tokens_total"]
    t0 = time.perf_counter()
    rows = [trainer.step() for _ in range(steps)]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    samples = sum(r["samples"] for r in rows)
    tokens = trainer.counters["tokens_total"] - tokens_before
    peak = torch.cuda.max_memory_allocated() / 2**30
    rollout, upd = (sum(r[k] for r in rows) / steps for k in ("t_rollout", "t_update"))
    print(f"{name}: {samples / dt:8.1f} samples/s, {tokens / dt:8.0f} generated tokens/s over {steps} steps "
          f"(a step: rollout {rollout:.2f} s, update {upd:.2f} s), peak GPU memory {peak:.2f} GiB "
          f"({cfg.prompts_per_step} prompts x {cfg.sampler.group_size}, <= {cfg.rollout.max_new_tokens} new tokens, "
          f"{next(trainer.model.parameters()).dtype} weights, model.dtype={cfg.model.dtype})")
    return trainer


def sharded_child(folder: str, strategy: str, steps: int, out_dir: str) -> None:
    """Under torchrun, one rank per GPU: the 0.5B-class model's steps under `strategy` (fsdp: FSDP2 over nccl, bf16
    gathers, fp32 shards and gradient sums), this rank's bytes of parameters, gradients and AdamW state, then a
    checkpoint (fsdp: DCP, every rank its shards) resumed by a second Trainer whose next step must equal the first's."""
    from fsdp_memory import _bytes

    from grpo_lab import distributed

    distributed.setup("nccl", 600)
    cfg = TrainConfig(out_dir=out_dir, max_steps=10**6, checkpoint_every=10**6)
    cfg.model.name, cfg.model.path, cfg.dist.strategy = "hf", folder, strategy
    cfg.rollout.max_new_tokens, cfg.eval.n, cfg.algo.advantage = 64, 0, "rl_zvp"  # rl_zvp: ties learn too
    rank = distributed.rank()
    trainer = measure(f"{strategy}, rank {rank} of {distributed.world()}", cfg, steps)
    params = list(trainer.model.parameters())
    opt = [v for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    print(f"{strategy}, rank {rank}: parameters {_bytes(params) / 2**20:.0f} MiB, AdamW state {_bytes(opt) / 2**20:.0f}"
          f" MiB (this rank's storages)")
    trainer.checkpoint()
    resumed = Trainer(cfg, RunRecord(Path(out_dir), cfg.seed))
    a, b = trainer.step(), resumed.step()
    same = all(a[k] == b[k] or (a[k] != a[k] and b[k] != b[k]) for k in ("loss", "kl", "grad_norm"))
    print(f"{strategy}, rank {rank}: resumed step {b['step']} {'equals' if same else 'DIFFERS FROM'} the uninterrupted "
          f"one (loss {a['loss']:.6e} / {b['loss']:.6e}, grad_norm {a['grad_norm']:.6f} / {b['grad_norm']:.6f})")
    distributed.teardown()


def sharded(folder: Path, steps: int, root: Path) -> None:
    """The fsdp path next to ddp, each under torchrun over every GPU here."""
    import os
    import subprocess

    gpus = torch.cuda.device_count()
    for strategy in ("ddp", "fsdp"):
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
                        __file__, "--sharded-child", str(folder), strategy, str(steps), str(root / strategy)],
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                                        os.environ.get("PYTHONPATH", "")])},
                       check=True)


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
        # Real shapes: V = 151,936, 1,024 new tokens, bf16 autocast over fp32 weights (model.dtype=auto);
        # 8 prompts x G = 8 a step, 2 units per backward, checkpointed layers, logits 512 positions at a time.
        real = TrainConfig(out_dir=f"{tmp}/real", max_steps=10**6, checkpoint_every=10**6, prompts_per_step=8)
        real.model.name, real.model.path = "hf", big.model.path
        real.model.gradient_checkpointing = True
        real.algo.micro_batch_groups = 2
        real.rollout.max_new_tokens = 1024
        real.eval.n = 0
        measure("0.5B-class model, 1,024 new tokens", real, max(1, args.steps // 2))
        sharded(Path(big.model.path), args.steps, Path(tmp))
        engines(big, args.steps, Path(tmp))


def engines(big: TrainConfig, steps: int, root: Path) -> None:
    """rollout.engine=vllm against hf on the 0.5B-class model, the same config side by side (benchmarks/
    vs_hf_rollout.py's comparison for a GPU session); skipped where vLLM is not installed."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        print("engines: vLLM is not installed here (pip install vllm); the engine comparison is skipped")
        return
    for engine in ("hf", "vllm"):
        cfg = dataclasses.replace(big, out_dir=str(root / f"engine-{engine}"))
        cfg.rollout = dataclasses.replace(big.rollout, engine=engine)
        trainer = measure(f"0.5B-class model, rollout.engine={engine}", cfg, steps)
        trainer.engine.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--sharded-child"]:
        sys.exit(sharded_child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]))
    sys.exit(main())
