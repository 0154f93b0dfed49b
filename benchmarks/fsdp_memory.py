"""Per-rank memory and step time under dist.strategy=ddp and fsdp, 2 ranks (torchrun, gloo, one thread each), the
real Trainer on a real-shaped model: Qwen2.5-0.5B's layer shapes and 151,936-token vocabulary (hidden 896,
14 heads / 2 KV heads, MLP 4864, tied embedding) with 4 of its 24 layers, random weights, a BPE tokenizer built
here (fixtures/models.py; nothing downloaded): 196 M parameters, 747 MiB in fp32.

Bytes are exact: the storages of this rank's parameters, gradients (at the optimizer step), AdamW state and
reference (DTensors: their local shard). Peak anonymous RSS (tensors, not the mmapped safetensors) is sampled
after each rollout and at each optimizer step. Both strategies run the same 2 steps of the same seed; their loss
and gradient norm are printed side by side.

    python benchmarks/fsdp_memory.py [--model-dir DIR] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
MID = dict(vocab_size=151_936, hidden_size=896, layers=4, heads=14, kv_heads=2, intermediate_size=4864)
PARTS = ("params", "grads", "optim", "ref")


def _anon_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("RssAnon:"))


def _bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (sharded: this rank's shard)."""
    from grpo_lab.model.sharding import local

    seen = {}
    for t in tensors:
        if t is not None:
            s = local(t).untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def child(model_dir: str, strategy: str, steps: int, out: str) -> None:
    """One run under torchrun: the Trainer's own steps, measured."""
    from grpo_lab import distributed
    from grpo_lab.config import TrainConfig
    from grpo_lab.run.record import RunRecord
    from grpo_lab.train.trainer import Trainer

    torch.set_num_threads(1)
    distributed.setup("gloo", 1800)
    start = _anon_mib()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = distributed.broadcast_object(tmp)
        cfg = TrainConfig(out_dir=run_dir, max_steps=steps, prompts_per_step=4, checkpoint_every=10**6)
        cfg.model.name, cfg.model.path, cfg.model.logprob_chunk = "hf", model_dir, 256
        cfg.sampler.group_size, cfg.rollout.max_new_tokens, cfg.eval.n = 4, 16, 0
        cfg.algo.mu, cfg.algo.beta, cfg.algo.lr = 1, 0.04, 1e-5
        # random weights answer nothing right: every group ties, and RL-ZVP learns from ties
        cfg.algo.advantage = "rl_zvp"
        cfg.dist.strategy = strategy
        trainer = Trainer(cfg, RunRecord(Path(run_dir), cfg.seed))
        seen = {"peak": 0.0}
        sizes = {}

        def at_step(optimizer, *_):
            params = list(trainer.model.parameters())
            sizes.update(params=_bytes(params), grads=_bytes(p.grad for p in params),
                         optim=_bytes(v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)),
                         ref=_bytes(trainer.ref.parameters()))
            seen["peak"] = max(seen["peak"], _anon_mib())

        trainer.optimizer.register_step_post_hook(at_step)
        rows = []
        for _ in range(steps):
            row = trainer.step()
            seen["peak"] = max(seen["peak"], _anon_mib())
            rows.append({k: row[k] for k in ("loss", "kl", "grad_norm", "t_rollout", "t_update")})
        trainer.scorer.close()
        trainer.tracker.close()
    mine = dict(rank=distributed.rank(), strategy=trainer.par.name, steps=rows,
                **{f"{k}_mib": v / 2**20 for k, v in sizes.items()}, peak_anon_mib=seen["peak"] - start)
    everyone = distributed.gather_objects(mine)
    if distributed.is_main():
        Path(out).write_text(json.dumps(everyone))
    distributed.teardown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", help="a folder to keep the built model in (built there if empty)")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.model_dir or Path(tmp) / "mid")
        if not (folder / "config.json").exists():
            from fixtures.models import build_chat_model

            build_chat_model(folder, **MID)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
            "PYTHONPATH", "")])}
        got = {}
        for strategy in ("ddp", "fsdp"):
            out = Path(tmp) / f"{strategy}.json"
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            __file__, "--child", str(folder), strategy, str(args.steps), str(out)],
                           cwd=ROOT, env=env, check=True)
            got[strategy] = json.loads(out.read_text())
    print(f"{'per rank, MiB (rank 0 / rank 1)':36} {'ddp':>17} {'fsdp':>17} {'fsdp/ddp':>9}")
    for key in (*(f"{p}_mib" for p in PARTS), "peak_anon_mib"):
        d, f = ([r[key] for r in got[s]] for s in ("ddp", "fsdp"))
        print(f"{key:36} {d[0]:8.1f} /{d[1]:7.1f} {f[0]:8.1f} /{f[1]:7.1f} {f[0] / d[0]:9.3f}")
    total = {s: sum(got[s][0][f"{p}_mib"] for p in PARTS) for s in got}
    print(f"{'steady state (params+grads+AdamW+ref)':36} {total['ddp']:17.1f} {total['fsdp']:17.1f} "
          f"{total['fsdp'] / total['ddp']:9.3f}")
    for i in range(args.steps):
        d, f = got["ddp"][0]["steps"][i], got["fsdp"][0]["steps"][i]
        print(f"step {i + 1}: loss {d['loss']:.7e} / {f['loss']:.7e}, grad_norm {d['grad_norm']:.6f} / "
              f"{f['grad_norm']:.6f}, rollout s {d['t_rollout']:.1f} / {f['t_rollout']:.1f} "
              f"({f['t_rollout'] / d['t_rollout']:.2f}x), update s {d['t_update']:.1f} / {f['t_update']:.1f} "
              f"({f['t_update'] / d['t_update']:.2f}x)  [ddp / fsdp]")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
