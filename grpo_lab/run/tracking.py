"""Metrics to the places people watch runs: one `log(metrics, step)` over backends chosen by the
`logger` config (console lines, TensorBoard, Weights & Biases). Keys are namespaced as CleanRL's:
`charts/...`, `losses/...`, `ties/<difficulty>`, `eval/pass@k/<difficulty>`. The parquet tables
stay the source of truth; these are views of the same numbers while the run goes."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Protocol

from grpo_lab.config import TrainConfig
from grpo_lab.progress import Heartbeat, duration

LOSS_KEYS = ("loss", "pg_loss", "kl", "clip_frac", "grad_norm")
CHART_KEYS = ("reward_mean", "accuracy", "tie_frac", "lr", "samples", "samples_total", "tokens_total", "t_rollout",
              "t_update", "t_total")


class Backend(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def evaluating(self, step: int) -> None: ...  # an evaluation of step's model begins (0: the base model)
    def close(self) -> None: ...


def step_metrics(row: dict, groups: list[dict]) -> dict[str, float]:
    """A step's metrics: its steps-table row, and tie fractions by kind and by difficulty from its
    groups-table rows."""
    out = {f"losses/{k}": row[k] for k in LOSS_KEYS}
    out |= {f"charts/{k}": row[k] for k in CHART_KEYS}
    out["charts/samples_per_s"] = row["samples"] / row["t_total"] if row["t_total"] > 0 else math.nan
    if groups:
        for kind in ("all_correct", "all_wrong"):
            out[f"ties/{kind}"] = sum(g["tie_kind"] == kind for g in groups) / len(groups)
        by_level: dict[str, list[bool]] = defaultdict(list)
        for g in groups:
            by_level[g["difficulty"]].append(g["tie"])
        out |= {f"ties/{d}": sum(t) / len(t) for d, t in sorted(by_level.items())}
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_metrics(rows: list[dict]) -> dict[str, float]:
    """pass@k per difficulty (and over all prompts) from eval-table rows, for k = 1, 2, 4, ... and n."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # prompt_id -> [samples, correct]
    level: dict[str, str] = {}
    for r in rows:
        counts[r["prompt_id"]][0] += 1
        counts[r["prompt_id"]][1] += bool(r["correct"])
        level[r["prompt_id"]] = r["difficulty"]
    if not counts:
        return {}
    n = min(s for s, _ in counts.values())
    ks = sorted({2**i for i in range(n.bit_length()) if 2**i <= n} | {n})
    out = {}
    for d in sorted(set(level.values())) + ["all"]:
        prompts = [counts[p] for p in counts if d in ("all", level[p])]
        for k in ks:
            out[f"eval/pass@{k}/{d}"] = sum(pass_at_k(s, c, k) for s, c in prompts) / len(prompts)
    return out


