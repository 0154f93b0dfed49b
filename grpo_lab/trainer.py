"""The GRPO loop: prompts -> G samples each -> rewards -> advantages -> mu clipped updates with a
k3 KL to the frozen reference -> group and step tables, checkpoints, exact resume."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import platform
import subprocess
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
import transformers

from grpo_lab import __version__, distributed
from grpo_lab.batching import training_units
from grpo_lab.checkpoints import (check_world_size, checkpoint_steps, drop_state, latest_checkpoint, load_checkpoint,
                                  prune_checkpoints, rng_state, save_checkpoint)
from grpo_lab.completions import completion_rows
from grpo_lab.config import InputError, TrainConfig, validate
from grpo_lab.evaluation import evaluate, load_task_and_policy
from grpo_lab.microbatch import MicroBatch, micro_batches
from grpo_lab.objective import Normalisers, group_advantages, grpo_loss, loss_normalisers, sequence_weights
from grpo_lab.policy import amp, frozen_copy
from grpo_lab.progress import run_summary
from grpo_lab.guards import RunLock, prepare
from grpo_lab.rewards import RewardWeights, Scorer
from grpo_lab.kvcache import autocast_dtype
from grpo_lab.logprobs import completion_logprobs, enable_checkpointing
from grpo_lab.rollout import Rollout, sample_groups, split_groups
from grpo_lab.samplers import Draw, Group, PromptStream, build_sampler
from grpo_lab.tables import parts, read_table, remove_parts_after, write_part
from grpo_lab.tasks import Problem
from grpo_lab.tracking import Tracker, build_tracker, eval_metrics, step_metrics

log = logging.getLogger(__name__)


class RunRecord:
    """run.json: identity and status of one job, rewritten atomically on every change (by rank 0 only)."""

    def __init__(self, run_dir: Path, seed: int):
        self.path = run_dir / "run.json"
        self.writes = distributed.is_main()
        old = _read_record(self.path)
        self.data = {
            "run_id": old.get("run_id") or f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}",
            "status": "running",
            "started": old.get("started") or _now(),
            "finished": None,
            "error": None,
            "stopped": None,  # why a run ended before max_steps or its budget (a sampler's cap)
            "version": __version__,
            "seed": seed,
            "device": None,
            "torch": torch.__version__,
            "machine": describe_machine(),
            "pid": os.getpid(),  # who writes it: the next start names them if this run.json stays `running`
            "host": platform.node(),
            "transformers": transformers.__version__,
            "git": git_state(),  # the code that ran: {"commit", "dirty"}, None outside a checkout
            "world_size": distributed.world(),  # processes of the run (torchrun); 1 without
        }
        self.data["run_id"] = distributed.broadcast_object(self.data["run_id"])  # rank 0's, on every rank

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    def update(self, **fields) -> None:
        self.data.update(fields)
        if not self.writes:
            return
        tmp = self.path.with_name(f".run.json.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path)


def _read_record(path: Path) -> dict:
    """The run.json a previous start left ({} if none, or if it is unreadable: it is rewritten)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def describe_machine() -> str:
    """The host in one line, e.g. "AMD EPYC, 2 CPUs, x86_64 Linux", plus the GPU when there is one."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    text = f"{cpu}, {os.cpu_count()} CPUs, {platform.machine()} {platform.system()}"
    if torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text


def git_state() -> dict | None:
    """The commit of the checkout this package runs from and whether it had uncommitted changes."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0 or status.returncode != 0:
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class SamplerExhausted(RuntimeError):
    """A sampler hit its cap: the run ends there (status done, `stopped` says why in run.json)."""


