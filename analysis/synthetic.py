"""Synthetic runs and sweeps with known per-prompt pass rates, written in DESIGN.md's directory
layout and table schemas. Test fixtures and benchmark data: a prompt's pass rate never changes,
so the tables hold exactly the statistics that the tie prediction assumes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

SAMPLERS = ("fixed", "resample_on_tie", "dynamic", "band")


def prompt_pool(levels: Sequence[str] = ("1", "2", "3", "4", "5"), per_level: int = 32, seed: int = 0) -> pd.DataFrame:
    """Prompts with known pass rates: prompt_id, difficulty, p. Level i of L has mean pass rate
    1 - (i + 0.5) / L, Beta-distributed with concentration 4 so prompts of a level differ."""
    rng = np.random.default_rng(seed)
    mean = 1 - (np.arange(len(levels)) + 0.5) / len(levels)  # (levels,)
    p = rng.beta(4 * mean[:, None], 4 * (1 - mean[:, None]), size=(len(levels), per_level))
    return pd.DataFrame({
        "prompt_id": [f"L{lv}-{i:04d}" for lv in levels for i in range(per_level)],
        "difficulty": np.repeat(list(levels), per_level),
        "p": p.ravel(),
    })


def job_config(sampler: str = "fixed", group_size: int = 8, seed: int = 0, temperature: float = 1.0,
               max_steps: int = 40, prompts_per_step: int = 8, max_rounds: int = 4, pool: str = "all",
               band_lo: float = 0.0, band_hi: float = 1.0, eval_every_samples: int = 0) -> dict:
    """A nested job config shaped like the one Hydra composes for `experiments/train.py`."""
    return {
        "seed": seed, "max_steps": max_steps, "max_samples": None, "prompts_per_step": prompts_per_step,
        "model": {"name": "tiny", "path": None, "dtype": "auto", "device": "auto"},
        "task": {"name": "arithmetic", "levels": [1, 2, 3, 4, 5], "difficulty": "level", "path": None},
        "algo": {"lr": 1e-4, "beta": 0.04, "eps_low": 0.2, "eps_high": 0.2, "mu": 1, "std": "population",
                 "std_eps": 1e-8, "unit_weight": "prompt"},
        "sampler": {"name": sampler, "group_size": group_size, "max_rounds": max_rounds, "pool": pool,
                    "band_lo": band_lo, "band_hi": band_hi},
        "rollout": {"temperature": temperature, "max_new_tokens": 6},
        "eval": {"n": 16, "every": 0, "temperature": temperature, "every_samples": eval_every_samples},
    }


class _Stream:
    """grpo_lab.samplers.PromptStream's rule: seeded epoch permutations of the pool, taken in order."""

    def __init__(self, size: int, rng: np.random.Generator):
        self.size, self.rng, self.order = size, rng, np.zeros(0, np.int64)

    def take(self, count: int) -> np.ndarray:
        while len(self.order) < count:
            self.order = np.r_[self.order, self.rng.permutation(self.size)]
        out, self.order = self.order[:count], self.order[count:]
        return out


