"""What a reader makes of another tool's completion logs: every completion in the order the tool logged it, with
where it was read (file:line), before anything of grpo-lab's tables is made of it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

# a reader's `samples` and `held_out` frames: one row per completion, in the order logged
#   step (int), prompt (str: the prompt's text as the tool logged it; its token ids written out where it logged only
#   those), group (str: the tool's own group key, where it has one, else ""), completion (str: likewise), reward
#   (float: the reward the tool trained on), where (str: file:line), then one float column per reward function and
#   the fields the tool logged beside them, by their own names (`completion_tokens`: each completion's generated
#   token count, where the tool logged it or its token ids)
BASE = ("step", "prompt", "group", "completion", "reward", "where")


class IngestError(ValueError):
    """Logs that cannot be read into grpo-lab's tables; the message is one line naming the file:line, key or value."""


@dataclass
class Logged:
    """A tool's completion logs as read: training completions, held-out ones (empty where the tool logged none),
    and what the report's provenance says of them."""

    tool: str  # "trl", "verl", ...
    version: str | None  # the tool's version where its files record it
    source: str  # the folder read
    files: list[str]  # the files read, relative to `source`
    samples: pd.DataFrame
    held_out: pd.DataFrame
    reward_columns: list[str]  # the per-function rewards the tool summed into `reward`
    how: dict[str, str] = field(default_factory=dict)  # grouping, reward, ... -> how it was read (provenance)
    absent: list[str] = field(default_factory=list)  # what the source does not hold (provenance)
    tool_ties: dict[int, float] = field(default_factory=dict)  # step -> the tool's own logged tie fraction
    tool_steps: pd.DataFrame | None = None  # the tool's per-step metrics (loss, kl, ...), where logged
    config: dict[str, object] = field(default_factory=dict)  # config keys the logs record (open-instruct's seed)