def group_rows(run_id: str, step: int, groups: list[Group], counters: dict,
               trained: dict[int, tuple[int, int]] | None = None) -> list[dict]:
    """One groups-table row per group drawn this step; advances `counters` (samples, tokens) in place.
    `trained` (from `unit_columns`) gives each training group's unit and informative samples."""
    trained = trained or {}
    rows = []
    for grp in groups:
        unit, n_informative = trained.get(id(grp), (None, 0))
        g = len(grp.rewards)
        n_correct = int(grp.correct.sum())
        tokens = grp.tokens if grp.samples is None else int(grp.samples.lengths.sum())
        counters["samples_total"] += g
        counters["tokens_total"] += tokens
        kind = None
        if grp.tie:
            kind = "all_correct" if n_correct == g else "all_wrong" if n_correct == 0 else "other"
        rows.append(dict(
            run_id=run_id, step=step, prompt_id=grp.problem.prompt_id, difficulty=grp.problem.difficulty,
            round=grp.round, group_size=g, rewards=grp.rewards.tolist(), correct=grp.correct.tolist(),
            reward_mean=float(grp.rewards.mean(dtype=np.float64)), reward_std=float(grp.rewards.std(dtype=np.float64)),
            n_correct=n_correct,
            tie=grp.tie, tie_kind=kind, used=grp.used, tokens=tokens, **counters,
            unit=unit, n_informative=n_informative, n_trained=grp.n_trained, rank=grp.rank,
            truncated=grp.truncated if grp.samples is None else int(grp.samples.truncated.sum()),
        ))
    return rows


def unit_columns(units: list[list[Group]], advantages: torch.Tensor) -> dict[int, tuple[int, int]]:
    """For each group that trained (keyed by id): its unit's index in the step, and how many of its
    samples had a nonzero advantage, read from the very advantages the update used ((N,), units' order)."""
    nonzero = (advantages != 0).cpu().numpy()  # (N,)
    out, start = {}, 0
    for u, unit in enumerate(units):
        for grp in unit:
            g = len(grp.rewards)
            out[id(grp)] = (u, int(nonzero[start:start + g].sum()))
            start += g
    return out


def score_rollout(ro: Rollout, problems: list[Problem], kind: str, weights: RewardWeights, scorer: Scorer,
                  answer_format: str = "bare"):
    """Rewards and correctness as (B, G) arrays, and how many answers' checks ran out of time."""
    g = ro.group_size
    golds = [p.answer for p in problems for _ in range(g)]
    scored = scorer.score_all(ro.texts, (~ro.truncated).tolist(), golds, kind, weights, answer_format)
    rewards = np.array([s.reward for s in scored], dtype=np.float32).reshape(-1, g)
    correct = np.array([s.correct for s in scored], dtype=bool).reshape(-1, g)
    return rewards, correct, sum(s.timed_out for s in scored)


def unit_advantages(units: list[list[Group]], std: str, eps: float, device) -> torch.Tensor:
    """Advantages (N,) for the training batch: each unit's pooled rewards are one baseline group."""
    sizes = {sum(len(g.rewards) for g in u) for u in units}
    pooled = [np.concatenate([g.rewards for g in u]) for u in units]
    if len(sizes) == 1:  # the common case, one batched call
        return group_advantages(torch.from_numpy(np.stack(pooled)).to(device), std=std, eps=eps).reshape(-1)
    return torch.cat([group_advantages(torch.from_numpy(r)[None].to(device), std=std, eps=eps)[0] for r in pooled])


