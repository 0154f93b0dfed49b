"""`model.length_buckets` against one pass: the update (reference pass, policy forward, backward, optimizer step) on
real batches, side by side in one process, in wall and CPU time.

    python benchmarks/length_buckets.py [--model tiny|smollm2] [--style short|two-shot] [--steps 6] [--rounds 4]
                                        [--threads 1] [--model-path DIR]

The batches are real: `--steps` steps of benchmarks/vs_trl.py's configs (tiny: 16 prompts x 8, at most 6 new tokens;
smollm2: 2 prompts x 8, at most 32, either prompt style) run once, and each step's micro-batches are kept as the
trainer hands them to `update`. Each round then runs `update` on every kept step once per setting (1, 2 and 3
buckets), the settings in turn (the first round a warm-up); each setting's figure is the round's total, and its
speed-up against one pass is taken round by round, median (min-max). Padding: the share of the completion positions
the passes compute that are past a row's last token in the loss, at each setting.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpo_lab.model.buckets import cut, needed_widths
from grpo_lab.run.record import RunRecord
from grpo_lab.train import learn as learn_module
from grpo_lab.train.trainer import Trainer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from protocol import Load, machine, spread  # noqa: E402 - benchmarks/ is a folder of scripts, not a package

SETTINGS = (1, 2, 3)


def config(args, out_dir: str):
    if args.model == "tiny":
        from vs_trl import our_config
        return our_config(out_dir, seed=0)
    from vs_trl_smollm2 import our_config
    return our_config(out_dir, args.model_path, fast_math=False, style=args.style)


def kept_steps(trainer: Trainer, steps: int) -> list[tuple]:
    """The arguments `update` got at each of `steps` real steps (after one step not kept)."""
    kept, original = [], learn_module.update

    def keep(model, ref, optimizer, micro, rows, cfg, par=None, pad_id=0, probe=False):
        kept.append((micro, rows, par, pad_id))
        return original(model, ref, optimizer, micro, rows, cfg, par, pad_id, probe)

    learn_module.update = keep
    try:
        for _ in range(steps + 1):
            trainer.step()
    finally:
        learn_module.update = original
    return kept[1:]


def padding(kept: list[tuple], buckets: int) -> float:
    """The share of the computed completion positions that are padding, with `buckets` buckets (one pass: every
    row to the batch's longest)."""
    computed = real = 0
    for micro, *_ in kept:
        for mb in micro:
            widths = needed_widths(mb.rollout.completion_mask).numpy()
            parts = cut(widths, buckets) if buckets > 1 else []
            computed += (sum(len(p) * int(widths[p].max()) for p in parts) if len(parts) > 1
                         else len(widths) * int(widths.max()))
            real += int(mb.rollout.completion_mask.sum())
    return 1 - real / computed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["tiny", "smollm2"], default="tiny")
    p.add_argument("--style", choices=["short", "two-shot"], default="two-shot", help="smollm2's prompt style")
    p.add_argument("--model-path", help="smollm2: a save_pretrained folder of it (else the wheel's GGUF)")
    p.add_argument("--steps", type=int, default=6, help="real steps whose batches are timed")
    p.add_argument("--rounds", type=int, default=4, help="timed rounds after one warm-up round")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(machine(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(args, tmp)
        trainer = Trainer(cfg, RunRecord(Path(tmp), cfg.seed))
        kept = kept_steps(trainer, args.steps)
        state = copy.deepcopy(trainer.model.state_dict()), copy.deepcopy(trainer.optimizer.state_dict())
        rows = sum(int(mb.rollout.completion_ids.shape[0]) for micro, *_ in kept for mb in micro)
        print(f"{args.model}{'' if args.model == 'tiny' else ' ' + args.style}: {len(kept)} real steps, {rows} "
              f"completions; padding share of the computed completion positions: "
              + ", ".join(f"{k} bucket(s) {padding(kept, k):.0%}" for k in SETTINGS))
        wall: dict[int, list[float]] = {k: [] for k in SETTINGS}
        cpu: dict[int, list[float]] = {k: [] for k in SETTINGS}
        with Load() as load:
            for r in range(args.rounds + 1):
                for k in SETTINGS:
                    trainer.model.load_state_dict(state[0])  # every setting updates from the same weights
                    trainer.optimizer.load_state_dict(state[1])
                    run = copy.deepcopy(cfg)
                    run.model.length_buckets = k
                    w, c = time.perf_counter(), time.process_time()
                    with trainer.amp():
                        for micro, rows_, par, pad_id in kept:
                            learn_module.update(trainer.model, trainer.ref, trainer.optimizer, micro, rows_, run,
                                                par, pad_id)
                    if r:
                        wall[k].append(time.perf_counter() - w)
                        cpu[k].append(time.process_time() - c)
                load.look()
        print(f"update of the {len(kept)} steps, seconds a round (median over {args.rounds} rounds), and speed-up "
              f"against one pass (paired rounds, median (min-max)), wall | CPU:")
        for k in SETTINGS:
            wall_up = [a / b for a, b in zip(wall[1], wall[k])]
            cpu_up = [a / b for a, b in zip(cpu[1], cpu[k])]
            print(f"  length_buckets={k}: {statistics.median(wall[k]):.3f} s wall, {statistics.median(cpu[k]):.3f} s "
                  f"CPU; speed-up {spread(wall_up)} wall | {spread(cpu_up)} CPU")
        print(load)


if __name__ == "__main__":
    main()
