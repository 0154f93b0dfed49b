"""The GRPO loop: prompts -> G samples each -> rewards -> advantages -> mu clipped updates with a
k3 KL to the frozen reference -> group and step tables, checkpoints, exact resume."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from grpo_lab import __version__
from grpo_lab.batching import training_batch
from grpo_lab.checkpoints import latest_checkpoint, load_checkpoint, save_checkpoint
from grpo_lab.config import TrainConfig, validate
from grpo_lab.evaluation import evaluate, load_task_and_policy
from grpo_lab.objective import group_advantages, grpo_loss
from grpo_lab.policy import amp, frozen_copy
from grpo_lab.rewards import RewardWeights, score_all
from grpo_lab.rollout import Rollout, completion_logprobs, sample_groups, split_groups
from grpo_lab.samplers import Draw, Group, PromptStream, build_sampler
from grpo_lab.tables import remove_parts_after, write_part
from grpo_lab.tasks import Problem


class RunRecord:
    """run.json: identity and status of one job, rewritten atomically on every change."""

    def __init__(self, run_dir: Path, seed: int):
        self.path = run_dir / "run.json"
        old = json.loads(self.path.read_text()) if self.path.exists() else {}
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
        }

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    def update(self, **fields) -> None:
        self.data.update(fields)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path)


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class SamplerExhausted(RuntimeError):
    """A sampler hit its cap: the run ends there (status done, `stopped` says why in run.json)."""


def group_rows(run_id: str, step: int, groups: list[Group], counters: dict) -> list[dict]:
    """One groups-table row per group drawn this step; advances `counters` (samples, tokens) in place."""
    rows = []
    for grp in groups:
        g = len(grp.rewards)
        n_correct = int(grp.correct.sum())
        tokens = int(grp.samples.lengths.sum())
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
            tie=grp.tie, tie_kind=kind, used=grp.used, tokens=tokens, **counters, n_trained=grp.n_trained,
        ))
    return rows


def score_rollout(ro: Rollout, problems: list[Problem], kind: str, weights: RewardWeights):
    """Rewards and correctness as (B, G) arrays."""
    g = ro.group_size
    golds = [p.answer for p in problems for _ in range(g)]
    scored = score_all(ro.texts, (~ro.truncated).tolist(), golds, kind, weights)
    rewards = np.array([s.reward for s in scored], dtype=np.float32).reshape(-1, g)
    correct = np.array([s.correct for s in scored], dtype=bool).reshape(-1, g)
    return rewards, correct


def unit_advantages(units: list[list[Group]], std: str, eps: float, device) -> torch.Tensor:
    """Advantages (N,) for the training batch: each unit's pooled rewards are one baseline group."""
    sizes = {sum(len(g.rewards) for g in u) for u in units}
    pooled = [np.concatenate([g.rewards for g in u]) for u in units]
    if len(sizes) == 1:  # the common case, one batched call
        return group_advantages(torch.from_numpy(np.stack(pooled)).to(device), std=std, eps=eps).reshape(-1)
    return torch.cat([group_advantages(torch.from_numpy(r)[None].to(device), std=std, eps=eps)[0] for r in pooled])


