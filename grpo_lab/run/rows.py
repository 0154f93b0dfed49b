"""The groups table's rows: one per group a step drew, with the training unit and informative samples
read from the advantages the update used."""

from __future__ import annotations

import numpy as np
import torch

from grpo_lab.samplers import Group


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
