"""Standalone evaluation of a run directory (experiments.evaluate): the base model and saved checkpoints, n
samples per held-out prompt each, written as eval parts beside the run's own (grpo_lab/run/evaluations.py).

A writer like training: everything that can refuse is checked before any model loads (`plan_evaluation`, one
line naming the key, step or file): the values (the bounds training's config has), the steps and every
requested checkpoint's weight files, the memory its rows will take, and rows of the same settings already there
(replaced only with overwrite=true; rows of other settings are never touched). Each part is written whole
under a temporary name and renamed, so a killed evaluation leaves every old part as it was and no half part.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_lab.config import MAX_SAMPLES_PER_STEP, MAX_TEMPERATURE, MIN_TEMPERATURE
from grpo_lab.config.checks import check_memory
from grpo_lab.errors import ConfigError, InputError, require
from grpo_lab.jobs.loading import load_task_and_policy
from grpo_lab.model.files import ModelFileError
from grpo_lab.model.load import amp, amp_dtype
from grpo_lab.model.lora import add_adapters
from grpo_lab.rollout.engines import build_engine, check_engine
from grpo_lab.rollout.evaluation import BASE_REPLIES, evaluate
from grpo_lab.run.checkpoints import (
    TOTALS,
    check_checkpoint,
    checkpoint_dir,
    checkpoint_steps,
    checkpoint_totals,
    load_weights,
)
from grpo_lab.run.evaluations import EvalSetting, existing_rows, record_evaluation, setting_tag
from grpo_lab.run.guards import RunLock
from grpo_lab.run.record import git_state
from grpo_lab.run.tables import write_part
from grpo_lab.tasks import build_task

MAX_N = MAX_SAMPLES_PER_STEP  # samples per prompt, as eval.n: pass@k is known for every k up to it


@dataclass(frozen=True)
class Plan:
    """What an evaluation will do, decided before any model loads: the steps (ascending), the settings, the part
    tag (None: the run's own parts), the steps whose rows of these settings it replaces (overwrite=true), and the
    samples and tokens the run had drawn at each step (read before: an unsafe state.pt is refused before any work)."""

    steps: list[int]
    setting: EvalSetting
    tag: str | None
    replaces: list[int]
    drawn: dict[int, dict]


def check_values(n: object, temperature: object, steps: object, overwrite: object) -> None:
    """The evaluation's own values, bounded as training's config bounds eval.n and the temperatures (ConfigError,
    one line naming the key); n or temperature None: not given (the run's own, checked once known)."""
    if n is not None:
        require(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_N, "n", n,
                f"must be in [1, {MAX_N:,}] (samples per held-out prompt)")
    if temperature is not None:
        require(isinstance(temperature, (int, float)) and not isinstance(temperature, bool), "temperature",
                temperature, "must be a number")
        require(math.isfinite(temperature), "temperature", temperature, "must be a finite number")
        require(temperature == 0 or MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE, "temperature", temperature,
                f"must be 0 (greedy) or in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE:g}]: below {MIN_TEMPERATURE} one "
                "token takes all the probability within float rounding, so the n samples are one answer; past "
                f"{MAX_TEMPERATURE:g} every token is about as likely as any other")
    if steps is not None:
        require(isinstance(steps, list) and len(steps) > 0, "steps", steps,
                "must name at least one step, or be null (the base model and every checkpoint)")
        require(all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in steps), "steps", steps,
                "steps count from 0 (0: the base model)")
    require(isinstance(overwrite, bool), "overwrite", overwrite, "must be true or false")


def plan_evaluation(cfg, run_dir: Path, *, n: int | None = None, temperature: float | None = None,
                    steps: list[int] | None = None, overwrite: bool = False) -> Plan:
    """Check an evaluation of `run_dir` (its TrainConfig `cfg`) before anything loads, and say what it will do.
    n and temperature None: the run's own (eval.n, eval.temperature). Raises InputError (one line)."""
    check_values(n, temperature, steps, overwrite)  # what the command line gave, first
    check_engine(cfg)  # the run's rollout.engine samples its evaluations: vllm needs vLLM installed here
    available = [0] + checkpoint_steps(run_dir, resumable=False)  # weights-only checkpoints evaluate too
    wanted = available if steps is None else sorted(set(steps))  # ascending: step 0 before any checkpoint loads
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise InputError(f"steps: no checkpoint for step {missing[0]} in {run_dir} (have {available})")
    if n is None and not cfg.eval.n:
        raise ConfigError("n is required: the run evaluates nothing itself (eval.n=0, eval=none); add n=N")
    n, temperature = cfg.eval.n if n is None else n, cfg.eval.temperature if temperature is None else temperature
    check_values(n, temperature, steps, overwrite)  # the run's own, where they were not given
    for step in (s for s in wanted if s):  # every checkpoint asked for, before any is evaluated (0: the base)
        try:
            check_checkpoint(checkpoint_dir(run_dir, step), cfg.model.trust_remote_code)
        except ModelFileError as e:
            raise InputError(f"steps: checkpoint {step} cannot be evaluated: {e}") from None
    task = build_task(cfg.task)
    require(len(task.held_out) > 0, "task.eval_per_level", cfg.task.eval_per_level,
            "the run has no held-out prompts: nothing to evaluate")
    check_memory(cfg, len(task.train), len(task.held_out), eval_n=n, eval_key="n")
    setting = EvalSetting(n, temperature, 1.0, cfg.rollout.max_new_tokens)
    tag = setting_tag(cfg, setting)
    found = [(step, *there) for step in wanted if (there := existing_rows(run_dir, step, tag))]
    if found and not overwrite:
        step, path, said = found[0]
        more = f" (and step{'s' * (len(found) > 2)} {', '.join(str(s) for s, _, _ in found[1:])})" if found[1:] else ""
        raise InputError(f"step {step}{more} already has eval rows with {said} ({path.relative_to(run_dir)}); add "
                         "overwrite=true to replace them")
    drawn = {step: {} if step == 0 else checkpoint_totals(checkpoint_dir(run_dir, step)) for step in wanted}
    return Plan(wanted, setting, tag, [step for step, _, _ in found], drawn)


def evaluate_checkpoints(cfg, run_dir: Path, *, n: int | None = None, temperature: float | None = None,
                         steps: list[int] | None = None, overwrite: bool = False,
                         on_start: Callable[[Path], None] | None = None,
                         on_step: Callable[[int, list[dict]], None] | None = None) -> list[int]:
    """Standalone evaluation of a run: the base model (step 0) and saved checkpoints, n samples per held-out
    prompt each (None: the run's own eval.n and eval.temperature), each step's rows one eval part: the run's own
    part at the run's own settings, else a part tagged with the settings beside it (`plan_evaluation`). cfg: the
    run's TrainConfig. `on_start(run_dir)` runs once the lock is held, before anything is written; `on_step(step,
    rows)` once each step's part is written (`step_scores` of them: what the command prints). Every part written is
    recorded in evaluations.jsonl. Returns the steps evaluated."""
    run_dir = Path(run_dir)
    meta = run_dir / "run.json"
    if not meta.exists():
        raise FileNotFoundError(f"run_dir: {run_dir} has no run.json; is it a grpo-lab run directory?")
    with RunLock(run_dir):  # one writer: never beside a training process on the same directory
        # checked again under the lock: rows another evaluation wrote since the caller's check are refused too
        plan = plan_evaluation(cfg, run_dir, n=n, temperature=temperature, steps=steps, overwrite=overwrite)
        run_id = json.loads(meta.read_text())["run_id"]
        for tmp in (run_dir / "eval").glob(".part-*.tmp"):  # a killed writer's (we hold the lock: none is live)
            tmp.unlink(missing_ok=True)
        if on_start is not None:
            on_start(run_dir)
        git = git_state()
        task, model, tokenizer, end_ids = load_task_and_policy(cfg)  # pass-rate labels as training measured them
        device = next(model.parameters()).device  # LoRA: each checkpoint's adapters go onto the base, as trained
        model, peft = add_adapters(model, cfg.model.lora, amp_dtype(cfg.model.dtype, device))
        s = plan.setting
        # the run's own rollout.engine samples its evaluations, sized for its held-out prompts
        engine = build_engine(cfg, model, tokenizer, device, [p.prompt for p in task.held_out])
        try:
            with amp(cfg.model.dtype, device):
                for step in plan.steps:
                    if step:
                        load_weights(checkpoint_dir(run_dir, step), model if peft is None else peft)
                        engine.sync(model)
                    rows = evaluate(model, tokenizer, task.held_out, n=s.n, temperature=s.temperature,
                                    max_new_tokens=s.max_new_tokens, end_ids=end_ids,
                                    answer_kind=task.answer_kind, seed=cfg.seed, run_id=run_id, step=step,
                                    max_rows=cfg.rollout.max_rows_per_call, answer_format=task.answer_format,
                                    stop=cfg.rollout.stop, engine=engine, grader=task.grader,
                                    keep_replies=BASE_REPLIES if step == 0 else 0)  # as the training's own
                    _write_rows(run_dir, plan, step, rows, run_id, git)
                    if on_step is not None:
                        on_step(step, rows)
        finally:
            engine.close()
    return plan.steps


def _write_rows(run_dir: Path, plan: Plan, step: int, rows: list[dict], run_id: str, git) -> None:
    """One checkpoint's rows as its eval part, recorded in evaluations.jsonl."""
    for row in rows:  # what the run had drawn, taken and spent there (0 at the base model; null: not recorded)
        for key in TOTALS:
            row[key] = 0 if step == 0 else plan.drawn[step].get(key)
    path = write_part(run_dir, "eval", step, rows, plan.tag)
    record_evaluation(run_dir, process="evaluate", step=step, setting=plan.setting, part=path, rows=len(rows),
                      run_id=run_id, git=git, replaced=step in plan.replaces)


def step_scores(rows: list[dict]) -> dict[str, float]:
    """One checkpoint's scores over its held-out prompts, each prompt's n samples: pass@1 (the mean fraction
    correct), pass@n (some sample correct) and cons@n (the most frequent answer correct; answers tied for most
    share the vote, as analysis.stats.at_k counts it; no answer read: no vote), each the mean over prompts, and
    n (the fewest samples a prompt has) and prompts."""
    samples: dict[str, list[dict]] = {}
    for row in rows:
        samples.setdefault(row["prompt_id"], []).append(row)
    pass1, pass_n, cons = [], [], []
    for drawn in samples.values():
        right = [bool(r["correct"]) for r in drawn]
        pass1.append(sum(right) / len(right))
        pass_n.append(float(any(right)))
        votes: dict[str, list[bool]] = {}
        for r in drawn:
            if r["answer"] is not None:
                votes.setdefault(str(r["answer"]), []).append(bool(r["correct"]))
        most = max((len(v) for v in votes.values()), default=0)
        top = [sum(v) / len(v) for v in votes.values() if len(v) == most]  # each class's correctness
        cons.append(sum(top) / len(top) if top else 0.0)
    count = max(len(samples), 1)
    return {"pass@1": sum(pass1) / count, "pass@n": sum(pass_n) / count, "cons@n": sum(cons) / count,
            "n": min((len(v) for v in samples.values()), default=0), "prompts": len(samples)}


def scores_table(scores: dict[int, dict[str, float]]) -> str:
    """What an evaluation measured, a line a step: pass@1, pass@n, cons@n (n: the samples a prompt had), and the
    held-out prompts scored."""
    n = min((int(s["n"]) for s in scores.values()), default=0)
    head = ["step", "pass@1", f"pass@{n}", f"cons@{n}", "held-out prompts"]
    lines = [[str(step), f"{s['pass@1']:.3f}", f"{s['pass@n']:.3f}", f"{s['cons@n']:.3f}", str(int(s["prompts"]))]
             for step, s in sorted(scores.items())]
    widths = [max(len(row[i]) for row in [head, *lines]) for i in range(len(head))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [head, *lines])
