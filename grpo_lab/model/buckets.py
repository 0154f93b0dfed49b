"""Length buckets for the training passes: rows of similar length run together, each bucket padded only to its
own longest row.

A batch's completions are padded to its longest; in SmolLM2's two-shot steps 46% of the completion positions were
padding (benchmarks/RESULTS.md), and the backbone computes every one. Sorting the rows by the positions they need
and cutting them into a few buckets, each run as its own pass over the same prompt cache, skips most of that work;
a row's log-probs do not depend on the padding after it (causal attention), so the result is the one-pass result up
to the matmuls' rounding at another batch shape. The cut is the one that leaves the fewest padded positions for the
number of buckets allowed (an exact dynamic programme over the sorted widths), and a bucket is only split off when
it saves at least `MIN_SAVED` of the positions: each extra pass costs a pass's fixed overhead.
"""

from __future__ import annotations

import numpy as np
import torch

MIN_SAVED = 0.125  # a split must remove this share of the one-pass positions to pay for its pass (config.MAX_BUCKETS)


def needed_widths(mask: torch.Tensor) -> torch.Tensor:
    """(N,) how many completion positions each row's log-probs need: its last position in the loss plus one (0 for
    a row with none, which needs no pass at all)."""
    t = mask.shape[1]
    last = torch.where(mask, torch.arange(1, t + 1, device=mask.device), 0)
    return last.amax(-1) if t else torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)


def cut(widths: np.ndarray, max_buckets: int) -> list[np.ndarray]:
    """The rows (indices into `widths`) of each bucket, longest bucket first, rows of width 0 in none: the split
    of the rows sorted by width into at most `max_buckets` runs with the fewest padded positions (sum over buckets
    of rows x longest width), each bucket beyond the first kept only where it saves MIN_SAVED of one bucket's
    positions."""
    widths = np.asarray(widths, dtype=np.int64)
    order = np.argsort(-widths, kind="stable")
    order = order[widths[order] > 0]
    w = widths[order]  # descending: a bucket [i, j) costs (j - i) * w[i]
    n = len(w)
    if n == 0:
        return []
    one = n * int(w[0])
    best, start = _fewest_positions(w, max(1, min(max_buckets, n)))
    k = 0  # one more bucket only while it saves MIN_SAVED of the one-pass positions
    while k + 1 < len(best) and best[k, n] - best[k + 1, n] >= MIN_SAVED * one:
        k += 1
    if k == 0:
        return [order]
    bounds, j = [], n
    for level in range(k, -1, -1):  # walk the cuts back from the end
        i = int(start[level, j])
        bounds.append((i, j))
        j = i
    return [order[i:j] for i, j in reversed(bounds)]


def _fewest_positions(w: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """best[k, j]: the fewest positions covering the first j sorted rows with k + 1 buckets; start[k, j]: where the
    last of them starts."""
    n = len(w)
    idx = np.arange(n + 1)
    best = np.full((buckets, n + 1), np.iinfo(np.int64).max // 4, dtype=np.int64)
    start = np.zeros((buckets, n + 1), dtype=np.int64)
    best[0, 1:] = idx[1:] * w[0]
    for k in range(1, buckets):
        # last bucket [i, j): cost best[k-1, i] + (j - i) * w[i], for 1 <= i < j
        i = idx[1:n, None]
        cost = best[k - 1, 1:n, None] + (idx[None, :] - i) * w[1:n, None]  # (n-1, n+1)
        cost = np.where(idx[None, :] > i, cost, np.iinfo(np.int64).max // 4)
        pick = cost.argmin(0)
        best[k] = cost[pick, idx]
        start[k] = pick + 1
    return best, start


def inverse(order: torch.Tensor) -> torch.Tensor:
    """The permutation that undoes `order` (its argsort)."""
    out = torch.empty_like(order)
    out[order] = torch.arange(order.numel(), device=order.device)
    return out
