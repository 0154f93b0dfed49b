"""The GRPO loop: prompts -> G samples each -> rewards -> advantages -> mu clipped updates with a
k3 KL to the frozen reference -> group and step tables, checkpoints, exact resume."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from grpo_lab import distributed
from grpo_lab.advantage import rule as advantage_rule
from grpo_lab.advantage.ties import reward_ties
from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.errors import InputError
from grpo_lab.jobs.loading import load_task_and_policy
from grpo_lab.model.kvcache import autocast_dtype
from grpo_lab.model.load import amp, amp_dtype, frozen_copy
from grpo_lab.model.logprobs import completion_logprobs, enable_checkpointing
from grpo_lab.model.lora import add_adapters, trainable
from grpo_lab.model.sharding import local
from grpo_lab.records import Draw, Group, Problem, Rollout
from grpo_lab.rewards.rules import RewardWeights
from grpo_lab.rewards.scorer import Scorer, score_rollout
from grpo_lab.rollout.engine import SamplingSettings
from grpo_lab.rollout.engines import build_engine
from grpo_lab.rollout.generate import split_groups
from grpo_lab.run.checkpoints import (
    checkpoint_steps,
    drop_state,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    rng_state,
    save_checkpoint,
)
from grpo_lab.run.completions import completion_rows
from grpo_lab.run.evaluations import record_own_evaluation
from grpo_lab.run.guards import RunDirUnwritable, RunLock, prepare
from grpo_lab.run.owned import remove_parts_after
from grpo_lab.run.record import RunRecord, now
from grpo_lab.run.rows import group_rows
from grpo_lab.run.signals import Killed, stop_on_signals
from grpo_lab.run.summary import run_summary
from grpo_lab.run.tables import parts, read_table, write_part
from grpo_lab.run.tracking import Tracker, build_tracker, eval_metrics, step_metrics
from grpo_lab.samplers import PromptStream, build_sampler
from grpo_lab.tasks import task_kind
from grpo_lab.train.cannot_learn import announce, base_warning, first_step_warning
from grpo_lab.train.costs import COUNTERS, flop_params, restore_counters, row_updates, step_costs
from grpo_lab.train.held_out import held_out_rows
from grpo_lab.train.learn import learn
from grpo_lab.train.objective import kl_on
from grpo_lab.train.parallel import build_parallel

log = logging.getLogger(__name__)


class SamplerExhausted(RuntimeError):
    """A sampler hit its cap: the run ends there (status done, `stopped` says why in run.json)."""


class Diverged(RuntimeError):
    """The policy's weights are no longer finite: the run fails rather than save them (run.json: failed)."""


