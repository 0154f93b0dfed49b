"""How each eval row was sampled, and the one setting per job every held-out statistic is computed within.

Rows record their sampling settings (`n`, `temperature`, `top_p`, `max_new_tokens`: grpo_lab's eval table);
rows written before they did are read as their job's config says its evaluation sampled (`eval.temperature`,
`rollout.max_new_tokens`, top_p 1), with n counted from their samples. A job may hold several evaluations
(`experiments.evaluate` at another temperature writes beside the run's own): per job the report keeps the
run's own settings (its config's eval block) where it has rows at them, else the settings most of its
checkpoints were evaluated at. Every other evaluation is left out, each named (`OtherSetting`, listed with
the skipped parts) and said in one line, so no statistic pools or compares rows of two settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from analysis.data.load import Skipped, Tables

STORED = ("n", "temperature", "top_p", "max_new_tokens")  # the eval table's columns
# the same, as the report's eval rows carry them: `temperature` is load's alias of rollout.temperature
SETTINGS = ("eval_n", "eval_temperature", "eval_top_p", "eval_max_new_tokens")


@dataclass(frozen=True)
class OtherSetting(Skipped):
    """A job's evaluation left out of the held-out results: its `setting` text and the `steps` it covers."""

    job: str = ""
    setting: str = ""
    steps: tuple[int, ...] = ()
    # its rows, left out of every held-out statistic: what it measured is shown under its settings, never pooled
    rows: pd.DataFrame | None = field(default=None, compare=False, repr=False)


def setting_text(n: float, temperature: float, top_p: float, max_new_tokens: float) -> str:
    """"n=16 temperature=1 top_p=1 max_new_tokens=6", each float as its shortest float32 text ("?": not known)."""
    def short(x: float) -> str:
        return "?" if np.isnan(x) or x < 0 else np.format_float_positional(np.float32(x), trim="-")

    def whole(x: float) -> str:
        return "?" if np.isnan(x) or x < 0 else str(int(x))

    return f"n={whole(n)} temperature={short(temperature)} top_p={short(top_p)} max_new_tokens={whole(max_new_tokens)}"


def _aligned(eval: pd.DataFrame, jobs: pd.DataFrame) -> pd.DataFrame:
    """The jobs table in the order of the eval rows' `job` categories (row i: the job of code i)."""
    names = eval["job"].cat.categories.astype(str)
    return jobs.set_index(jobs["job"].astype(str).to_numpy()).reindex(names)


def _config(jobs: pd.DataFrame, key: str, default: float) -> np.ndarray:
    """(jobs,) a numeric config key's value per job, `default` where it is missing."""
    if key not in jobs:
        return np.full(len(jobs), default)
    return pd.to_numeric(jobs[key], errors="coerce").fillna(default).to_numpy(float)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(np.float32).astype(np.float64)  # compared as stored


