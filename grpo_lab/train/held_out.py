"""The rows of the trainer's held-out evaluation: sampled from the policy as it is now, every rank a share of the
prompts, or, where the policy took no optimizer step since the last evaluation (a step that skipped its update:
algo.tied_batch=skip, a sampler that trained nothing), that evaluation's rows again: the weights it measured are
these, so sampling them again (a minute a job on a large model) would measure nothing new. The decision is read
from the tables (`same_model_rows`), so a resumed run makes it as the run it continues did."""

from __future__ import annotations

import logging

from grpo_lab import distributed
from grpo_lab.rollout.evaluation import BASE_REPLIES, evaluate
from grpo_lab.run.evaluations import same_model_rows

log = logging.getLogger(__name__)


def held_out_rows(trainer, step: int) -> tuple[list[dict], int | None]:
    """(the eval rows of `step`, in the held-out pool's order; the step whose rows they are again, None where they
    were sampled now) for a Trainer whose policy is the model at `step` (0: the base model). Every rank takes the
    same branch (a collective either way); rows read from the tables are rank 0's alone, which writes them."""
    cfg, updates = trainer.cfg, trainer.counters["updates"]
    same = same_model_rows(trainer.run_dir, cfg, step, updates) if distributed.is_main() else None
    at = distributed.broadcast_object(same[0] if same else None)  # one decision on every rank
    if at is not None:
        log.info("eval at step %d: no optimizer step since the evaluation at step %d (%d updates), so the model is "
                 "the one measured there: its rows recorded again, not sampled", step, at, updates)
        return (same[1] if same else []), at
    task = trainer.task
    mine = task.held_out[distributed.rank()::distributed.world()]  # each rank a share of the prompts
    with trainer.amp(), trainer.par.rollout(trainer.model):
        rows = evaluate(trainer.model, trainer.tokenizer, mine, n=cfg.eval.n, keep_replies=BASE_REPLIES if step == 0
                        else 0, temperature=cfg.eval.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                        end_ids=trainer.end_ids, answer_kind=task.answer_kind, seed=distributed.rank_seed(cfg.seed),
                        run_id=trainer.record.run_id, step=step, max_rows=cfg.rollout.max_rows_per_call,
                        scorer=trainer.scorer, answer_format=task.answer_format, stop=cfg.rollout.stop,
                        engine=trainer.engine, grader=task.grader)
    order = {p.prompt_id: i for i, p in enumerate(task.held_out)}
    return sorted((r for part in distributed.gather_objects(rows) for r in part),
                  key=lambda r: order[r["prompt_id"]]), None  # stable: each prompt's samples stay in order
