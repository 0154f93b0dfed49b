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
    """A resumed run's table rows equal an uninterrupted run's: run ids and wall-clock timings aside, NaN equal to
    NaN (a sample that did not train, a step with nothing to learn)."""
    import pandas as pd

    for table in tables:
        frames = []
        for run in (full, resumed):
            t = read_table(run, table)
            frames.append(t.drop_columns([c for c in t.column_names if c == "run_id" or c.startswith("t_")]).to_pandas())
        assert len(frames[0]) > 0, table
        pd.testing.assert_frame_equal(*frames)


def plain_grpo(rewards: list[float], eps: float = 1e-8) -> list[float]:
    """Eq. 3 for one group, a loop: (r - mean) / population std, exactly 0 for a tie."""
    g = len(rewards)
    mean = sum(rewards) / g
    sd = (sum((r - mean) ** 2 for r in rewards) / g) ** 0.5
    return [0.0 if sd <= eps else (r - mean) / sd for r in rewards]


def plain_ngrpo(rewards: list[float], max_reward: float = 1.0, eps: float = 1e-6) -> list[float]:
    """NGRPO for one group, a loop: one virtual answer of max_reward in the mean and the Bessel std."""
    both = list(rewards) + [max_reward]
    mean = sum(both) / len(both)
    sd = (sum((r - mean) ** 2 for r in both) / (len(both) - 1)) ** 0.5
    return [(r - mean) / (sd + eps) for r in rewards]


def plain_rl_zvp(advantage: float, direction: int, entropy: list[float], alpha: float) -> list[float]:
    """RL-ZVP's token advantages for one response (its tokens only), a loop."""
    if direction > 0:
        return [alpha * h for h in entropy]
    if direction < 0:
        top = max(entropy)
        return [-alpha * (top - h) for h in entropy]
    return [advantage] * len(entropy)


def both_pages(report) -> str:
    """A report's two pages as one text, REPORT.md then DETAILS.md (the second page: provenance details, every
    test, the longer sections), for tests that read a section wherever it is."""
    report = Path(report)
    details = report.parent / "DETAILS.md"
    return report.read_text() + "\n" + (details.read_text() if details.exists() else "")