def with_settings(eval: pd.DataFrame, jobs: pd.DataFrame, own: Sequence[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """`eval` with the SETTINGS columns (each row's, config-filled where it recorded none; -1 where neither
    says) in place of the stored ones (`own`: the table's own columns; an alias they shadowed, `temperature`,
    restored), and (rows,) whether each row recorded its settings."""
    jobs = _aligned(eval, jobs)
    code = eval["job"].cat.codes.to_numpy()
    stored = {c: pd.to_numeric(eval[c], errors="coerce").to_numpy(float) if c in own else np.full(len(eval), np.nan)
              for c in STORED}
    recorded = ~np.isnan(stored["n"])
    legacy = ~recorded
    step = eval["step"].to_numpy(np.int64)
    counted = np.zeros(len(eval))
    if legacy.any():  # n of rows that recorded none: the most samples a prompt has at their (job, step)
        job_step = pd.factorize(code.astype(np.int64) * (int(step.max()) + 1) + step)[0][legacy]
        prompts = eval["prompt_id"]
        prompt = (prompts.cat.codes.to_numpy() if isinstance(prompts.dtype, pd.CategoricalDtype)
                  else pd.factorize(prompts.to_numpy())[0]).astype(np.int64)[legacy]
        cell = pd.factorize(job_step.astype(np.int64) * (int(prompt.max()) + 2) + prompt + 1)[0]
        samples = np.bincount(cell)  # rows of each (job, step, prompt)
        most = np.zeros(int(job_step.max()) + 1, np.int64)
        np.maximum.at(most, job_step, samples[cell])
        counted[legacy] = most[job_step]
    fill = {"n": counted, "temperature": _f32(_config(jobs, "eval.temperature", -1.0))[code],
            "top_p": np.ones(len(eval)), "max_new_tokens": _config(jobs, "rollout.max_new_tokens", -1.0)[code]}
    columns = {name: np.where(np.isnan(stored[c]), fill[c], stored[c] if c in ("n", "max_new_tokens") else
                              _f32(stored[c])) for name, c in zip(SETTINGS, STORED)}
    out = eval.drop(columns=[c for c in STORED if c in own]).assign(**columns)
    if "temperature" in own and "temperature" in jobs:  # load's alias, shadowed by the table's column
        per_job = pd.Categorical(jobs["temperature"])
        out["temperature"] = pd.Categorical.from_codes(per_job.codes[code], dtype=per_job.dtype, validate=False)
    return out, recorded


def one_setting(tables: Tables) -> Tables:
    """`tables` with each job's eval rows at one setting (the run's own where it has rows there, else its most
    evaluated), the others left out and added to `skipped` as `OtherSetting`s (the report names them); rows that
    recorded no settings at a step where rows of the same settings did are left out too (the same evaluation's
    older copy). The eval rows carry SETTINGS; `own["eval"]` names them in place of the stored columns."""
    own = tables.own.get("eval", ())
    if tables.eval.empty or "job" not in tables.eval:
        return tables
    eval, recorded = with_settings(tables.eval, tables.jobs, own)
    code = eval["job"].cat.codes.to_numpy().astype(np.int64)
    step = eval["step"].to_numpy(np.int64)
    # each row's (job, setting) as one id: the few distinct values of each column factorized, then combined
    key = code
    for column in SETTINGS:
        at, values = pd.factorize(eval[column].to_numpy(float))
        key = key * (len(values) + 1) + at
    group = pd.factorize(key)[0]  # ids in order of first appearance
    first = np.unique(group, return_index=True)[1]  # (groups,) a row of each
    found = np.column_stack([code[first], eval[list(SETTINGS)].to_numpy(float)[first]])  # (groups, 1 + 4)
    pairs = _pairs(group, step)  # (pairs, 2) each distinct (group, step)
    steps_in = np.bincount(pairs[:, 0], minlength=len(found))
    last = np.full(len(found), -1)
    np.maximum.at(last, pairs[:, 0], pairs[:, 1])
    mine = _own_settings(_aligned(eval, tables.jobs))
    keep = np.zeros(len(found), bool)  # per (job, setting): the job's chosen one
    for job in np.unique(found[:, 0]).astype(int):
        options = np.flatnonzero(found[:, 0] == job)
        ranked = [(bool(np.array_equal(found[i, 1:], mine[job])), steps_in[i], last[i], found[i, 1], -found[i, 2], i)
                  for i in options]
        keep[max(ranked)[-1]] = True
    kept = keep[group]
    older = np.zeros(len(eval), bool)
    if recorded.any() and not recorded.all():  # the chosen rows that recorded none, where rows that did share a step
        job_step = code * (int(step.max()) + 1) + step
        older = kept & ~recorded & np.isin(job_step, job_step[kept & recorded])
    skipped = list(tables.skipped) + _left_out(eval, found, pairs, keep, older, group)
    eval = eval[kept & ~older].reset_index(drop=True)
    own = tuple(c for c in own if c not in STORED) + SETTINGS
    return replace(tables, eval=eval, skipped=skipped, own={**tables.own, "eval": own})


def _pairs(group: np.ndarray, step: np.ndarray) -> np.ndarray:
    """(pairs, 2) the distinct (group, step) of the rows."""
    width = int(step.max()) + 1
    values = pd.unique(group.astype(np.int64) * width + step)
    return np.column_stack([values // width, values % width])


def _own_settings(jobs: pd.DataFrame) -> np.ndarray:
    """(jobs, 4) the settings each job's own evaluation samples at (its config's eval block); NaN n where it
    evaluates nothing itself or its config does not say."""
    n = _config(jobs, "eval.n", np.nan)
    return np.column_stack([np.where(n > 0, n, np.nan), _f32(_config(jobs, "eval.temperature", -1.0)),
                            np.ones(len(jobs)), _config(jobs, "rollout.max_new_tokens", -1.0)])


def _left_out(eval: pd.DataFrame, found: np.ndarray, pairs: np.ndarray, keep: np.ndarray,
              older: np.ndarray, group: np.ndarray) -> list[OtherSetting]:
    """An OtherSetting for each job's evaluation left out: the settings not chosen, and older copies."""
    names = eval["job"].cat.categories.astype(str)
    out = []
    for i in np.flatnonzero(~keep):
        job, text = names[int(found[i, 0])], setting_text(*found[i, 1:])
        chosen = next(j for j in np.flatnonzero(keep) if found[j, 0] == found[i, 0])
        steps = tuple(sorted(int(s) for s in pairs[pairs[:, 0] == i, 1]))
        out.append(OtherSetting(f"{job}/eval ({text})", f"an evaluation at other settings than the "
                                f"{setting_text(*found[chosen, 1:])} the job's held-out results use (step"
                                f"{'s' * (len(steps) > 1)} {', '.join(map(str, steps))}): left out, never pooled or "
                                "compared with them; its scores are shown under its settings", job=job, setting=text,
                                steps=steps, rows=eval[group == i].reset_index(drop=True)))
    if older.any():
        rows = eval[older]
        for job, part in rows.groupby(rows["job"].astype(str), sort=False):
            text = setting_text(*part[list(SETTINGS)].iloc[0].to_numpy(float))
            steps = tuple(sorted(int(s) for s in part["step"].unique()))
            out.append(OtherSetting(f"{job}/eval (older rows, {text})", "rows that recorded no settings, at step"
                                    f"{'s' * (len(steps) > 1)} {', '.join(map(str, steps))} where rows of the same "
                                    "settings recorded them: the newer rows are used", job=job, setting=text,
                                    steps=steps))
    return out


def left_out_line(tables: Tables) -> str | None:
    """The Findings' line naming the evaluations left out (`one_setting`), by settings; None when none was."""
    other = [s for s in tables.skipped if isinstance(s, OtherSetting)]
    if not other:
        return None
    by_setting: dict[str, list[str]] = {}
    for s in other:
        by_setting.setdefault(s.setting, []).append(s.job)
    listed = "; ".join(f"{setting} (job{'s' * (len(set(j)) > 1)} {', '.join(dict.fromkeys(j))})"
                       for setting, j in by_setting.items())
    return (f"**Evaluations left out**: held-out results compare each job at one evaluation setting (the run's own "
            f"where it has rows there); {len(other)} other evaluation{'s' * (len(other) > 1)} of the same jobs "
            f"{'were' if len(other) > 1 else 'was'} left out, never pooled or compared: {listed}; what each measured, "
            "under its own settings: Held-out results (tables/evaluations.csv).")