class Trainer:
    """One GRPO job: holds the policy, reference, optimizer, sampler and RNG; `step()` runs one optimizer
    step and writes its table parts. `train(cfg)` drives it; benchmarks drive it step by step."""

    def __init__(self, cfg: TrainConfig, record: RunRecord, policy: tuple | None = None):
        self.cfg, self.record, self.run_dir = cfg, record, Path(cfg.out_dir)
        torch.manual_seed(cfg.seed)
        self.task, self.model, self.tokenizer, self.end_ids = load_task_and_policy(cfg, policy)  # policy: preloaded
        self.remedies = task_kind(cfg.task.name).remedies(cfg)  # what the task says helps a run that cannot learn
        self.device = next(self.model.parameters()).device
        record.update(device=str(self.device), difficulty_labels=self.task.difficulty_labels,
                      **({"task_source": self.task.source} if self.task.source else {}))  # task=gym: its generator
        # model.lora.rank > 0: the passes take the model with adapters injected, `peft` saves and loads them
        self.model, self.peft = add_adapters(self.model, cfg.model.lora, amp_dtype(cfg.model.dtype, self.device))
        distributed.broadcast_parameters(self.model)  # as DDP does: every rank starts from rank 0's weights
        with self.amp():  # under CUDA's autocast ("auto") the reference is stored in bf16: it only ever runs in it;
            # model.dtype=autocast_bf16 keeps it fp32, as the policy's weights (a bf16 copy: KL 1e-3 at step 0)
            stored = None if cfg.model.dtype == "autocast_bf16" else autocast_dtype(self.device)
            self.ref = None if not kl_on(cfg.algo.beta) else frozen_copy(self.model, stored) if self.peft is None \
                else self.peft  # LoRA: the same model with its adapters switched off
        if cfg.model.gradient_checkpointing:
            enable_checkpointing(self.model)
        with self.amp():
            self.par = build_parallel(cfg.dist.strategy, self.device, autocast_dtype(self.device))
        self.flop_params = flop_params(self.model)  # N of the steps table's FLOP estimate (grpo_lab/train/costs.py)
        self.model, self.ref = self.par.prepare(self.model, self.ref)  # fsdp: both sharded, each its own shards
        record.update(strategy=self.par.name, flop_params=self.flop_params)
        self.saved = self.model if self.peft is None else self.peft  # what checkpoints hold: LoRA, the adapters only
        self.model.train()
        self.optimizer = torch.optim.AdamW(trainable(self.model), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay,
                                           fused=self.device.type in ("cpu", "cuda"))
        self.generator = torch.Generator(device=self.device).manual_seed(distributed.rank_seed(cfg.seed))
        self.weights = RewardWeights(cfg.reward.accuracy, cfg.reward.format)
        r = cfg.reward
        self.scorer = Scorer(r.workers, r.answer_timeout_s, r.step_budget_s)  # closed by train()
        self.score_timeouts = 0  # this step's answers whose check ran out of time
        self.sampler = build_sampler(cfg.sampler, PromptStream(self.task.train, cfg.seed))
        self.counters = dict(COUNTERS)  # samples_total, tokens_total, updates, flops_total
        self.last_step = 0
        self.untrainable: str | None = None  # the step-0 check's warning, where stop_untrainable ends the run on it
        ckpt = distributed.broadcast_object(latest_checkpoint(self.run_dir))  # rank 0's view: one choice for all
        if ckpt is None and checkpoint_steps(self.run_dir, resumable=False):
            raise RuntimeError(f"out_dir: {self.run_dir} holds a finished run whose checkpoints keep weights only "
                               "(checkpoint.final_weights_only): it cannot resume; use a new out_dir")
        if ckpt is not None:
            self.last_step, state = load_checkpoint(ckpt, self.saved, self.optimizer, self.generator,
                                                    distributed.rank(), distributed.world())
            # rank 0 alone reads the tables (an old checkpoint's updates recounted) before cutting them; others copy
            self.counters = distributed.broadcast_object(
                restore_counters(state, self.run_dir, self.last_step, cfg.algo.mu) if distributed.is_main() else None)
            self.sampler.load_state_dict(state["ranks_sampler"][distributed.rank()] if state.get("ranks_sampler")
                                         else state["sampler"])
            log.info("resuming %s from step %d", self.run_dir, self.last_step)
        # what samples, with the policy's weights as they are now, sized for every prompt it will be given (vllm)
        prompts = [p.prompt for p in (*self.task.train, *self.task.held_out)]
        self.engine = build_engine(cfg, self.model, self.tokenizer, self.device, prompts)
        if distributed.is_main():  # rank 0 writes every table; the other ranks' rows reach it by gathers
            remove_parts_after(self.run_dir, self.last_step)  # the training's rows past it, redrawn identically
            self.tracker = build_tracker(cfg, self.run_dir, record.run_id, first_step=self.last_step + 1)
        else:
            self.tracker = Tracker([])
        distributed.barrier()  # no rank reads the tables before rank 0 has cut them back to the checkpoint

    def _write(self, table: str, step: int, rows: list[dict]) -> None:
        if distributed.is_main():
            write_part(self.run_dir, table, step, rows)

    def amp(self):
        """The context every model pass runs in: bf16 autocast on CUDA, nothing on CPU."""
        return amp(self.cfg.model.dtype, self.device)

    def evaluate(self, step: int) -> None:
        """Eval rows for the current model (step 0: the base model) on the held-out pool; where the policy took no
        optimizer step since the last evaluation, that one's rows again, not sampled (grpo_lab/train/held_out.py)."""
        cfg = self.cfg
        if cfg.eval.n and self.task.held_out:
            self.tracker.evaluating(step)  # the heartbeat names the evaluation; its time is not the steps'
            rows, same_as = held_out_rows(self, step)
            for row in rows:  # so checkpoints align by samples, tokens, updates or FLOPs, not only by step
                row.update({k: None if v != v else v for k, v in self.counters.items()})  # NaN: not known
            self._write("eval", step, rows)
            if step == 0 and (said := base_warning(rows, self.task.answer_kind, self.task.answer_format,
                                                   self.remedies)):
                self.untrainable = announce(said, cfg.stop_untrainable)  # said before the budget is spent
            if distributed.is_main():  # every evaluation that wrote rows is recorded (evaluations.jsonl)
                record_own_evaluation(self.run_dir, cfg, step, len(rows), self.record.run_id, same_as=same_as)
            self.tracker.log(eval_metrics(rows), step)

    def _draw_round(self, problems: list[Problem], rnd: int, size: int | None = None) -> list[Group]:
        """Sample and score `size` (default G) completions for each problem (one batched rollout). Across processes,
        rank r samples problems r, r+W, ... and every rank gets every group's scores (the samples
        stay where they were drawn): samplers then decide from the global round, identically on
        every rank, so all ranks run the same rounds and the same collectives."""
        cfg = self.cfg
        rank, world = distributed.rank(), distributed.world()
        owner = _owners(problems, world)
        mine = [p for p, r in zip(problems, owner) if r == rank]
        groups, timeouts = [], 0
        if mine:
            ro = self.engine.sample([p.prompt for p in mine], size or cfg.sampler.group_size,
                                    SamplingSettings.for_training(cfg, self.end_ids), generator=self.generator)
            rewards, correct, answers, timeouts = score_rollout(ro, mine, self.task.answer_kind, self.weights,
                                                                self.scorer, self.task.answer_format, self.task.grader)
            ties = reward_ties(torch.from_numpy(rewards), cfg.algo.std_eps).tolist()  # the advantages' own test
            prompts = ro.prompt_mask.sum(1).tolist()  # each prompt's tokens, prefilled once for its group
            groups = [Group(p, rnd, chunk, rewards[i], correct[i], ties[i], rank=rank,
                            tokens=int(chunk.lengths.sum()), truncated=int(chunk.truncated.sum()),
                            answered=np.not_equal(answers[i], None), answers=answers[i], prompt_tokens=int(prompts[i]))
                      for i, (p, chunk) in enumerate(zip(mine, split_groups(ro)))]
        if world == 1:
            self.score_timeouts += timeouts
            return groups
        scores = distributed.gather_objects(([(g.rewards, g.correct, g.tie, g.tokens, g.truncated, g.answered,
                                               g.prompt_tokens) for g in groups], timeouts))
        self.score_timeouts += sum(t for _, t in scores)
        out, taken = [], [0] * world
        for p, r in zip(problems, owner):  # in the problems' order: each rank's groups come in its own order
            k, taken[r] = taken[r], taken[r] + 1
            rewards, correct, tie, tokens, truncated, answered, prompt = scores[r][0][k]
            out.append(groups[k] if r == rank else Group(p, rnd, None, rewards, correct, tie, rank=r, tokens=tokens,
                                                         truncated=truncated, answered=answered, prompt_tokens=prompt))
        return out

    def _policy_logprobs(self, ro: Rollout) -> torch.Tensor:
        """(N, T) log-probs of `ro`'s completions under the policy as it is now, without a gradient."""
        with torch.inference_mode(), self.amp():
            return completion_logprobs(self.model, ro, self.cfg.rollout.temperature)

    def step(self) -> dict:
        """Draw, score and learn from one batch; write its groups and steps parts. Returns the step row."""
        cfg = self.cfg
        step = self.last_step + 1
        t0, cpu0 = time.perf_counter(), time.process_time()
        self.score_timeouts = 0
        with self.amp(), self.par.rollout(self.model):  # fsdp: the weights gathered once for the whole draw
            draw: Draw = self.sampler.draw(self._draw_round, cfg.prompts_per_step)
        t1 = time.perf_counter()
        self.engine.rest()  # the step's last draw is done (an evaluation's come before the next step's): vllm sleeps
        every = cfg.algo.kl_grad_every
        learned = learn(self.model, self.ref, self.optimizer, draw, cfg, self.tokenizer.pad_token_id, self.device,
                        self.amp(), self.par, probe=bool(every) and step % every == 0)
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are spent: not held through the next rollout
        if learned.losses["opt_steps"]:  # the weights changed: the engine samples from the new policy
            self.engine.sync(self.model)
        self.sampler.observe(step, draw, learned.trained, learned.behaviour)  # e.g. the replay buffer's offers
        self.sampler.after_update(step, draw, self._policy_logprobs)  # e.g. SPO's trackers
        t2 = time.perf_counter()

        run_id = self.record.run_id
        groups = group_rows(run_id, step, draw.groups, self.counters, learned.trained,
                            entropy=advantage_rule(cfg.algo.advantage).token_level,
                            stepped=bool(learned.losses["opt_steps"]) and learned.work["backward"])  # else: none
        drawn = [g for g in draw.groups if not g.reused]  # what this step sampled (replays were drawn before)
        cost = step_costs(self.flop_params, sum(g.prompt_tokens for g in drawn), sum(g.tokens for g in drawn),
                          learned.work, cfg.algo.beta)
        self.counters["updates"] += learned.losses["opt_steps"]
        self.counters["flops_total"] += cost["flops"]
        correct = np.concatenate([g.correct for g in drawn]) if drawn else np.zeros(0, bool)
        rewards = np.concatenate([g.rewards for g in drawn]) if drawn else np.zeros(0)
        fresh = [r for r in groups if not r["reused"]]
        row = dict(run_id=run_id, step=step, **learned.losses, lr=cfg.algo.lr, reward_mean=_mean(rewards),
                   accuracy=_mean(correct), tie_frac=_mean([g.tie for g in drawn]), groups=len(fresh),
                   samples=int(correct.size), **self.counters, skipped_prompts=draw.skipped,
                   t_rollout=t1 - t0, t_update=t2 - t1, t_total=time.perf_counter() - t0,
                   score_timeouts=self.score_timeouts, truncated=sum(r["truncated"] for r in fresh),
                   trained=sum(r["n_trained"] for r in groups),
                   reused=sum(r["n_trained"] for r in groups if r["reused"]),
                   informative_tied=sum(r["n_informative"] for r in groups if r["tie"]), **cost,
                   cpu_s=time.process_time() - cpu0)
        self._write("groups", step, groups)
        self._write("steps", step, [row])
        # the first step keeps a group of each difficulty whatever log_completions says: a run that trains nothing
        # still shows what its model replied. Across processes: rank 0's own groups (the texts stay where drawn)
        if cfg.log_completions or step == 1:
            mine = [(g, r) for g, r in zip(draw.groups, groups) if g.samples is not None]
            self._write("completions", step, completion_rows([g for g, _ in mine], [r for _, r in mine],
                                                             cfg.log_completions, first_of_each_difficulty=step == 1))
        self.tracker.log(step_metrics(row, fresh), step)
        if step == 1 and not (cfg.eval.n and self.task.held_out):  # no base evaluation said whether it can learn
            if said := first_step_warning(draw.groups, self.task.answer_kind, self.task.answer_format, self.remedies):
                self.untrainable = announce(said, cfg.stop_untrainable)
        self.last_step = step
        if draw.exhausted:
            raise SamplerExhausted(f"{draw.exhausted}. Stopped at step {step}; the tables so far are whole.")
        return row

    def checkpoint(self) -> None:
        bad = sum(int(not local(p).detach().isfinite().all()) for p in self.model.parameters())
        if distributed.global_sum(bad):  # fsdp: each rank its shards; every rank stops here
            kept = checkpoint_steps(self.run_dir)
            raise Diverged(f"step {self.last_step}: the policy's weights are no longer finite; the run diverged "
                           f"(algo.lr={self.cfg.algo.lr}); not saved: the last checkpoint is step "
                           f"{kept[-1] if kept else 'none'}")
        state = {**self.counters, "sampler": self.sampler.state_dict()}
        if self.sampler.rank_local and distributed.world() > 1:  # what only each rank holds: every rank's state
            state["ranks_sampler"] = distributed.gather_objects(state["sampler"])
        ranks_rng = distributed.gather_objects(rng_state(self.generator)) if distributed.world() > 1 else None
        if not distributed.is_main() and self.par.name == "ddp":  # the same model and optimizer on every rank
            return
        save_checkpoint(self.run_dir, self.last_step, self.saved, self.optimizer, self.generator, state, ranks_rng)
        if not distributed.is_main():  # fsdp: every rank wrote its shards; rank 0 keeps the folder
            return
        c = self.cfg.checkpoint
        evaluated = {s for s, _ in parts(self.run_dir, "eval")} if c.keep_eval else set()
        prune_checkpoints(self.run_dir, c.keep_last, set(c.keep_steps), evaluated)

    def eval_due(self, step: int, before: dict) -> bool:
        """Whether `step` is evaluated: the last step (max_steps or the budget), every eval.every steps, or
        when it crossed a multiple of eval.every_samples, eval.every_tokens or eval.every_updates (`before`: the
        counters before it): the union of the schedules, so one sweep aligns arms all four ways."""
        c = self.cfg
        crossed = any(every and before[key] // every < self.counters[key] // every
                      for key, every in (("samples_total", c.eval.every_samples), ("tokens_total", c.eval.every_tokens),
                                         ("updates", c.eval.every_updates)))
        return step == c.max_steps or self.budget_spent() or bool(c.eval.every and step % c.eval.every == 0) or crossed

    def budget_spent(self) -> bool:
        c = self.cfg
        return ((c.max_samples is not None and self.counters["samples_total"] >= c.max_samples)
                or (c.max_tokens is not None and self.counters["tokens_total"] >= c.max_tokens))

    def run(self) -> str | None:
        """Train to max_steps or the sample/token budget. Returns why it stopped early, or None.
        A checkpoint is saved before its step's evaluation, so an evaluation that fails (out of memory,
        killed) loses no training: the resumed run finds the evaluation missing and does it."""
        cfg = self.cfg
        if self.last_step == 0:
            self.evaluate(0)
            if self.untrainable:
                return f"stop_untrainable: {self.untrainable}"
        elif not (self.run_dir / "eval" / f"part-{self.last_step:06d}.parquet").exists():
            rows = read_table(self.run_dir, "steps").to_pylist()[-2:]  # the restored step's row and the one before
            before = {key: rows[-2][key] if len(rows) > 1 else 0 for key in ("samples_total", "tokens_total")}
            before["updates"] = self.counters["updates"] - (row_updates(rows[-1], cfg.algo.mu) if rows else 0)
            if self.eval_due(self.last_step, before if rows else dict(self.counters)):
                self.evaluate(self.last_step)
        while self.last_step < cfg.max_steps and not self.budget_spent():
            before = dict(self.counters)
            try:
                step = self.step()["step"]
            except SamplerExhausted as stop:  # a clean end: save and evaluate what was learned so far
                log.warning("%s", stop)
                self.checkpoint()
                self.evaluate(self.last_step)
                return str(stop)
            if self.untrainable:  # the first step's check (no base evaluation)
                self.checkpoint()
                return f"stop_untrainable: {self.untrainable}"
            at_eval = self.eval_due(step, before)
            if at_eval or step % cfg.checkpoint_every == 0:
                self.checkpoint()
            if at_eval:
                self.evaluate(step)

    def finish(self) -> None:
        """After a finished run: drop the last checkpoint's optimizer state if asked."""
        if self.cfg.checkpoint.final_weights_only and self.last_step and distributed.is_main():
            drop_state(self.run_dir, self.last_step)


