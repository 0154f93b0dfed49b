"""Writers and readers of the run tables (groups/, steps/, eval/, completions/): parquet parts with fixed schemas.

A part is written under a temporary name (unique per process) and renamed, so a killed run never
leaves half a file; the next start removes the temporaries (grpo_lab.run.guards.clean_temporaries).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GROUPS = pa.schema([
    ("run_id", pa.string()),
    ("step", pa.int32()),
    ("prompt_id", pa.string()),
    ("difficulty", pa.string()),
    ("round", pa.int16()),
    ("group_size", pa.int16()),
    ("rewards", pa.list_(pa.float32())),
    ("correct", pa.list_(pa.bool_())),
    ("reward_mean", pa.float32()),
    ("reward_std", pa.float32()),
    ("n_correct", pa.int16()),
    ("tie", pa.bool_()),
    ("tie_kind", pa.string()),
    ("used", pa.bool_()),
    ("tokens", pa.int32()),
    ("samples_total", pa.int64()),
    ("tokens_total", pa.int64()),
    # the training unit (samples that shared one advantage baseline): its index within the step, null when the
    # group did not train; and how many of this group's samples had a nonzero advantage there (0 when unused)
    ("unit", pa.int32()),
    ("n_informative", pa.int16()),
    ("n_trained", pa.int16()),  # samples of this group that entered the gradient (reinforce_ada trains a subset)
    ("rank", pa.int16()),  # the process that drew the group (0 in a single-process run)
    ("truncated", pa.int16()),  # samples cut at max_new_tokens (no end token, no stop string)
    # per sample, the advantage its update used (algo.advantage; for rl_zvp's shaped tokens, their mean over the
    # sample's tokens); NaN where the sample did not enter the update. Every rule recounts from it
    ("advantages", pa.list_(pa.float32())),
    # rl_zvp: per sample, the mean and max entropy of the policy's next-token distribution over its tokens in the
    # update's first pass (NaN where it did not train); null under rules that need no entropy
    ("entropy_mean", pa.list_(pa.float32())),
    ("entropy_max", pa.list_(pa.float32())),
    # a replayed group (sampler=replay): trained again at this step, drawn (and counted in samples_total) at
    # source_step; its row does not advance samples_total or tokens_total. null source_step: drawn at this step
    ("reused", pa.bool_()),
    ("source_step", pa.int32()),
])

STEPS = pa.schema(
    [("run_id", pa.string()), ("step", pa.int32())]
    + [(name, pa.float64()) for name in ("loss", "pg_loss", "kl", "clip_frac", "grad_norm", "lr", "reward_mean",
                                         "accuracy", "tie_frac")]
    + [("groups", pa.int32()), ("samples", pa.int32()), ("samples_total", pa.int64()), ("tokens_total", pa.int64())]
    + [(name, pa.float64()) for name in ("t_rollout", "t_update", "t_total")]
    # samples whose advantage was nonzero; 0: the step took no optimizer step (its kl still says how far
    # the policy is from the reference)
    + [("informative", pa.int32())]
    + [("score_timeouts", pa.int32())]  # answers whose check ran out of time (scored wrong)
    + [("skipped_prompts", pa.int32())]  # prompts a sampler passed over unsampled this step (greso, band)
    + [("truncated", pa.int32())]  # samples of the step cut at max_new_tokens
    # samples that entered the update (drawn now or reused); of them reused (replayed from an earlier step, not
    # drawn again: `samples` counts draws only); informative samples of tied groups (ngrpo, rl_zvp give them
    # nonzero advantages; grpo never)
    + [("trained", pa.int32()), ("reused", pa.int32()), ("informative_tied", pa.int32())]
)

EVAL = pa.schema([
    ("run_id", pa.string()),
    ("step", pa.int32()),
    ("prompt_id", pa.string()),
    ("difficulty", pa.string()),
    ("sample", pa.int32()),
    ("answer", pa.string()),
    ("correct", pa.bool_()),
    ("tokens", pa.int32()),
    ("samples_total", pa.int64()),  # samples the run had drawn when this checkpoint was evaluated (null: unknown)
])

# A few completions a step (log_completions=N), so a reader sees what groups and ties look like.
COMPLETIONS = pa.schema([
    ("run_id", pa.string()),
    ("step", pa.int32()),
    ("group", pa.int32()),  # index of the group among the step's groups, in draw order (the groups part's row)
    ("prompt_id", pa.string()),
    ("difficulty", pa.string()),
    ("round", pa.int16()),
    ("sample", pa.int16()),  # index within its group
    ("group_size", pa.int16()),  # samples in the whole group (rows kept may be fewer when log_completions < G)
    ("prompt", pa.string()),
    ("completion", pa.string()),  # untrusted model output, as decoded
    ("reward", pa.float32()),
    ("correct", pa.bool_()),
    ("truncated", pa.bool_()),
    ("tie", pa.bool_()),
    ("tie_kind", pa.string()),
    ("used", pa.bool_()),
])

SCHEMAS = {"groups": GROUPS, "steps": STEPS, "eval": EVAL, "completions": COMPLETIONS}
_PART = re.compile(r"part-(\d{6})\.parquet$")


def write_part(run_dir: Path, table: str, step: int, rows: list[dict]) -> Path:
    """Write rows as `<run_dir>/<table>/part-<step>.parquet`, atomically."""
    folder = Path(run_dir) / table
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"part-{step:06d}.parquet"
    tmp = folder / f".{path.name}.{os.getpid()}.tmp"  # unique per process: never two writers on one temp
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), tmp)
    os.replace(tmp, path)
    return path


def parts(run_dir: Path, table: str) -> list[tuple[int, Path]]:
    folder = Path(run_dir) / table
    found = [(int(m.group(1)), p) for p in folder.glob("part-*.parquet") if (m := _PART.search(p.name))]
    return sorted(found)


def remove_parts_after(run_dir: Path, step: int) -> int:
    """Drop every part written after `step` (and stray temporaries); returns how many went. Only the
    run directory's lock holder may call this: another writer's temporaries would go too."""
    removed = 0
    for table in SCHEMAS:
        for s, path in parts(run_dir, table):
            if s > step:
                path.unlink()
                removed += 1
        for tmp in (Path(run_dir) / table).glob(".part-*.tmp"):
            tmp.unlink()
    return removed


def read_table(run_dir: Path, table: str) -> pa.Table:
    """All parts of one table of one run, concatenated in step order (empty table if none)."""
    found = parts(run_dir, table)
    if not found:
        return SCHEMAS[table].empty_table()
    return pa.concat_tables([pq.read_table(p, schema=SCHEMAS[table]) for _, p in found])