def update(model, ref, optimizer, ro: Rollout, advantages: torch.Tensor, cfg: TrainConfig) -> dict:
    """mu optimizer updates on one batch of samples; returns the step's loss statistics (means over mu)."""
    a = cfg.algo
    temp = cfg.rollout.temperature or 1.0
    ref_logp = None
    if a.beta != 0:
        with torch.inference_mode():
            ref_logp = completion_logprobs(ref, ro, temp)
    stats = []
    old_logp = None
    for _ in range(a.mu):
        logp = completion_logprobs(model, ro, temp)  # (N, T)
        if old_logp is None:
            # The policy before this step's first update is the one that sampled: its log-probs from
            # this same pass make the first ratio exactly 1. The sampler's own (ro.old_logp) equal
            # them only up to kernel rounding (cached decode vs full pass; visible in bf16).
            old_logp = logp.detach()
        loss, st = grpo_loss(logp, old_logp, advantages, ro.completion_mask, ref_logp=ref_logp, beta=a.beta,
                             eps_low=a.eps_low, eps_high=a.eps_high, agg=a.loss_agg,
                             max_len=cfg.rollout.max_new_tokens)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_grad_norm)
        optimizer.step()
        stats.append((st.loss, st.pg_loss, st.kl, st.clip_frac, float(grad_norm)))
    loss, pg, kl, clip, gn = np.mean(stats, axis=0).tolist()
    return dict(loss=loss, pg_loss=pg, kl=kl, clip_frac=clip, grad_norm=gn)