def update(model, ref, optimizer, micro: list[MicroBatch], advantages: torch.Tensor, seq_weight: torch.Tensor,
           cfg: TrainConfig) -> dict:
    """mu optimizer updates on one batch of samples, each accumulating the gradients of its micro-batches;
    returns the step's loss statistics (means over mu) and `informative`, the samples whose advantage is
    nonzero. With none, the policy gradient is exactly zero: no optimizer step is taken (Adam would turn the
    KL term's near-zero gradient into a full-size step) and the statistics come from one pass without grad.

    Across processes `micro` holds this rank's share of the batch (possibly none): the normalisers and
    `informative` are summed over ranks, and so are the gradients after accumulation, before clipping,
    so every rank takes the step one process would take on the whole batch."""
    a = cfg.algo
    temp = cfg.rollout.temperature or 1.0
    chunk = cfg.model.logprob_chunk
    lengths = (torch.cat([mb.rollout.completion_mask.sum(-1) for mb in micro]) if micro
               else torch.zeros(0, dtype=torch.long, device=seq_weight.device))  # (N,) tokens in the loss
    norm = loss_normalisers(lengths, seq_weight, a.loss_agg, cfg.rollout.max_new_tokens)  # this rank's part
    device = seq_weight.device
    norm = Normalisers(loss=distributed.global_sum(norm.loss).to(device),  # the whole batch's, over ranks
                       tokens=distributed.global_sum(norm.tokens).to(device))
    informative = int(distributed.global_sum(int((advantages != 0).sum())))
    ref_logp = [None] * len(micro)
    if a.beta != 0:
        with torch.inference_mode():
            ref_logp = [completion_logprobs(ref, mb.rollout, temp, chunk=chunk) for mb in micro]
    stats = []
    old_logp = [None] * len(micro)
    for _ in range(a.mu if informative else 1):
        optimizer.zero_grad(set_to_none=True)
        sums = np.zeros(4)
        for k, mb in enumerate(micro):
            with torch.set_grad_enabled(informative > 0):
                logp = completion_logprobs(model, mb.rollout, temp, chunk=chunk)  # (n, T)
                if old_logp[k] is None:
                    # The policy before this step's first update is the one that sampled: its log-probs from
                    # this same pass make the first ratio exactly 1. The sampler's own (ro.old_logp) equal
                    # them only up to kernel rounding (cached decode vs full pass; visible in bf16).
                    old_logp[k] = logp.detach()
                loss, st = grpo_loss(logp, old_logp[k], advantages[mb.rows], mb.rollout.completion_mask,
                                     ref_logp=ref_logp[k], beta=a.beta, eps_low=a.eps_low, eps_high=a.eps_high,
                                     agg=a.loss_agg, max_len=cfg.rollout.max_new_tokens,
                                     seq_weight=seq_weight[mb.rows], norm=norm)
                if informative:
                    loss.backward()  # gradients accumulate: each micro-batch's loss is its share of the batch's
            sums += (st.loss, st.pg_loss, st.kl, st.clip_frac)
        sums = distributed.all_reduce_(torch.from_numpy(sums)).numpy()  # every rank's share of the batch's
        grad_norm = float("nan")  # no gradient taken
        if informative:
            distributed.sum_gradients([p for p in model.parameters() if p.requires_grad])  # one process: nothing
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm))
            optimizer.step()
        stats.append((*sums, grad_norm))
    loss, pg, kl, clip, gn = np.mean(stats, axis=0).tolist()
    return dict(loss=loss, pg_loss=pg, kl=kl, clip_frac=clip, grad_norm=gn, informative=informative)


def _masked(ro: Rollout) -> Rollout:
    """algo.mask_truncated: completions cut at max_new_tokens leave the loss (and its token counts); they
    still count in their group's baseline, as in DAPO's overlong filtering."""
    return dataclasses.replace(ro, completion_mask=ro.completion_mask & ~ro.truncated[:, None])


