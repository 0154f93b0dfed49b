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
               max_steps: int = 40, prompts_per_step: int = 8, max_rounds: int = 4) -> dict:
    """A nested job config shaped like the one Hydra composes for `experiments/train.py`."""
    return {
        "seed": seed, "max_steps": max_steps, "max_samples": None, "prompts_per_step": prompts_per_step,
        "model": {"name": "tiny", "path": None, "dtype": "auto", "device": "auto"},
        "task": {"name": "arithmetic", "levels": [1, 2, 3, 4, 5], "difficulty": "level", "path": None},
        "algo": {"lr": 1e-4, "beta": 0.04, "eps_low": 0.2, "eps_high": 0.2, "mu": 1, "std": "population"},
        "sampler": {"name": sampler, "group_size": group_size, "max_rounds": max_rounds, "pool": "all"},
        "rollout": {"temperature": temperature, "max_new_tokens": 6},
        "eval": {"n": 16, "every": 0, "temperature": temperature},
    }


def simulate_groups(prompts: pd.DataFrame, cfg: dict, run_id: str) -> pa.Table:
    """The groups table of one run of `cfg` (sampler, group size, seed, steps) on `prompts`.

    fixed and band draw one group per prompt; resample_on_tie redraws a tied group up to
    `max_rounds` times and trains on the last; dynamic drops tied groups (used = False).
    """
    sampler, size, rounds_cap = cfg["sampler"]["name"], cfg["sampler"]["group_size"], cfg["sampler"]["max_rounds"]
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler {sampler!r}: must be one of {', '.join(SAMPLERS)}")
    rng = np.random.default_rng([cfg["seed"], SAMPLERS.index(sampler)])  # arms draw apart, seeds repeat
    n = cfg["max_steps"] * cfg["prompts_per_step"]
    epochs = -(-n // len(prompts))
    slot_prompt = np.concatenate([rng.permutation(len(prompts)) for _ in range(epochs)])[:n]  # (n,)
    slot = np.arange(n)
    draws = []
    for rnd in range(rounds_cap + 1 if sampler == "resample_on_tie" else 1):
        correct = rng.random((len(slot), size)) < prompts["p"].to_numpy()[slot_prompt[slot], None]  # (m, G)
        draws.append((slot, np.full(len(slot), rnd), correct, rng.integers(2, 7, correct.shape)))
        n_correct = correct.sum(1)
        slot = slot[(n_correct == 0) | (n_correct == size)]  # tied: drawn again next round
    slots, rnds, correct, tokens = (np.concatenate(parts) for parts in zip(*draws))
    order = np.lexsort((rnds, slots))  # in drawing order: slot by slot, rounds in turn
    slots, rnds, correct, tokens = slots[order], rnds[order], correct[order], tokens[order]
    return _groups_table(prompts.iloc[slot_prompt[slots]], slots // cfg["prompts_per_step"], rnds, correct,
                         tokens.sum(1), run_id, sampler, rounds_cap)


def _groups_table(prompts: pd.DataFrame, step: np.ndarray, rnd: np.ndarray, correct: np.ndarray,
                  tokens: np.ndarray, run_id: str, sampler: str, rounds_cap: int) -> pa.Table:
    rows, size = correct.shape
    n_correct = correct.sum(1)
    tie = (n_correct == 0) | (n_correct == size)
    used = {"fixed": np.ones(rows, bool), "band": np.ones(rows, bool), "dynamic": ~tie,
            "resample_on_tie": ~tie | (rnd == rounds_cap)}[sampler]
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


def eval_table(prompts: pd.DataFrame, run_id: str, checkpoints: Sequence[int], n: int, seed: int) -> pa.Table:
    """Eval rows: `n` samples per prompt per checkpoint. A correct sample answers "A"; a wrong one
    answers "B", "C" or "D" (alike more often than not, so majority votes can go wrong) or nothing."""
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


def eval_steps(max_steps: int, every: int = 0) -> list[int]:
    """The checkpoints the trainer evaluates: step 0, every `every` steps (0: none between), the last step."""
    return sorted({0, max_steps, *(range(every, max_steps, every) if every else ())})


def write_sweep(root: Path, configs: Sequence[dict], prompts: pd.DataFrame, overrides: Sequence[str] = (),
                eval_prompts: pd.DataFrame | None = None, eval_n: int = 16, eval_every: int = 0,
                stop_steps: Sequence[int] | None = None) -> Path:
    """Write a Hydra-style sweep: multirun.yaml and one run folder (0, 1, ...) per config. Job i
    trains `stop_steps[i]` steps (default: its `max_steps`), as where jobs of one config stop at
    an equal sample budget after different numbers of steps; its config is written unchanged.
    With `eval_prompts`, each job also gets `eval_n` eval samples per prompt at step 0, every
    `eval_every` steps (0: none between) and its last step."""
    root.mkdir(parents=True, exist_ok=True)
    hydra = {"job": {"name": "train"}, "overrides": {"task": list(overrides)}, "sweep": {"dir": str(root)}}
    (root / "multirun.yaml").write_text(yaml.safe_dump({"hydra": hydra}))
    for i, cfg in enumerate(configs):
        run_id = f"run-{i}"
        steps = stop_steps[i] if stop_steps is not None else cfg["max_steps"]
        groups = simulate_groups(prompts, {**cfg, "max_steps": steps}, run_id)
        tables = {"groups": groups, "steps": steps_table(groups)}
        if eval_prompts is not None:
            tables["eval"] = eval_table(eval_prompts, run_id, eval_steps(steps, eval_every), eval_n, cfg["seed"])
        write_run(root / str(i), cfg, tables)
    return root