def simulate_groups(prompts: pd.DataFrame, cfg: dict, run_id: str) -> pa.Table:
    """The groups table of one run of `cfg` on `prompts`, drawn by the rules of grpo_lab's samplers
    (`grpo_lab/samplers/`), step by step, with every column the trainer writes:

    - fixed: B prompts, one group each, every group a unit;
    - resample_on_tie: B prompts; a tied group is drawn again (round 1, 2, ...) up to `max_rounds`
      rounds in all; `pool=all`: a prompt's rounds are one unit (all used), `pool=last`: only its
      last round trains;
    - dynamic: rounds of B fresh prompts (all round 0) until B untied groups are in hand; the first
      B train, one unit each; after `max_rounds` rounds without, the run stops (tables whole);
    - band: prompts whose last pass rate is in [band_lo, band_hi] (unseen ones are in), one pass
      over the pool at most per step, no prompt twice in a step.

    A sample's advantage is eq. 3's on its unit's pooled rewards (population std, zero where the
    std <= std_eps); `n_informative` counts its nonzero ones and `unit` is the unit's index in its step.
    """
    sampler, size = cfg["sampler"]["name"], cfg["sampler"]["group_size"]
    rounds_cap, pool = cfg["sampler"]["max_rounds"], cfg["sampler"].get("pool", "all")
    eps = cfg.get("algo", {}).get("std_eps", 1e-8)
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler {sampler!r}: must be one of {', '.join(SAMPLERS)}")
    rng = np.random.default_rng([cfg["seed"], SAMPLERS.index(sampler)])  # arms draw apart, seeds repeat
    stream = _Stream(len(prompts), np.random.default_rng([cfg["seed"], 99]))  # one prompt order per seed
    p = prompts["p"].to_numpy()
    batch = cfg["prompts_per_step"]
    rates: dict[int, float] = {}  # band: each prompt's last pass rate
    rows: list[tuple] = []  # (step, prompt, round, correct (G,), used, unit, n_informative)

    def draw(idx: np.ndarray) -> np.ndarray:
        return rng.random((len(idx), size)) < p[idx, None]  # (len(idx), G)

    for step in range(1, cfg["max_steps"] + 1):
        drawn: list[list] = []  # [prompt, round, correct, unit]
        units: list[list[int]] = []  # indices into `drawn`
        if sampler in ("fixed", "resample_on_tie"):
            idx = stream.take(batch)
            drawn = [[i, 0, c, None] for i, c in zip(idx, draw(idx))]
            history = [[j] for j in range(len(drawn))]
            pending = [j for j in range(len(drawn)) if _tied(drawn[j][2])]
            for rnd in range(1, rounds_cap if sampler == "resample_on_tie" else 1):
                if not pending:
                    break
                again = draw(np.array([drawn[j][0] for j in pending]))
                nxt = []
                for j, c in zip(pending, again):
                    drawn.append([drawn[j][0], rnd, c, None])
                    history[j].append(len(drawn) - 1)
                    if _tied(c):
                        nxt.append(j)
                pending = nxt
            units = history if sampler == "fixed" or pool == "all" else [h[-1:] for h in history]
        elif sampler == "dynamic":
            kept = []
            for _ in range(rounds_cap):
                idx = stream.take(batch)
                for i, c in zip(idx, draw(idx)):
                    drawn.append([i, 0, c, None])
                    if not _tied(c):
                        kept.append(len(drawn) - 1)
                if len(kept) >= batch:
                    units = [[j] for j in kept[:batch]]
                    break
        else:  # band
            lo, hi = cfg["sampler"].get("band_lo", 0.0), cfg["sampler"].get("band_hi", 1.0)
            chosen, scanned = [], 0
            while len(chosen) < batch and scanned < len(prompts):
                (i,) = stream.take(1)
                scanned += 1
                if i not in chosen and (i not in rates or lo <= rates[i] <= hi):
                    chosen.append(i)
            idx = np.array(chosen, dtype=np.int64)
            if not len(idx):
                break  # exhausted: the run stops
            drawn = [[i, 0, c, None] for i, c in zip(idx, draw(idx))] if len(idx) else []
            units = [[j] for j in range(len(drawn))]
            for i, c in zip(idx, (d[2] for d in drawn)):
                rates[int(i)] = float(c.mean())
        informative = np.zeros(len(drawn), np.int64)
        for u, members in enumerate(units):
            pooled = np.concatenate([drawn[j][2] for j in members]).astype(float)
            nonzero = np.abs(pooled - pooled.mean()) > 0 if pooled.std() > eps else np.zeros(len(pooled), bool)
            for n, j in enumerate(members):
                drawn[j][3] = u
                informative[j] = nonzero[n * size:(n + 1) * size].sum()
        rows += [(step, i, rnd, c, unit is not None, unit, informative[j])
                 for j, (i, rnd, c, unit) in enumerate(drawn)]
        if not units:
            break  # the real sampler reports exhaustion and the run stops here
    step, idx, rnd, correct, used, unit, n_inf = zip(*rows)
    correct = np.stack(correct)
    tokens = rng.integers(2, 7, correct.shape)
    return _groups_table(prompts.iloc[list(idx)], np.array(step), np.array(rnd), correct, tokens.sum(1), run_id,
                         np.array(used), np.array([-1 if u is None else u for u in unit]), np.array(n_inf))


def _tied(correct: np.ndarray) -> bool:
    return bool(correct.all() or not correct.any())