class Trainer:
    """One GRPO job: holds the policy, reference, optimizer, sampler and RNG; `step()` runs one optimizer
    step and writes its table parts. `train(cfg)` drives it; benchmarks drive it step by step."""

    def __init__(self, cfg: TrainConfig, record: RunRecord):
        self.cfg, self.record, self.run_dir = cfg, record, Path(cfg.out_dir)
        torch.manual_seed(cfg.seed)
        task, self.model, self.tokenizer, self.end_ids = load_task_and_policy(cfg)
        self.task = task
        self.device = next(self.model.parameters()).device
        record.update(device=str(self.device))
        self.ref = frozen_copy(self.model) if cfg.algo.beta != 0 else None
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg.algo.lr, weight_decay=cfg.algo.weight_decay,
                                           fused=self.device.type in ("cpu", "cuda"))
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.weights = RewardWeights(cfg.reward.accuracy, cfg.reward.format)
        self.sampler = build_sampler(cfg.sampler, PromptStream(task.train, cfg.seed))
        self.counters = {"samples_total": 0, "tokens_total": 0}
        self.last_step = 0
        ckpt = latest_checkpoint(self.run_dir)
        if ckpt is not None:
            self.last_step, state = load_checkpoint(ckpt, self.model, self.optimizer, self.generator)
            self.counters = {k: state[k] for k in self.counters}
            self.sampler.load_state_dict(state["sampler"])
        remove_parts_after(self.run_dir, self.last_step)  # rows past the checkpoint are redrawn identically

    def amp(self):
        """The context every model pass runs in: bf16 autocast on CUDA, nothing on CPU."""
        return amp(self.cfg.model.dtype, self.device)

    def evaluate(self, step: int) -> None:
        """Eval rows for the current model (step 0: the base model) on the held-out pool."""
        cfg = self.cfg
        if cfg.eval.n and self.task.held_out:
            with self.amp():
                rows = evaluate(self.model, self.tokenizer, self.task.held_out, n=cfg.eval.n,
                                temperature=cfg.eval.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                                end_ids=self.end_ids, answer_kind=self.task.answer_kind, seed=cfg.seed,
                                run_id=self.record.run_id, step=step)
            write_part(self.run_dir, "eval", step, rows)

    def _draw_round(self, problems: list[Problem], rnd: int, size: int | None = None) -> list[Group]:
        """Sample and score `size` (default G) completions for each problem (one batched rollout)."""
        cfg = self.cfg
        ro = sample_groups(self.model, self.tokenizer, [p.prompt for p in problems], size or cfg.sampler.group_size,
                           max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
                           generator=self.generator, end_ids=self.end_ids)
        rewards, correct = score_rollout(ro, problems, self.task.answer_kind, self.weights)
        ties = rewards.astype(np.float64).std(axis=1) <= cfg.algo.std_eps  # population std in float64, as eq. 3
        return [Group(p, rnd, chunk, rewards[i], correct[i], bool(ties[i]))
                for i, (p, chunk) in enumerate(zip(problems, split_groups(ro)))]

    def step(self) -> dict:
        """Draw, score and learn from one batch; write its groups and steps parts. Returns the step row."""
        cfg = self.cfg
        step = self.last_step + 1
        t0 = time.perf_counter()
        with self.amp():
            draw: Draw = self.sampler.draw(self._draw_round, cfg.prompts_per_step)
        t1 = time.perf_counter()
        losses = dict.fromkeys(("loss", "pg_loss", "kl", "clip_frac", "grad_norm"), float("nan"))  # no update
        if draw.units:
            batch, trains = training_batch(draw.units, self.tokenizer.pad_token_id)  # trains: (N_pooled,) bool
            adv = unit_advantages(draw.units, cfg.algo.std, cfg.algo.std_eps, self.device)  # (N_pooled,)
            adv = adv[torch.from_numpy(trains).to(adv.device)]  # (N,) baselines from every sample, rows that train
            with self.amp():
                losses = update(self.model, self.ref, self.optimizer, batch, adv, cfg)
        t2 = time.perf_counter()

        run_id = self.record.run_id
        groups = group_rows(run_id, step, draw.groups, self.counters)
        correct = np.concatenate([g.correct for g in draw.groups]) if draw.groups else np.zeros(0, bool)
        rewards = np.concatenate([g.rewards for g in draw.groups]) if draw.groups else np.zeros(0)
        row = dict(run_id=run_id, step=step, **losses, lr=cfg.algo.lr, reward_mean=_mean(rewards),
                   accuracy=_mean(correct), tie_frac=_mean([g.tie for g in draw.groups]), groups=len(groups),
                   samples=int(correct.size), **self.counters, skipped_prompts=draw.skipped,
                   t_rollout=t1 - t0, t_update=t2 - t1, t_total=time.perf_counter() - t0)
        write_part(self.run_dir, "groups", step, groups)
        write_part(self.run_dir, "steps", step, [row])
        self.last_step = step
        if draw.exhausted:
            raise SamplerExhausted(f"{draw.exhausted}. Stopped at step {step}; the tables so far are whole.")
        return row

    def checkpoint(self) -> None:
        state = {**self.counters, "sampler": self.sampler.state_dict()}
        save_checkpoint(self.run_dir, self.last_step, self.model, self.optimizer, self.generator, state)

    def budget_spent(self) -> bool:
        c = self.cfg
        return ((c.max_samples is not None and self.counters["samples_total"] >= c.max_samples)
                or (c.max_tokens is not None and self.counters["tokens_total"] >= c.max_tokens))

    def run(self) -> str | None:
        """Train to max_steps or the sample/token budget. Returns why it stopped early, or None."""
        cfg = self.cfg
        if self.last_step == 0:
            self.evaluate(0)
        while self.last_step < cfg.max_steps and not self.budget_spent():
            try:
                step = self.step()["step"]
            except SamplerExhausted as stop:  # a clean end: evaluate and save what was learned so far
                print(f"grpo-lab: {stop}", file=sys.stderr)
                self.evaluate(self.last_step)
                self.checkpoint()
                return str(stop)
            last = step == cfg.max_steps or self.budget_spent()
            at_eval = last or (cfg.eval.every and step % cfg.eval.every == 0)
            if at_eval:  # before the checkpoint: a run killed in between redoes both on resume
                self.evaluate(step)
            if at_eval or step % cfg.checkpoint_every == 0:
                self.checkpoint()


def _mean(values) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def train(cfg: TrainConfig) -> Path:
    """Run (or resume) one GRPO job into cfg.out_dir. Returns the run directory."""
    validate(cfg)
    run_dir = Path(cfg.out_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    record = RunRecord(run_dir, cfg.seed)
    record.update()
    try:
        stopped = Trainer(cfg, record).run()
    except BaseException as e:
        record.update(status="failed", finished=_now(), error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc(limit=20))
        raise
    record.update(status="done", finished=_now(), stopped=stopped)
    return run_dir
