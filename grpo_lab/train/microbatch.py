"""Micro-batches of training units for gradient accumulation.

A unit (one prompt's pooled groups) never straddles two micro-batches, and each group keeps its
prompt row, so the prompt still runs once per group. The loss of every micro-batch is taken with
the whole batch's normalisers (objective.loss_normalisers), so accumulating their gradients gives
the whole batch's gradient in every loss_agg mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpo_lab.records import Rollout
from grpo_lab.rollout.generate import concat_groups


@dataclass
class MicroBatch:
    rollout: Rollout  # its units' groups joined into one batch
    rows: slice  # its rows in the step's flattened samples (units in order, groups in order)


def plan(unit_costs: list[tuple[int, int, int, int]], max_units: int | None, max_tokens: int | None) -> list[range]:
    """Consecutive units per micro-batch. unit_costs: per unit (groups, rows, prompt width, completion
    length). A micro-batch closes before it would exceed `max_units` units or `max_tokens` padded
    positions (groups x prompt width + rows x completion length, what the passes compute); a unit
    over the token budget on its own gets a micro-batch of its own. None: no limit."""
    out: list[range] = []
    start, groups, rows, width, length = 0, 0, 0, 0, 0
    for i, (g, r, p, t) in enumerate(unit_costs):
        grown = (groups + g) * max(width, p) + (rows + r) * max(length, t)
        full = (max_units is not None and i - start >= max_units) or (max_tokens is not None and grown > max_tokens)
        if i > start and full:
            out.append(range(start, i))
            start, groups, rows, width, length = i, 0, 0, 0, 0
        groups, rows, width, length = groups + g, rows + r, max(width, p), max(length, t)
    if unit_costs:
        out.append(range(start, len(unit_costs)))
    return out


def micro_batches(units: list[list[Rollout]], pad_id: int, max_units: int | None = None,
                  max_tokens: int | None = None) -> list[MicroBatch]:
    """Split a step's units (each a list of per-group Rollouts) into micro-batches; with no limits,
    one micro-batch holding the whole step."""
    costs = [(len(u), sum(g.completion_ids.shape[0] for g in u), max(g.prompt_ids.shape[1] for g in u),
              max(int(g.lengths.max()) for g in u)) for u in units]
    out, row = [], 0
    for span in plan(costs, max_units, max_tokens):
        rows = sum(costs[i][1] for i in span)
        out.append(MicroBatch(concat_groups([g for i in span for g in units[i]], pad_id), slice(row, row + rows)))
        row += rows
    return out