def _groups_table(prompts: pd.DataFrame, step: np.ndarray, rnd: np.ndarray, correct: np.ndarray,
                  tokens: np.ndarray, run_id: str, used: np.ndarray, unit: np.ndarray,
                  n_informative: np.ndarray) -> pa.Table:
    rows, size = correct.shape
    n_correct = correct.sum(1)
    tie = (n_correct == 0) | (n_correct == size)
    offsets = pa.array(np.arange(0, rows * size + 1, size, dtype=np.int32))
    return pa.table({
        "run_id": pa.array([run_id] * rows),
        "step": pa.array(step, pa.int32()),
        "prompt_id": pa.array(prompts["prompt_id"].to_numpy(object)),
        "difficulty": pa.array(prompts["difficulty"].to_numpy(object)),
        "round": pa.array(rnd, pa.int16()),
        "group_size": pa.array(np.full(rows, size), pa.int16()),
        "rewards": pa.ListArray.from_arrays(offsets, pa.array(correct.ravel().astype(np.float32))),
        "correct": pa.ListArray.from_arrays(offsets, pa.array(correct.ravel())),
        "reward_mean": pa.array(correct.mean(1), pa.float32()),
        "reward_std": pa.array(correct.std(1), pa.float32()),
        "n_correct": pa.array(n_correct, pa.int16()),
        "tie": pa.array(tie),
        "tie_kind": pa.array(np.where(tie, np.where(n_correct == size, "all_correct", "all_wrong"), None)),
        "used": pa.array(used),
        "tokens": pa.array(tokens, pa.int32()),
        "samples_total": pa.array(np.cumsum(np.full(rows, size)), pa.int64()),
        "tokens_total": pa.array(np.cumsum(tokens), pa.int64()),
        "unit": pa.array(unit, pa.int32(), mask=unit < 0),
        "n_informative": pa.array(n_informative, pa.int16()),
    })


def steps_table(groups: pa.Table) -> pa.Table:
    """Step rows summarising a groups table (losses and timings are zeros: nothing is trained)."""
    g = groups.drop_columns(["rewards", "correct", "tie_kind"]).to_pandas()
    g["correct"] = g["n_correct"].astype(float)
    per = g.groupby("step").agg(groups=("tie", "size"), tie_frac=("tie", "mean"), samples=("group_size", "sum"),
                                correct=("correct", "sum"), reward_mean=("reward_mean", "mean"),
                                samples_total=("samples_total", "max"), tokens_total=("tokens_total", "max"))
    zeros = np.zeros(len(per))
    return pa.table({
        "run_id": pa.array([groups["run_id"][0].as_py()] * len(per)), "step": pa.array(per.index, pa.int32()),
        **{name: zeros for name in ("loss", "pg_loss", "kl", "clip_frac", "grad_norm", "lr")},
        "reward_mean": per["reward_mean"].to_numpy(), "accuracy": (per["correct"] / per["samples"]).to_numpy(),
        "tie_frac": per["tie_frac"].to_numpy(), "groups": per["groups"].to_numpy(),
        "samples": per["samples"].to_numpy(), "samples_total": per["samples_total"].to_numpy(),
        "tokens_total": per["tokens_total"].to_numpy(),
        **{name: zeros for name in ("t_rollout", "t_update", "t_total")},
    })


