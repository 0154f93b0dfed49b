"""Held-out evaluation: n samples per prompt, one eval-table row per sample."""

from __future__ import annotations

import dataclasses

import torch

from grpo_lab.footprint import EVAL_BATCH_ROWS  # rows of one batch, as the memory check counts
from grpo_lab.records import Problem, Task
from grpo_lab.rewards.rules import RewardWeights
from grpo_lab.rewards.scorer import Scorer, judges_for, score_all
from grpo_lab.rollout.engine import RolloutEngine, SamplingSettings
from grpo_lab.rollout.hf_engine import HFEngine

BASE_REPLIES = 4  # replies of each difficulty whose text the base evaluation keeps (eval rows' `completion`)


def evaluate(
    model,
    tokenizer,
    problems: list[Problem] | tuple[Problem, ...],
    *,
    n: int,
    temperature: float,
    max_new_tokens: int,
    end_ids: list[int],
    answer_kind: str,
    seed: int,
    run_id: str,
    step: int,
    prompts_per_batch: int = 64,
    max_rows: int | None = None,
    scorer: Scorer | None = None,
    answer_format: str = "bare",
    stop: list[str] | tuple[str, ...] = (),
    engine: RolloutEngine | None = None,
    keep_replies: int = 0,
    grader=None,
) -> list[dict]:
    """Sample n completions for each problem and score them. A generator of its own, seeded by
    (seed, step), keeps evaluation from moving the training run's random stream. max_rows: rows per
    generation call (rollout.max_rows_per_call). Every row records how it was sampled (n, temperature,
    top_p: 1, no nucleus cut; max_new_tokens), so rows of two evaluations are never taken for one.

    A batch holds at most EVAL_BATCH_ROWS rows (fewer prompts a batch at a large n): its tokens, texts and,
    without max_rows, its KV cache exist at once, as a training step's draw does. `engine`: the rollout engine
    that samples (grpo_lab/rollout/engines.py; None: the hf decode loop on `model`). `keep_replies`: the first that
    many replies of each difficulty keep their text (`completion`; the others' is null). `grader`: a graded task's
    check (Task.grader)."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed * 1_000_003 + step)
    setting = dict(n=n, temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens)
    sampling = SamplingSettings(max_new_tokens, temperature, tuple(end_ids), tuple(stop), max_rows)
    engine = engine if engine is not None else HFEngine(model, tokenizer)
    prompts_per_batch = max(1, min(prompts_per_batch, EVAL_BATCH_ROWS // n))  # the same batches at n <= 1024
    rows = []
    kept: dict[str, int] = {}  # replies kept so far, per difficulty
    was_training = model.training
    model.eval()
    for start in range(0, len(problems), prompts_per_batch):
        batch = problems[start:start + prompts_per_batch]
        ro = engine.sample([p.prompt for p in batch], n, sampling, generator=generator)
        lengths = ro.lengths.tolist()
        golds = [p.answer for p in batch for _ in range(n)]
        scored = score_all(ro.texts, (~ro.truncated).tolist(), golds, answer_kind, RewardWeights(), scorer,
                           answer_format=answer_format, judges=judges_for(batch, n, answer_kind, grader))
        for k, s in enumerate(scored):
            p = batch[k // n]
            keep = kept.get(p.difficulty, 0) < keep_replies
            kept[p.difficulty] = kept.get(p.difficulty, 0) + keep
            rows.append(dict(run_id=run_id, step=step, prompt_id=p.prompt_id, difficulty=p.difficulty,
                             sample=k % n, answer=s.answer, answered=s.answer is not None, correct=s.correct,
                             tokens=lengths[k], **setting, completion=ro.texts[k] if keep else None,
                             prompt=p.prompt if keep else None, gold=p.answer if keep else None))
    model.train(was_training)
    return rows


def pass_rate_bin(p: float, bins: int = 5) -> str:
    """Label of p's bin among `bins` equal bins of [0, 1]: "p0.0-0.2", ..., "p0.8-1.0"."""
    k = min(int(p * bins), bins - 1)
    return f"p{k / bins:.1f}-{(k + 1) / bins:.1f}"


def label_by_pass_rate(task: Task, model, tokenizer, *, n: int, temperature: float, max_new_tokens: int,
                       end_ids: list[int], seed: int, max_rows: int | None = None,
                       stop: list[str] | tuple[str, ...] = ()) -> Task:
    """The task with every problem's difficulty replaced by a bin of `model`'s measured pass rate
    (n samples each; seeded, so training and later evaluations agree on the labels)."""
    rows = evaluate(model, tokenizer, task.train + task.held_out, n=n, temperature=temperature,
                    max_new_tokens=max_new_tokens, end_ids=end_ids, answer_kind=task.answer_kind, seed=seed,
                    run_id="", step=0, max_rows=max_rows, answer_format=task.answer_format, stop=stop)
    right: dict[str, int] = {}
    for r in rows:
        right[r["prompt_id"]] = right.get(r["prompt_id"], 0) + int(r["correct"])
    label = {pid: pass_rate_bin(c / n) for pid, c in right.items()}  # one division: exact bin edges

    def relabel(problems):
        return tuple(dataclasses.replace(p, difficulty=label[p.prompt_id]) for p in problems)

    return dataclasses.replace(task, train=relabel(task.train), held_out=relabel(task.held_out),
                               difficulty_labels={})  # the bins name themselves


def accuracy_by_difficulty(rows: list[dict]) -> dict[str, float]:
    """Mean sampled accuracy per difficulty label of a list of eval rows."""
    totals: dict[str, list[int]] = {}
    for r in rows:
        t = totals.setdefault(r["difficulty"], [0, 0])
        t[0] += r["correct"]
        t[1] += 1
    return {d: c / n for d, (c, n) in sorted(totals.items())}






