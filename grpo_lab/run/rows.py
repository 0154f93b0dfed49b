"""The groups table's rows: one per group a step drew (and one per earlier group it replayed), with the training
unit, the advantage each sample's update used and the informative samples read from them."""

from __future__ import annotations

import numpy as np

from grpo_lab.records import Group, Trained


def group_rows(run_id: str, step: int, groups: list[Group], counters: dict,
               trained: dict[int, Trained] | None = None, entropy: bool = False, stepped: bool = True) -> list[dict]:
    """One groups-table row per group this step drew or replayed; advances `counters` (samples, tokens) in place
    for the drawn ones only: a replayed group was drawn (and counted) at its `source_step`.
    `trained` (from `unit_columns`) gives each training group's unit and advantages; `entropy`: the rule keeps
    token entropies (NaN for samples that did not train; the columns are null otherwise). `stepped` false: no
    optimizer step took a gradient of the step's samples (algo.tied_batch=skip: no step; zero: steps on zeros), so
    no sample took a gradient and no group is recorded as
    trained (used false, n_trained 0, unit null, advantages NaN), whatever the sampler chose."""
    trained = trained if stepped and trained else {}
    rows = []
    for grp in groups:
        g = len(grp.rewards)
        done = trained.get(id(grp))
        n_correct = int(grp.correct.sum())
        tokens = grp.tokens if grp.samples is None else int(grp.samples.lengths.sum())
        if not grp.reused:
            counters["samples_total"] += g
            counters["tokens_total"] += tokens
        kind = None
        if grp.tie:
            kind = "all_correct" if n_correct == g else "all_wrong" if n_correct == 0 else "other"
        h = None if not entropy else np.full((g, 2), np.nan) if done is None or done.entropy is None else done.entropy
        rows.append(dict(
            run_id=run_id, step=step, prompt_id=grp.problem.prompt_id, difficulty=grp.problem.difficulty,
            round=grp.round, group_size=g, rewards=grp.rewards.tolist(), correct=grp.correct.tolist(),
            reward_mean=float(grp.rewards.mean(dtype=np.float64)), reward_std=float(grp.rewards.std(dtype=np.float64)),
            n_correct=n_correct, n_answered=None if grp.answered is None else int(grp.answered.sum()),
            tie=grp.tie, tie_kind=kind, used=grp.used and stepped, tokens=tokens,
            samples_total=counters["samples_total"], tokens_total=counters["tokens_total"],
            unit=None if done is None else done.unit, n_informative=0 if done is None else done.n_informative,
            n_trained=grp.n_trained if stepped else 0, rank=grp.rank,
            truncated=grp.truncated if grp.samples is None else int(grp.samples.truncated.sum()),
            advantages=(np.full(g, np.nan) if done is None else done.advantages).tolist(),
            entropy_mean=None if h is None else h[:, 0].tolist(),
            entropy_max=None if h is None else h[:, 1].tolist(),
            reused=grp.reused, source_step=grp.source_step,
            predicted_rate=None if grp.predicted_rate is None else float(grp.predicted_rate),
        ))
    return rows


def unit_columns(units: list[list[Group]], advantages: np.ndarray,
                 entropy: np.ndarray | None = None) -> dict[int, Trained]:
    """For each group of a unit (keyed by id): its unit's index in the step and its samples' advantages, read
    from the very advantages the update used, (P,) in the units' pooled order with NaN where a sample did not
    train; `entropy` (P, 2), the same for per-token rules."""
    out, start = {}, 0
    for u, unit in enumerate(units):
        for grp in unit:
            g = len(grp.rewards)
            out[id(grp)] = Trained(u, np.asarray(advantages[start:start + g], np.float32),
                                   None if entropy is None else np.asarray(entropy[start:start + g], np.float32))
            start += g
    return out
