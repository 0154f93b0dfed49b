"""Standalone evaluation of a run directory: the base model and saved checkpoints, written as eval parts."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grpo_lab.model.load import amp
from grpo_lab.model.lora import add_adapters
from grpo_lab.rollout.evaluation import evaluate
from grpo_lab.run.checkpoints import checkpoint_dir, checkpoint_steps, checkpoint_totals, load_weights
from grpo_lab.run.guards import RunLock
from grpo_lab.run.loading import load_task_and_policy
from grpo_lab.run.tables import write_part


def evaluate_checkpoints(cfg, run_dir: Path, *, n: int, temperature: float, steps: list[int] | None = None,
                         on_start: Callable[[Path], None] | None = None) -> list[int]:
    """Standalone evaluation of a run: the base model (step 0) and saved checkpoints, n samples per
    held-out prompt each, written as eval parts (replacing those steps' parts). cfg: the run's
    TrainConfig. `on_start(run_dir)` runs once the lock is held, before anything is written.
    Returns the steps evaluated."""
    run_dir = Path(run_dir)
    meta = run_dir / "run.json"
    if not meta.exists():
        raise FileNotFoundError(f"run_dir: {run_dir} has no run.json; is it a grpo-lab run directory?")
    run_id = json.loads(meta.read_text())["run_id"]
    available = [0] + checkpoint_steps(run_dir, resumable=False)  # weights-only checkpoints evaluate too
    wanted = available if steps is None else sorted(set(steps))  # ascending: step 0 before any checkpoint loads
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise ValueError(f"steps: no checkpoint for step {missing[0]} in {run_dir} (have {available})")
    with RunLock(run_dir):  # one writer: never beside a training process on the same directory
        if on_start is not None:
            on_start(run_dir)
        task, model, tokenizer, end_ids = load_task_and_policy(cfg)  # pass-rate labels as training measured them
        model, peft = add_adapters(model, cfg.model.lora)  # LoRA: each checkpoint's adapters go onto the base
        with amp(cfg.model.dtype, next(model.parameters()).device):
            for step in wanted:
                if step:
                    load_weights(checkpoint_dir(run_dir, step), model if peft is None else peft)
                rows = evaluate(model, tokenizer, task.held_out, n=n, temperature=temperature,
                                max_new_tokens=cfg.rollout.max_new_tokens, end_ids=end_ids,
                                answer_kind=task.answer_kind, seed=cfg.seed, run_id=run_id, step=step,
                                max_rows=cfg.rollout.max_rows_per_call, answer_format=task.answer_format,
                                stop=cfg.rollout.stop)
                drawn = 0 if step == 0 else _samples_drawn(checkpoint_dir(run_dir, step))
                for row in rows:
                    row["samples_total"] = drawn
                write_part(run_dir, "eval", step, rows)
    return wanted


def _samples_drawn(checkpoint: Path) -> int | None:
    """Samples the run had drawn at a checkpoint (counters.json, kept when a pruned checkpoint loses its
    state.pt; else state.pt's counters); None when not recorded."""
    return checkpoint_totals(checkpoint).get("samples_total")
