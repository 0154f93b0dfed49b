"""Plain references the tests compare fast paths against (shared by several test files)."""

from pathlib import Path

import torch

from grpo_lab.model.forward import token_logprobs
from grpo_lab.rollout.generate import Rollout
from grpo_lab.run.tables import read_table


def plain_logprobs(model, ro: Rollout, temperature: float) -> torch.Tensor:
    """Each of the N sequences run in full (its prompt repeated G times), no cache, full logits."""
    g = ro.group_size
    ids = torch.cat([ro.prompt_ids.repeat_interleave(g, 0), ro.completion_ids], 1)
    mask = torch.cat([ro.prompt_mask.repeat_interleave(g, 0), torch.ones_like(ro.completion_ids)], 1)
    pos = (mask.cumsum(-1) - 1).clamp_min(0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    p = ro.prompt_ids.shape[1]
    return token_logprobs(logits[:, p - 1:-1], ro.completion_ids, temperature).masked_fill(~ro.completion_mask, 0.0)


def assert_same_rows(full: Path, resumed: Path, tables=("groups", "eval")) -> None:
    """A resumed run's table rows equal an uninterrupted run's (run ids aside)."""
    for table in tables:
        a = read_table(full, table).drop_columns(["run_id"]).to_pylist()
        b = read_table(resumed, table).drop_columns(["run_id"]).to_pylist()
        assert len(a) > 0 and a == b, table
