"""Held-out estimators per prompt: unbiased pass@k (Chen et al., 2021) and exact majority-vote cons@k,
for one prompt or for every prompt of every checkpoint of every job at once."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import lru_cache

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike
from scipy.special import comb

from analysis.stats.binomial import comb_ratio

METRICS = ("pass@k", "cons@k")
PROMPT_KEYS = ("job", "step", "prompt_id", "difficulty")  # one eval prompt at one checkpoint


class BudgetMismatch(ValueError):
    """Two results were asked to be compared at different k or sampling settings."""


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> np.ndarray:
    """Unbiased pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k) (Chen et al., 2021).

    The ratio is taken in log space, so large n neither overflows nor loses precision.

    >>> print(f"{pass_at_k(4, 1, 2):.3f}")  # one right in four; two draws find it half the time
    0.500
    """
    n, c, k = np.broadcast_arrays(*(np.asarray(x) for x in (n, c, k)))
    if (bad := np.flatnonzero((k > n) | (k < 1))).size:
        raise ValueError(f"k must be within 1..n, got k={k.ravel()[bad[0]]} with n={n.ravel()[bad[0]]}")
    return 1.0 - comb_ratio(n - c, n, k)


def cons_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """Expected majority-vote accuracy of k samples drawn without replacement from the n given.

    Exact over all k-subsets. A missing answer (None) never wins; when several answers tie for
    the most votes, each wins with equal chance. An answer counts as correct with the fraction
    of its samples marked correct (1 or 0 when the marks agree, as they should).

    >>> cons_at_k(["7", "7", "8", None], [True, True, False, False], 1)
    0.5
    """
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"k must be within 1..n, got k={k} with n={n}")
    return float(cons_curve(answers, correct)[k])


def cons_curve(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> np.ndarray:
    """cons@k for every k at once: element k (0..n) is `cons_at_k(answers, correct, k)`."""
    votes = pd.DataFrame({"answer": pd.Series(answers, dtype=object), "correct": np.asarray(correct, dtype=float)})
    classes = votes.dropna(subset=["answer"]).groupby("answer")["correct"].agg(["size", "mean"])
    return _cons_curve(len(votes) - int(classes["size"].sum()), _signature(classes["size"], classes["mean"]))


def _signature(counts: ArrayLike, values: ArrayLike) -> tuple[tuple[int, float], ...]:
    """Answer classes as a sorted tuple, the cache key: prompts alike up to labels share it."""
    return tuple(sorted(zip(np.asarray(counts, dtype=int).tolist(), np.asarray(values, dtype=float).tolist())))


@lru_cache(maxsize=65536)
def _cons_curve(n_none: int, classes: tuple[tuple[int, float], ...]) -> np.ndarray:
    """Expected majority-vote accuracy for k = 0..n; `classes` holds (votes, correctness) per answer.

    For each winning count t, a product over answers of generating polynomials counts the
    k-subsets in which no answer has more than t votes: P[t, d, s] counts subsets of size d
    with s answers at exactly t votes, and Q[t, d, s] sums the correctness of those s answers
    over the same subsets (the first-order term when a tied answer is weighted 1 + eps*value).
    A subset whose top answers are those s scores their correctness sum / s.
    """
    n = n_none + sum(m for m, _ in classes)
    if not classes:
        return np.zeros(n + 1)
    r = len(classes)
    t = np.arange(1, max(m for m, _ in classes) + 1)[:, None, None]  # (T, 1, 1) winning counts
    lag = np.arange(n + 1)[:, None] - np.arange(n + 1)[None, :]  # (n+1, n+1) votes drawn: d - d'
    P = np.zeros((len(t), n + 1, r + 1))  # (T, subset size, answers at t)
    P[:, : n_none + 1, 0] = comb(n_none, np.arange(n_none + 1))  # missing answers: any number drawn
    Q = np.zeros_like(P)
    for votes, value in classes:
        # multiplying by this answer's polynomial is a matrix product along the subset size:
        # drawing x < t of its votes keeps s, drawing exactly t adds one answer at the top
        ways = np.where((lag >= 0) & (lag <= votes), comb(votes, np.clip(lag, 0, votes)), 0.0)  # (n+1, n+1)
        below = ways * (lag < t)  # (T, n+1, n+1)
        equal = ways * (lag == t)
        top_p, top_q = equal @ P, equal @ (Q + value * P)
        P, Q = below @ P, below @ Q
        P[..., 1:] += top_p[..., :-1]
        Q[..., 1:] += top_q[..., :-1]
    share = np.r_[0.0, 1.0 / np.arange(1, r + 1)]  # 1/s; s = 0 means no answer reached t
    return (Q * share).sum(axis=(0, 2)) / comb(n, np.arange(n + 1))


def per_prompt(eval: pd.DataFrame, ks: Sequence[int], metrics: Sequence[str] = METRICS) -> pd.DataFrame:
    """pass@k / cons@k of each prompt at each checkpoint of each job: columns PROMPT_KEYS, n,
    then one per metric and k ("pass@4"). Every k must be within every prompt's n samples."""
    if unknown := set(metrics) - set(METRICS):
        raise ValueError(f"metrics {sorted(unknown)}: must be among {', '.join(METRICS)}")
    code = eval.groupby(list(PROMPT_KEYS), observed=True, sort=False).ngroup().to_numpy()  # (rows,) each one's prompt
    first = np.unique(code, return_index=True)[1]
    out = eval.iloc[first][list(PROMPT_KEYS)].reset_index(drop=True)
    n = np.bincount(code)
    c = np.bincount(code, weights=eval["correct"].to_numpy(float))
    if max(ks) > n.min():
        raise BudgetMismatch(f"k={max(ks)} is more than the {n.min()} samples some prompts have")
    out["n"] = n
    if "pass@k" in metrics:
        for k in ks:
            out[f"pass@{k}"] = pass_at_k(n, c, k)
    if "cons@k" in metrics:
        curves = _cons_curves(code, eval["answer"], eval["correct"], n)
        for k in ks:
            out[f"cons@{k}"] = curves[:, k]
    return out