def eval_table(prompts: pd.DataFrame, run_id: str, checkpoints: Sequence[int], n: int, seed: int,
               samples: Sequence[int] | None = None) -> pa.Table:
    """Eval rows: `n` samples per prompt per checkpoint. A correct sample answers "A"; a wrong one
    answers "B", "C" or "D" (alike more often than not, so majority votes can go wrong) or nothing.
    `samples`: samples drawn at each checkpoint (the `samples_total` column; null without)."""
    rng = np.random.default_rng(seed + 10_000)
    rows = len(checkpoints) * len(prompts) * n
    prompt = np.tile(np.repeat(np.arange(len(prompts)), n), len(checkpoints))  # (rows,)
    correct = rng.random(rows) < prompts["p"].to_numpy()[prompt]
    wrong = rng.choice(np.array(["B", "C", "D", None], dtype=object), size=rows, p=[0.5, 0.2, 0.1, 0.2])
    return pa.table({
        "run_id": pa.array([run_id] * rows),
        "step": pa.array(np.repeat(np.asarray(checkpoints), len(prompts) * n), pa.int32()),
        "prompt_id": pa.array(prompts["prompt_id"].to_numpy(object)[prompt]),
        "difficulty": pa.array(prompts["difficulty"].to_numpy(object)[prompt]),
        "sample": pa.array(np.tile(np.arange(n), rows // n), pa.int32()),
        "answer": pa.array(np.where(correct, "A", wrong)),
        "correct": pa.array(correct),
        "tokens": pa.array(rng.integers(2, 7, rows), pa.int32()),
        "samples_total": (pa.nulls(rows, pa.int64()) if samples is None
                          else pa.array(np.repeat(np.asarray(samples), len(prompts) * n), pa.int64())),
    })


def write_run(run_dir: Path, cfg: dict, tables: dict[str, pa.Table], status: str = "done",
              error: str | None = None) -> Path:
    """Write a run directory: run.json, .hydra/, and each table as one part per step."""
    hydra = run_dir / ".hydra"
    hydra.mkdir(parents=True, exist_ok=True)
    (hydra / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    overrides = [f"sampler={cfg['sampler']['name']}", f"sampler.group_size={cfg['sampler']['group_size']}",
                 f"seed={cfg['seed']}"]
    (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    run = {"run_id": run_dir.name, "status": status, "error": error, "started": "2025-01-01T00:00:00",
           "finished": None if status == "running" else "2025-01-01T01:00:00", "version": "0.1.0",
           "seed": cfg["seed"], "device": "cpu", "torch": "none"}
    (run_dir / "run.json").write_text(json.dumps(run))
    for name, table in tables.items():
        folder = run_dir / name
        folder.mkdir(exist_ok=True)
        steps = table["step"].to_numpy()  # rows are in step order
        bounds = np.flatnonzero(np.diff(steps)) + 1
        for start, stop in zip(np.r_[0, bounds], np.r_[bounds, len(steps)]):
            pq.write_table(table.slice(start, stop - start), folder / f"part-{steps[start]:06d}.parquet")
    return run_dir


def eval_steps(max_steps: int, every: int = 0, samples: Sequence[int] = (), every_samples: int = 0) -> list[int]:
    """The checkpoints the trainer evaluates: step 0, every `every` steps (0: none between), each step
    at which samples drawn (`samples[s - 1]` after step s) crossed a multiple of `every_samples`, the last step."""
    crossed = [s for s in range(1, max_steps + 1) if every_samples and
               (samples[s - 2] if s > 1 else 0) // every_samples < samples[s - 1] // every_samples]
    return sorted({0, max_steps, *(range(every, max_steps, every) if every else ()), *crossed})


def write_sweep(root: Path, configs: Sequence[dict], prompts: pd.DataFrame, overrides: Sequence[str] = (),
                eval_prompts: pd.DataFrame | None = None, eval_n: int = 16, eval_every: int = 0,
                stop_steps: Sequence[int] | None = None) -> Path:
    """Write a Hydra-style sweep: multirun.yaml and one run folder (0, 1, ...) per config. Job i
    trains `stop_steps[i]` steps (default: its `max_steps`), as where jobs of one config stop at
    an equal sample budget after different numbers of steps; its config is written unchanged.
    With `eval_prompts`, each job also gets `eval_n` eval samples per prompt at step 0, every
    `eval_every` steps (0: none between), on crossing each multiple of the config's
    `eval.every_samples`, and its last step; eval rows carry samples_total. The eval model is
    the prompts' fixed pass rates (one model, whatever the step)."""
    root.mkdir(parents=True, exist_ok=True)
    hydra = {"job": {"name": "train"}, "overrides": {"task": list(overrides)}, "sweep": {"dir": str(root)}}
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    for i, cfg in enumerate(configs):
        run_id = f"run-{i}"
        steps = stop_steps[i] if stop_steps is not None else cfg["max_steps"]
        groups = simulate_groups(prompts, {**cfg, "max_steps": steps}, run_id)
        tables = {"groups": groups, "steps": steps_table(groups)}
        if eval_prompts is not None:
            per_step = steps_table(groups)
            drawn = per_step["samples_total"].to_numpy()  # (steps,) after each step
            last = int(per_step["step"].to_numpy().max())
            checkpoints = eval_steps(last, eval_every, drawn, cfg.get("eval", {}).get("every_samples", 0))
            at = [0 if s == 0 else int(drawn[s - 1]) for s in checkpoints]
            tables["eval"] = eval_table(eval_prompts, run_id, checkpoints, eval_n, cfg["seed"], at)
        write_run(root / str(i), cfg, tables)
    return root