class Trainer:
    """One GRPO job: holds the policy, reference, optimizer, sampler and RNG; `step()` runs one optimizer
    step and writes its table parts. `train(cfg)` drives it; benchmarks drive it step by step."""

    def __init__(self, cfg: TrainConfig, record: RunRecord, policy: tuple | None = None):
        self.cfg, self.record, self.run_dir = cfg, record, Path(cfg.out_dir)
        torch.manual_seed(cfg.seed)
        task, self.model, self.tokenizer, self.end_ids = load_task_and_policy(cfg, policy)  # policy: preloaded
        self.task = task
        self.device = next(self.model.parameters()).device
        record.update(device=str(self.device), difficulty_labels=task.difficulty_labels)
        distributed.broadcast_parameters(self.model)  # as DDP does: every rank starts from rank 0's weights
        with self.amp():  # under bf16 autocast the reference is stored in bf16: it only ever runs in it
            self.ref = frozen_copy(self.model, autocast_dtype(self.device)) if cfg.algo.beta != 0 else None
        if cfg.model.gradient_checkpointing:
            enable_checkpointing(self.model)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay,
                                           fused=self.device.type in ("cpu", "cuda"))
        self.generator = torch.Generator(device=self.device).manual_seed(distributed.rank_seed(cfg.seed))
        self.weights = RewardWeights(cfg.reward.accuracy, cfg.reward.format)
        r = cfg.reward
        self.scorer = Scorer(r.workers, r.answer_timeout_s, r.step_budget_s)  # closed by train()
        self.score_timeouts = 0  # this step's answers whose check ran out of time
        self.sampler = build_sampler(cfg.sampler, PromptStream(task.train, cfg.seed))
        self.counters = {"samples_total": 0, "tokens_total": 0}
        self.last_step = 0
        ckpt = distributed.broadcast_object(latest_checkpoint(self.run_dir))  # rank 0's view: one choice for all
        if ckpt is None and checkpoint_steps(self.run_dir, resumable=False):
            raise RuntimeError(f"out_dir: {self.run_dir} holds a finished run whose checkpoints keep weights only "
                               "(checkpoint.final_weights_only): it cannot resume; use a new out_dir")
        if ckpt is not None:
            self.last_step, state = load_checkpoint(ckpt, self.model, self.optimizer, self.generator,
                                                    distributed.rank(), distributed.world())
            self.counters = {k: state[k] for k in self.counters}
            self.sampler.load_state_dict(state["sampler"])
            log.info("resuming %s from step %d", self.run_dir, self.last_step)
        if distributed.is_main():  # rank 0 writes every table; the other ranks' rows reach it by gathers
            remove_parts_after(self.run_dir, self.last_step)  # rows past the checkpoint are redrawn identically
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
        """Eval rows for the current model (step 0: the base model) on the held-out pool."""
        cfg = self.cfg
        if cfg.eval.n and self.task.held_out:
            mine = self.task.held_out[distributed.rank()::distributed.world()]  # each rank a share of the prompts
            with self.amp():
                rows = evaluate(self.model, self.tokenizer, mine, n=cfg.eval.n,
                                temperature=cfg.eval.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                                end_ids=self.end_ids, answer_kind=self.task.answer_kind,
                                seed=distributed.rank_seed(cfg.seed), run_id=self.record.run_id, step=step,
                                max_rows=cfg.rollout.max_rows_per_call, scorer=self.scorer,
                                answer_format=self.task.answer_format, stop=cfg.rollout.stop)
            order = {p.prompt_id: i for i, p in enumerate(self.task.held_out)}
            rows = sorted((r for part in distributed.gather_objects(rows) for r in part),
                          key=lambda r: order[r["prompt_id"]])  # stable: each prompt's samples stay in order
            for row in rows:  # so checkpoints align by samples drawn, not by step
                row["samples_total"] = self.counters["samples_total"]
            self._write("eval", step, rows)
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
            ro = sample_groups(self.model, self.tokenizer, [p.prompt for p in mine], size or cfg.sampler.group_size,
                               max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                               generator=self.generator, end_ids=self.end_ids, max_rows=cfg.rollout.max_rows_per_call,
                               stop=cfg.rollout.stop)
            rewards, correct, timeouts = score_rollout(ro, mine, self.task.answer_kind, self.weights, self.scorer,
                                                       self.task.answer_format)
            ties = rewards.astype(np.float64).std(axis=1) <= cfg.algo.std_eps  # population std in float64, as eq. 3
            groups = [Group(p, rnd, chunk, rewards[i], correct[i], bool(ties[i]), rank=rank,
                            tokens=int(chunk.lengths.sum()), truncated=int(chunk.truncated.sum()))
                      for i, (p, chunk) in enumerate(zip(mine, split_groups(ro)))]
        if world == 1:
            self.score_timeouts += timeouts
            return groups
        scores = distributed.gather_objects(([(g.rewards, g.correct, g.tie, g.tokens, g.truncated) for g in groups], timeouts))
        self.score_timeouts += sum(t for _, t in scores)
        out, taken = [], [0] * world
        for p, r in zip(problems, owner):  # in the problems' order: each rank's groups come in its own order
            k, taken[r] = taken[r], taken[r] + 1
            rewards, correct, tie, tokens, truncated = scores[r][0][k]
            out.append(groups[k] if r == rank else Group(p, rnd, None, rewards, correct, tie, rank=r, tokens=tokens,
                                                         truncated=truncated))
        return out

    def step(self) -> dict:
        """Draw, score and learn from one batch; write its groups and steps parts. Returns the step row."""
        cfg = self.cfg
        step = self.last_step + 1
        t0 = time.perf_counter()
        self.score_timeouts = 0
        with self.amp():
            draw: Draw = self.sampler.draw(self._draw_round, cfg.prompts_per_step)
        t1 = time.perf_counter()
        losses = dict.fromkeys(("loss", "pg_loss", "kl", "clip_frac", "grad_norm"), float("nan"))  # no update
        losses["informative"] = 0
        trained = {}
        if draw.units:  # the same on every rank: samplers decide from global rounds
            a = cfg.algo
            local = [[g for g in u if g.samples is not None] for u in draw.units]  # this rank's share
            pieces, _ = training_units([u for u in local if u], self.tokenizer.pad_token_id)
            trains = np.concatenate([np.ones(len(g.rewards), bool) if g.train is None else g.train
                                     for u in draw.units for g in u])  # (N_pooled,) every rank's samples
            here = np.array([g.samples is not None for u in draw.units for g in u for _ in g.rewards])  # (N_pooled,)
            adv = unit_advantages(draw.units, a.std, a.std_eps, self.device)  # (N_pooled,)
            keep = torch.from_numpy(trains).to(adv.device)
            trained = unit_columns(draw.units, adv * keep)  # informative: a nonzero advantage on a sample that trains
            mine = torch.from_numpy(here[trains]).to(adv.device)  # (N,) the training rows this rank holds
            adv = adv[keep]  # (N,) baselines from every sample of a unit, rows of those that train
            if a.mask_truncated:
                pieces = [[_masked(ro) for ro in unit] for unit in pieces]
            micro = micro_batches(pieces, self.tokenizer.pad_token_id, a.micro_batch_groups, a.micro_batch_tokens)
            sizes = [n for u in draw.units if (n := sum(g.n_trained for g in u))]  # samples that train, per unit
            weight = sequence_weights(sizes, cfg.sampler.group_size, a.unit_weight).to(self.device)  # (N,)
            with self.amp():  # this rank's rows, in the micro-batches' order (units, then groups)
                losses = update(self.model, self.ref, self.optimizer, micro, adv[mine], weight[mine], cfg)
        t2 = time.perf_counter()

        run_id = self.record.run_id
        groups = group_rows(run_id, step, draw.groups, self.counters, trained)
        correct = np.concatenate([g.correct for g in draw.groups]) if draw.groups else np.zeros(0, bool)
        rewards = np.concatenate([g.rewards for g in draw.groups]) if draw.groups else np.zeros(0)
        row = dict(run_id=run_id, step=step, **losses, lr=cfg.algo.lr, reward_mean=_mean(rewards),
                   accuracy=_mean(correct), tie_frac=_mean([g.tie for g in draw.groups]), groups=len(groups),
                   samples=int(correct.size), **self.counters, skipped_prompts=draw.skipped,
                   t_rollout=t1 - t0, t_update=t2 - t1, t_total=time.perf_counter() - t0,
                   score_timeouts=self.score_timeouts, truncated=sum(g["truncated"] for g in groups))
        self._write("groups", step, groups)
        self._write("steps", step, [row])
        if cfg.log_completions:  # across processes: rank 0's own groups (the texts stay where they were drawn)
            mine = [(g, r) for g, r in zip(draw.groups, groups) if g.samples is not None]
            self._write("completions", step, completion_rows([g for g, _ in mine], [r for _, r in mine],
                                                             cfg.log_completions))
        self.tracker.log(step_metrics(row, groups), step)
        self.last_step = step
        if draw.exhausted:
            raise SamplerExhausted(f"{draw.exhausted}. Stopped at step {step}; the tables so far are whole.")
        return row

    def checkpoint(self) -> None:
        state = {**self.counters, "sampler": self.sampler.state_dict()}
        ranks_rng = distributed.gather_objects(rng_state(self.generator)) if distributed.world() > 1 else None
        if not distributed.is_main():  # the model, optimizer and sampler are the same on every rank
            return
        save_checkpoint(self.run_dir, self.last_step, self.model, self.optimizer, self.generator, state, ranks_rng)
        c = self.cfg.checkpoint
        evaluated = {s for s, _ in parts(self.run_dir, "eval")} if c.keep_eval else set()
        prune_checkpoints(self.run_dir, c.keep_last, set(c.keep_steps), evaluated)

    def eval_due(self, step: int, drawn_before: int) -> bool:
        """Whether `step` is evaluated: the last step (max_steps or the budget), every eval.every steps, or
        when its draw crossed a multiple of eval.every_samples (`drawn_before`: samples drawn before it)."""
        c = self.cfg
        n = c.eval.every_samples
        crossed = bool(n) and drawn_before // n < self.counters["samples_total"] // n
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
        elif not (self.run_dir / "eval" / f"part-{self.last_step:06d}.parquet").exists():
            last = read_table(self.run_dir, "steps").to_pylist()[-1:]  # the restored step's own row
            before = last[0]["samples_total"] - last[0]["samples"] if last else self.counters["samples_total"]
            if self.eval_due(self.last_step, before):
                self.evaluate(self.last_step)
        while self.last_step < cfg.max_steps and not self.budget_spent():
            drawn_before = self.counters["samples_total"]
            try:
                step = self.step()["step"]
            except SamplerExhausted as stop:  # a clean end: save and evaluate what was learned so far
                log.warning("%s", stop)
                self.checkpoint()
                self.evaluate(self.last_step)
                return str(stop)
            at_eval = self.eval_due(step, drawn_before)
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


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) one GRPO job into cfg.out_dir. Returns the run directory.

    One writer per directory (a lock); a resume only with the config the run was started with
    (grpo_lab.guards). When the job fails, run.json records why and the original error is raised,
    even if run.json itself can no longer be written (a full or read-only disk)."""
    validate(cfg)
    distributed.setup(cfg.dist.backend, cfg.dist.timeout_s)  # under torchrun: join the other ranks
    run_dir = Path(cfg.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    with contextlib.ExitStack() as held:
        error = None
        if distributed.is_main():  # one writer: rank 0 holds the lock and checks the directory
            try:
                held.enter_context(RunLock(run_dir))
                prepare(run_dir, cfg)
            except InputError as e:
                error = e
        error = distributed.broadcast_object(error)  # every rank stops with rank 0's one-line reason
        if error is not None:
            raise error
        if (ckpt := latest_checkpoint(run_dir)) is not None:
            check_world_size(ckpt, distributed.world())  # before run.json changes: a finished run stays finished
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, device=distributed.device(cfg.model.device)))
        record = RunRecord(run_dir, cfg.seed)
        record.update()
        log.info("run %s in %s: loading the model", record.run_id, run_dir)
        start = time.monotonic()
        trainer = None
        try:
            trainer = Trainer(cfg, record)
            stopped = trainer.run()
            trainer.finish()
        except BaseException as e:
            try:
                record.update(status="failed", finished=_now(), error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc(limit=20))
            except Exception as also:  # noqa: BLE001 - the first error is the one to show
                log.error("could not record the failure in %s (%s: %s); the next start will say the run ended "
                          "unrecorded", record.path, type(also).__name__, also)
            raise
        finally:
            if trainer is not None:
                trainer.scorer.close()
                trainer.tracker.close()
        record.update(status="done", finished=_now(), stopped=stopped)
    log.info("%s", run_summary(run_dir, time.monotonic() - start))
    return run_dir