def _cons_curves(code: np.ndarray, answers: pd.Series, correct: pd.Series, n: np.ndarray) -> np.ndarray:
    """cons_curve of each prompt (rows: prompt codes 0.., columns: k up to the smallest n), from
    vote counts per answer. Prompts alike up to the answers' labels (the same votes and correctness
    per answer, the same missing answers) share one curve: the only loop is over those patterns."""
    votes = pd.DataFrame({"code": code, "answer": answers, "correct": correct.to_numpy(float)})
    # one row per (prompt, answer); a missing answer is no row
    classes = votes.groupby(["code", "answer"], observed=True)["correct"].agg(["size", "mean"]).reset_index()
    prompt, size, mean = (classes[c].to_numpy() for c in ("code", "size", "mean"))
    order = np.lexsort((mean, size, prompt))  # by prompt, then as `_signature` sorts a prompt's classes
    prompt, size, mean = prompt[order], size[order], mean[order]
    per_prompt = np.bincount(prompt, minlength=len(n))
    widest = int(per_prompt.max(initial=0))
    position = np.arange(len(prompt)) - np.r_[0, np.cumsum(per_prompt)][prompt]  # (classes,) place in its prompt
    # (prompts, 1 + 2 * widest): missing answers, each class's votes, each class's correctness; -1 pads
    pattern = np.full((len(n), 1 + 2 * widest), -1.0)
    pattern[:, 0] = n - np.bincount(prompt, weights=size, minlength=len(n))
    pattern[prompt, 1 + position] = size
    pattern[prompt, 1 + widest + position] = mean
    distinct, which = np.unique(pattern, axis=0, return_inverse=True)
    curves = np.empty((len(distinct), n.min() + 1))
    for i, row in enumerate(distinct):
        r = int((row[1:1 + widest] >= 0).sum())
        classes_i = tuple(zip(row[1:1 + r].astype(int).tolist(), row[1 + widest:1 + widest + r].tolist()))
        curves[i] = _cons_curve(int(row[0]), classes_i)[: n.min() + 1]
    return curves[which.reshape(-1)]


def default_ks(n: int) -> list[int]:
    """Powers of two up to n, and n itself."""
    return sorted({2**i for i in range(n.bit_length()) if 2**i <= n} | {n})


def score_column(metric: str, k: int) -> str:
    """The column of a per_prompt frame holding `metric` at k: "pass@4", "cons@16"."""
    return metric.replace("@k", f"@{k}")

