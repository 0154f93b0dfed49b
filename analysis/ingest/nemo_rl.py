"""NeMo-RL's training data dumps: `train_data_step<N>.jsonl` (and `val_data_step<N>.jsonl`) in the run's log dir
(`logger.log_dir`, `logs/exp_NNN` by default).

What NeMo-RL writes (NVIDIA-NeMo/RL, formerly NVIDIA/NeMo-RL, at 7ea279abfbeb698b092856d0dab61e7cf39bc909):
after every training step `grpo_train` logs the batch it trained on (nemo_rl/algorithms/grpo.py:3629-3654; the
async loop the same at :5255-5282) as `train_data_step{step}.jsonl`, step counted from 1, through
`Logger.log_batched_dict_as_jsonl` (nemo_rl/utils/logger.py:1071-1098): one JSON object a line, each field the
batch's slice of one row (a one-element list: distributed/batched_data_dict.py:885-906, :1006-1015), plus `idx`,
the row. The fields: `content` (each message's text, roles not kept: grpo.py:3155, :3636), `rewards` (the
sequence reward, `total_reward`), `input_lengths`, `token_ids` (prompt and reply, padded), `token_loss_mask` (1 on
the tokens the policy generated: grpo.py:1910-1942), `sample_loss_mask`, `advantages` (per token),
`generation_logprobs`, `prev_logprobs`, and with `grpo.use_dynamic_sampling` `filtered_rewards` (the rows'
rewards; `rewards` then holds the unfiltered batch's by position: grpo.py:3638-3640, :1766-1769). Versions before
2026-02 (f11f99c7) log only content, rewards, generation_logprobs, prev_logprobs and input_lengths. Each prompt
is repeated `grpo.num_generations_per_prompt` times in a row (grpo.py:2846-2853) and dumped in that order. So:

- a group is G consecutive rows of one prompt within a file (the prompt: the token ids before the first generated
  one, else its messages' text), G from `--group-size`, else the greatest common divisor of those runs' lengths;
  NeMo-RL's baseline pools every row of one prompt in the batch (nemo_rl/algorithms/utils.py:132-147), so a prompt
  drawn twice in a step is one baseline over 2G there and two groups here;
- the reward is `filtered_rewards` where dumped, else `rewards`; a sample's advantage the mean of its generated
  tokens' (not checked against the rewards: the leave-one-out baseline and std, the other estimators and the
  advantage penalties each make them otherwise);
- each completion's token count is the number of its generated tokens (`token_loss_mask` over `input_lengths`:
  exact; every turn's, in a multi-turn rollout), else the shared options' (`--tokenizer`);
- the completion is the last message's text, the prompt the messages before it;
- `val_data_step{step}.jsonl` (grpo.py:4015-4021; step 0 with `val_at_start`, before training: :2745-2764), where
  dumped, are the held-out rows: `content` the message log (role and content), `rewards`, each prompt's
  `val_num_generations_per_prompt` samples in a row (:3859-3860), grouped by prompt within their step.

With `grpo.use_dynamic_sampling` (DAPO), only groups whose rewards have nonzero std are trained and dumped
(grpo.py:1751-1769): the tied groups drawn are not in the files, and tie fractions recomputed from them undercount
ties (said in the provenance).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.ingest.grouping import common_size, consecutive_groups
from analysis.ingest.jsonl import objects
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.tool import Tool

TRAIN = re.compile(r"train_data_step(\d+)\.jsonl")
VAL = re.compile(r"val_data_step(\d+)\.jsonl")
SIZE = "NeMo-RL's num_generations_per_prompt"  # what the group size is called, in messages


def read(source: Path, group_size: int | None = None) -> Logged:
    """The dumps in `source` (NeMo-RL's log dir)."""
    paths = _steps(source, TRAIN)
    if not paths:
        raise IngestError(f"{source}: no train_data_step<N>.jsonl (NeMo-RL writes them into logger.log_dir, "
                          "logs/exp_NNN by default, unless env.should_log_nemo_gym_responses)")
    samples = pd.DataFrame([row for step, path in paths for row in _train_rows(path, source, step)])
    if samples.empty:
        raise IngestError(f"{paths[0][1].name}: no row in it (NeMo-RL writes one a sample of the step's batch)")
    key = "prompt_ids" if samples["prompt_ids"].notna().all() else "prompt"
    g = group_size or common_size(samples, key, SIZE)
    samples["group"] = consecutive_groups(samples, key, g, SIZE)
    samples = samples.drop(columns="prompt_ids")
    if samples["completion_tokens"].isna().any():
        samples = samples.drop(columns="completion_tokens")  # no token ids dumped (an older NeMo-RL)
    val_paths = _steps(source, VAL)
    held_out = pd.DataFrame(columns=samples.columns)
    if val_paths:
        held_out = pd.DataFrame([row for step, path in val_paths for row in _val_rows(path, source, step)])
        if held_out.empty:
            raise IngestError(f"{val_paths[0][1].name}: no row in it (NeMo-RL writes one a validation sample)")
        held_out["group"] = held_out["step"].astype(str) + "\x00" + held_out["prompt"]
    dynamic = "filtered_rewards" in samples
    how = {
        "grouping": (f"{g} consecutive rows of one prompt within a file (num_generations_per_prompt; "
                     + ("--group-size" if group_size else "the greatest common divisor of the runs of one prompt")
                     + "); the prompt: " + ("its token ids before the first generated token" if key == "prompt_ids"
                                            else "its messages' text, no token ids dumped")),
        "reward": "`filtered_rewards` (dynamic sampling: the rows' own)" if dynamic else "`rewards`",
        "completion": "the last message's text; the prompt the messages before it",
    }
    if "completion_tokens" in samples:
        how["tokens"] = "each row's generated tokens counted: `token_loss_mask` over `input_lengths` (exact)"
    absent = ["per-step training metrics (loss, KL: in NeMo-RL's loggers, not its dumps)"]
    if not val_paths:
        absent.append("held-out evaluation (no val_data_step<N>.jsonl in the log dir)")
    if dynamic:
        absent.append("the tied groups NeMo-RL's dynamic sampling dropped before training and dumping "
                      "(grpo.use_dynamic_sampling): tie fractions recomputed from these dumps undercount ties")
    return Logged(tool="nemo_rl", version=None, source=str(source),
                  files=[p.name for _, p in paths] + [p.name for _, p in val_paths], samples=samples,
                  held_out=held_out, reward_columns=["reward"], how=how, absent=absent)


def _steps(source: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in source.glob("*.jsonl") if (m := pattern.fullmatch(p.name))]
    return sorted(found)


def _one(row: dict, key: str, where: str) -> object:
    """A field of one row: NeMo-RL writes the batch's one-row slice, a one-element list."""
    value = row[key]
    if not isinstance(value, list) or len(value) != 1:
        raise IngestError(f"{where}: {key} is not one row's value (NeMo-RL dumps each field as a one-element list)")
    return value[0]


def _reward(row: dict, key: str, where: str) -> float:
    value = _one(row, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise IngestError(f"{where}: {key} {value!r} is not a finite number")
    return float(value)


def _ints(row: dict, key: str, where: str) -> list[int]:
    values = _one(row, key, where)
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise IngestError(f"{where}: {key} is not a list of integers")
    return values


def _train_rows(path: Path, source: Path, step: int) -> list[dict]:
    rows = []
    for where, row in objects(path, path.relative_to(source)):
        reward_key = "filtered_rewards" if "filtered_rewards" in row else "rewards"
        missing = [k for k in ("content", reward_key) if k not in row]
        if missing:
            raise IngestError(f"{where}: no {missing[0]!r} (NeMo-RL's train_data dumps have content, rewards, "
                              "token_ids, token_loss_mask, advantages, ...)")
        messages = _one(row, "content", where)
        if not isinstance(messages, list) or not messages or not all(isinstance(m, str) for m in messages):
            raise IngestError(f"{where}: content is not a list of message texts")
        out = {"step": step, "where": where, "reward": _reward(row, reward_key, where),
               "prompt": json.dumps(messages[:-1], ensure_ascii=False), "completion": messages[-1],
               "prompt_ids": None, "completion_tokens": None}
        if "token_ids" in row:
            out.update(_generated(row, where))
        if "sample_loss_mask" in row:
            out["sample_loss_mask"] = _reward(row, "sample_loss_mask", where)
        if reward_key == "filtered_rewards":
            out["filtered_rewards"] = out["reward"]
        rows.append(out)
    return rows


def _generated(row: dict, where: str) -> dict:
    """The prompt's token ids (those before the first generated token), the generated tokens' count, and their
    mean advantage, from the padded token_ids, token_loss_mask and advantages."""
    ids = _ints(row, "token_ids", where)
    if "token_loss_mask" not in row:
        raise IngestError(f"{where}: token_ids without token_loss_mask (which tokens the policy generated)")
    mask = _ints(row, "token_loss_mask", where)
    length = _one(row, "input_lengths", where) if "input_lengths" in row else len(ids)
    if isinstance(length, bool) or not isinstance(length, int) or not 0 < length <= min(len(ids), len(mask)):
        raise IngestError(f"{where}: input_lengths {length!r} does not fit token_ids ({len(ids)}) and "
                          f"token_loss_mask ({len(mask)})")
    generated = np.asarray(mask[:length], dtype=np.int64)
    first = int(np.argmax(generated)) if generated.any() else length
    out = {"prompt_ids": json.dumps(ids[:first]), "completion_tokens": int(generated.sum())}
    if "advantages" in row:
        advantages = _one(row, "advantages", where)
        if not isinstance(advantages, list) or len(advantages) < length:
            raise IngestError(f"{where}: advantages is not one number per token")
        values = np.asarray(advantages[:length], dtype=np.float64)[generated == 1]
        out["advantage"] = float(values.mean()) if len(values) else 0.0
    return out


def _val_rows(path: Path, source: Path, step: int) -> list[dict]:
    rows = []
    for where, row in objects(path, path.relative_to(source)):
        missing = [k for k in ("content", "rewards") if k not in row]
        if missing:
            raise IngestError(f"{where}: no {missing[0]!r} (NeMo-RL's val_data dumps have content, rewards)")
        messages = _one(row, "content", where)
        if (not isinstance(messages, list) or not messages
                or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages)):
            raise IngestError(f"{where}: content is not a message log (role and content each)")
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=len(messages) - 1)
        rows.append({"step": step, "where": where, "reward": _reward(row, "rewards", where),
                     "prompt": json.dumps([{"role": str(m.get("role", "")), "content": m["content"]}
                                           for m in messages[:last]], ensure_ascii=False),
                     "completion": messages[last]["content"]})
    return rows


TOOL = Tool(
    name="nemo_rl", title="NeMo-RL", read=read,
    source="the run's log dir (logger.log_dir: logs/exp_NNN), holding train_data_step<N>.jsonl",
    example="python -m analysis.ingest nemo_rl logs/exp_001 --out runs/nemo-run",
)