class Console:
    """A line a person can read, the first step and then at most every `every_s` seconds (and every
    `every` steps): step, samples drawn against the budget, reward, ties by kind, KL, clip fraction,
    grad norm, speed and the ETA to whichever limit comes first. A heartbeat fills long silences, naming what
    runs: a step, or an evaluation (`evaluating`, until its metrics are logged). The speed (s/step, samples/s, and
    the ETA at it) is training's: the evaluations' time is left out of it."""

    def __init__(self, cfg: TrainConfig, first_step: int):
        self.cfg = cfg
        # in a sweep, jobs share one console: each line says whose it is
        self._who = f"[{cfg.logger.name}] " if cfg.logger.group and cfg.logger.name else ""
        self.heartbeat = Heartbeat(prefix=self._who)
        self.heartbeat.set(f"in step {first_step}")
        limits = [f"max_steps={cfg.max_steps}"] + [f"{k}={getattr(cfg, k):,}" for k in ("max_samples", "max_tokens")
                                                    if getattr(cfg, k) is not None]
        self.heartbeat.say("%sstarting at step %d (%s)%s", self._who, first_step, ", ".join(limits),
                           "; evaluating the base model first" if first_step == 1 and cfg.eval.n else "")
        self._last_time, self._last_step, self._last_samples, self._lines = time.monotonic(), first_step - 1, 0.0, 0
        self._eval_start: float | None = None  # when the evaluation under way began
        self._eval_s = 0.0  # seconds spent evaluating since the last step line

    def evaluating(self, step: int) -> None:
        """An evaluation of step `step`'s model begins (0: the base model): the heartbeat names it, its time is kept
        out of the next step line's speed."""
        self.heartbeat.set("evaluating the base model" if step == 0 else f"in the evaluation after step {step}")
        self._eval_start = time.monotonic()

    def log(self, metrics: dict[str, float], step: int) -> None:
        if "charts/samples_total" not in metrics:  # an evaluation
            self._eval_line(metrics, step)
            return
        self.heartbeat.set(f"in step {step + 1}")
        now = time.monotonic()
        every = self.cfg.logger.every
        if self._lines and now - self._last_time < self.cfg.logger.every_s and not (every and step % every == 0):
            return
        samples = metrics["charts/samples_total"]
        if self._lines:  # wall clock since the last line: checkpoints included, evaluations not
            seconds, steps, drawn = now - self._last_time, step - self._last_step, samples - self._last_samples
            seconds = max(seconds - self._eval_s, 1e-9)
        else:  # the first line: this step alone (the clock so far also holds loading and the base eval)
            seconds, steps, drawn = metrics["charts/t_total"], 1, metrics["charts/samples"]
        self._last_time, self._last_step, self._last_samples, self._eval_s = now, step, samples, 0.0
        self._lines += 1
        self.heartbeat.say("%s", self._step_line(metrics, step, seconds / max(steps, 1), drawn / max(seconds, 1e-9)))

    def _step_line(self, m: dict[str, float], step: int, s_per_step: float, samples_per_s: float) -> str:
        c = self.cfg
        budget = f"/{c.max_samples:,}" if c.max_samples is not None else ""
        parts = [f"step {step}/{c.max_steps}", f"samples {int(m['charts/samples_total']):,}{budget}",
                 f"reward {m['charts/reward_mean']:.3f}",
                 f"ties {m['charts/tie_frac']:.2f} (all-correct {m.get('ties/all_correct', math.nan):.2f}, "
                 f"all-wrong {m.get('ties/all_wrong', math.nan):.2f})",
                 f"kl {m['losses/kl']:.4g}", f"clip {m['losses/clip_frac']:.3f}", _grad_text(m["losses/grad_norm"]),
                 f"{s_per_step:.2f} s/step, {samples_per_s:,.0f} samples/s"]
        left = [(c.max_steps - step) * s_per_step]  # seconds to each limit at the current speed
        if c.max_samples is not None and samples_per_s > 0:
            left.append((c.max_samples - m["charts/samples_total"]) / samples_per_s)
        if c.max_tokens is not None and m["charts/tokens_total"] > 0 and samples_per_s > 0:
            tokens_per_sample = m["charts/tokens_total"] / m["charts/samples_total"]
            left.append((c.max_tokens - m["charts/tokens_total"]) / (samples_per_s * tokens_per_sample))
        parts.append(f"ETA {duration(min(left))}")
        return self._who + " | ".join(parts)

    def _eval_line(self, m: dict[str, float], step: int) -> None:
        if self._eval_start is not None:
            self._eval_s += time.monotonic() - self._eval_start
            self._eval_start = None
        self.heartbeat.set(f"in step {step + 1}")
        acc = {k.rsplit("/", 1)[1]: v for k, v in m.items() if k.startswith("eval/pass@1/")}
        overall = acc.pop("all", math.nan)
        levels = ", ".join(f"{d} {v:.2f}" for d, v in acc.items())
        self.heartbeat.say("%seval at step %d: accuracy %.3f (by difficulty: %s)", self._who, step, overall, levels)

    def close(self) -> None:
        self.heartbeat.close()


class TensorBoard:
    """Scalars to `<run>/tensorboard/`. On resume, events past the checkpoint are purged, as the
    tables' parts are, so the redrawn steps do not appear twice."""

    def __init__(self, run_dir: Path, first_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"), flush_secs=10,
                                    purge_step=first_step if first_step > 1 else None)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            if math.isfinite(value):
                self.writer.add_scalar(key, value, step)

    def evaluating(self, step: int) -> None:
        pass

    def close(self) -> None:
        self.writer.close()


class WandB:
    """A W&B run in `<run>/wandb/`, id = the run id (a resumed job continues its W&B run). Offline
    mode comes from `logger.wandb_mode` or, when that is null, wandb's own WANDB_MODE."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, run_id: str):
        import wandb

        lg = cfg.logger
        self.run = wandb.init(project=lg.project, name=lg.name or run_id, group=lg.group, id=run_id, resume="allow",
                              dir=str(run_dir), mode=lg.wandb_mode, config=dataclasses.asdict(cfg))

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log({k: v for k, v in metrics.items() if math.isfinite(v)}, step=step)

    def evaluating(self, step: int) -> None:
        pass

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """The one interface the trainer calls: `log(metrics, step)` to every backend, `close()` at the end."""

    def __init__(self, backends: list[Backend]):
        self.backends = backends

    def log(self, metrics: dict[str, float], step: int) -> None:
        for backend in self.backends:
            backend.log(metrics, step)

    def evaluating(self, step: int) -> None:
        """An evaluation of step `step`'s model begins (0: the base model); its metrics are `log`ged when it ends."""
        for backend in self.backends:
            backend.evaluating(step)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


def build_tracker(cfg: TrainConfig, run_dir: Path, run_id: str, first_step: int = 1) -> Tracker:
    """The backends named in cfg.logger.backends. `first_step`: the next step to run (> 1 on resume)."""
    made: dict[str, Backend] = {}
    for name in cfg.logger.backends:
        if name == "console":
            made[name] = Console(cfg, first_step)
        elif name == "tensorboard":
            made[name] = TensorBoard(Path(run_dir), first_step)
        elif name == "wandb":
            made[name] = WandB(cfg, Path(run_dir), run_id)
    return Tracker(list(made.values()))


def _grad_text(norm: float) -> str:
    """The step line's gradient norm; NaN is a step where every group tied: nothing to learn, no optimizer step."""
    return "no update (every group tied)" if math.isnan(norm) else f"grad {norm:.3g}"