def _owners(problems: list[Problem], world: int) -> list[int]:
    """The rank that samples each listed problem: runs of one problem listed side by side (a
    sampler's chunks of one prompt) stay on one rank; run j goes to rank j mod W (problems r, r+W, ...)."""
    out, run = [], -1
    for i, p in enumerate(problems):
        if i == 0 or p.prompt_id != problems[i - 1].prompt_id:
            run += 1
        out.append(run % world)
    return out


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def train(cfg: TrainConfig, on_start: Callable[[Path], None] | None = None) -> Path:
    """Run (or resume) one GRPO job into cfg.out_dir. Returns the run directory.

    One writer per directory (a lock); a resume only with the config the run was started with
    (grpo_lab.run.guards). Nothing in the directory changes before both accept the start; then
    `on_start(run_dir)` runs on every rank (the entry point writes its own records there). When the job
    fails, run.json records why and the original error is raised, even if run.json itself can no longer
    be written (a full or read-only disk); SIGTERM or SIGINT end it as `killed` (raising Killed)."""
    validate(cfg)
    distributed.setup(cfg.dist.backend, cfg.dist.timeout_s)  # under torchrun: join the other ranks
    run_dir = Path(cfg.out_dir)
    if distributed.is_main():
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            why = "a file is there, not a folder" if run_dir.exists() and not run_dir.is_dir() else e.strerror
            raise RunDirUnwritable(f"out_dir: {run_dir}: cannot create it ({why})") from None
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with contextlib.ExitStack() as held:
        error = None
        if distributed.is_main():  # one writer: rank 0 holds the lock and checks the directory
            try:
                held.enter_context(RunLock(run_dir))
                cfg = prepare(run_dir, cfg)  # a run started before a key existed goes on as it ran
            except InputError as e:
                error = e
        error, cfg = distributed.broadcast_object((error, cfg))  # every rank stops with rank 0's one-line reason
        if error is not None:
            raise error
        if on_start is not None:
            on_start(run_dir)
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model,
                                                                 device=distributed.device(cfg.model.device)))
        held.enter_context(stop_on_signals())  # SIGTERM, SIGINT: run.json says killed (grpo_lab/run/signals.py)
        record = RunRecord(run_dir, cfg.seed)
        record.update()
        log.info("run %s in %s: loading the model (%d torch threads)", record.run_id, run_dir, torch.get_num_threads())
        start = time.monotonic()
        trainer, step = None, 0
        try:
            trainer = Trainer(cfg, record)
            resumed_at, stopped = trainer.last_step, trainer.run()
            trainer.finish()
            step, done = trainer.last_step, trainer
            trainer = None  # closed here, before `done`: a signal while closing is a killed run, recorded so
            _close(done)
            record.done(stopped, trained=step > resumed_at)
        except BaseException as e:
            killed = isinstance(e, Killed)
            if killed:
                e.where = f"at step {trainer.last_step if trainer else step} ({run_dir})"
            try:
                record.update(status="killed" if killed else "failed", finished=now(),
                              signal=e.signal if killed else None, error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc(limit=20))
            except Exception as also:  # noqa: BLE001 - the first error is the one to show
                log.error("could not record the failure in %s (%s: %s); the next start will say the run ended "
                          "unrecorded", record.path, type(also).__name__, also)
            raise
        finally:
            if trainer is not None:
                _close(trainer)
    log.info("%s", run_summary(run_dir, time.monotonic() - start))
    return run_dir


def _close(trainer: Trainer) -> None:
    """Stop what a trainer started beside the loop: the answer-checking workers, the tracker, the rollout engine."""
    trainer.scorer.close()
    trainer.tracker.close()
    trainer.engine.close()
