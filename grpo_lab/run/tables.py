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

# the steps table's rollout/train mismatch columns, in the order grpo_lab/train/rollout_correction.py fills them
MISMATCH = ("rollout_logp_diff_mean", "rollout_logp_diff_max", "rollout_kl", "rollout_ratio_mean", "rollout_ess",
            "rollout_capped")

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
    # samples an answer could be read from, in the task's answer format (null: not recorded, e.g. a replayed group)
    ("n_answered", pa.int16()),
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
    # the sampler's predicted pass rate for this prompt before it was drawn (sampler=mopps: its posterior mean;
    # sampler=spo: its tracker's value); null where the sampler predicts none. |predicted_rate - n_correct /
    # group_size| is its prediction error
    ("predicted_rate", pa.float64()),
])

STEPS = pa.schema(
    [("run_id", pa.string()), ("step", pa.int32())]
    + [(name, pa.float64()) for name in ("loss", "pg_loss", "kl", "clip_frac", "grad_norm", "lr", "reward_mean",
                                         "accuracy", "tie_frac")]
    + [("groups", pa.int32()), ("samples", pa.int32()), ("samples_total", pa.int64()), ("tokens_total", pa.int64())]
    + [(name, pa.float64()) for name in ("t_rollout", "t_update", "t_total")]
    # samples whose advantage was nonzero; 0: an all-tied batch (it still takes its mu updates under
    # algo.tied_batch=step, the KL term's gradient; none under skip: `opt_steps`)
    + [("informative", pa.int32())]
    + [("score_timeouts", pa.int32())]  # answers whose check ran out of time (scored wrong)
    + [("skipped_prompts", pa.int32())]  # prompts a sampler passed over unsampled this step (greso, band)
    + [("truncated", pa.int32())]  # samples of the step cut at max_new_tokens
    # samples that entered the update (drawn now or reused); of them reused (replayed from an earlier step, not
    # drawn again: `samples` counts draws only); informative samples of tied groups (ngrpo, rl_zvp give them
    # nonzero advantages; grpo never)
    + [("trained", pa.int32()), ("reused", pa.int32()), ("informative_tied", pa.int32())]
    # the rollout/train mismatch over the fresh samples that entered the update (grpo_lab/train/rollout_correction.py):
    # mean and max |log p_train - log p_rollout| a token, k3 KL(rollout || train), mean token ratio, the sequences'
    # effective sample size as a share, the share of the correction's units over its cap. NaN: no update
    + [(name, pa.float64()) for name in MISMATCH]
    # how tied units (every advantage 0) entered the update (grpo_lab/advantage/ties.py): their share of the loss's
    # denominator when it counts them (what algo.tied_norm=drop leaves out; NaN: no update); the norms of the KL
    # term's gradient, as it entered the loss, from tied units and from untied ones (algo.kl_grad_every's steps,
    # where the update ran a backward; NaN elsewhere). Null in parts written before they were recorded
    + [(name, pa.float64()) for name in ("tied_norm_share", "kl_grad_tied", "kl_grad_untied")]
    # what the step cost (grpo_lab/train/costs.py): optimizer steps taken at it (mu, or 0: none) and in the run so far;
    # prompt tokens prefilled (once a group) and tokens generated by its draw; the training passes' token positions x
    # passes; a FLOP estimate (2N a position forward, 6N forward and backward) at it and in the run so far (NaN: a run
    # resumed from a checkpoint written before it was counted); the process's CPU seconds in the step (rank 0's)
    + [("opt_steps", pa.int32()), ("updates", pa.int64()), ("prompt_tokens", pa.int64()), ("gen_tokens", pa.int64()),
       ("token_passes", pa.int64()), ("flops", pa.float64()), ("flops_total", pa.float64()), ("cpu_s", pa.float64())]
)

EVAL = pa.schema([
    ("run_id", pa.string()),
    ("step", pa.int32()),
    ("prompt_id", pa.string()),
    ("difficulty", pa.string()),
    ("sample", pa.int32()),
    ("answer", pa.string()),
    ("answered", pa.bool_()),  # an answer could be read (answer is not null): false is a format failure
    ("correct", pa.bool_()),
    ("tokens", pa.int32()),
    ("samples_total", pa.int64()),  # samples the run had drawn when this checkpoint was evaluated (null: unknown)
    ("tokens_total", pa.int64()),  # tokens it had generated there (null: unknown, or written before it was recorded)
    ("updates", pa.int64()),  # optimizer steps it had taken there (null: unknown, or written before it was recorded)
    ("flops_total", pa.float64()),  # the FLOP estimate of its training so far (null: as updates, or not counted)
    # how the rows were sampled (grpo_lab/run/evaluations.py): samples per prompt, temperature (0: greedy), nucleus
    # (1: none; recorded so another engine can), the token limit. Null in parts written before they were recorded
    ("n", pa.int32()),
    ("temperature", pa.float32()),
    ("top_p", pa.float32()),
    ("max_new_tokens", pa.int32()),
    # the reply, kept for the first few samples of each difficulty at the base evaluation (null elsewhere): what a
    # reader, and the warning of a run that cannot learn, quote; with its prompt and the reference answer (null
    # where the reply is)
    ("completion", pa.string()),
    ("prompt", pa.string()),
    ("gold", pa.string()),
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
    ("gold", pa.string()),  # the problem's reference answer
    ("completion", pa.string()),  # untrusted model output, as decoded
    ("answered", pa.bool_()),  # an answer could be read from it in the task's answer format (null: not recorded)
    ("answer", pa.string()),  # the answer read (null: none, or not recorded)
    ("tokens", pa.int32()),  # tokens generated for it, the end token included
    ("reward", pa.float32()),
    ("correct", pa.bool_()),
    ("truncated", pa.bool_()),
    ("tie", pa.bool_()),
    ("tie_kind", pa.string()),
    ("used", pa.bool_()),
])

SCHEMAS = {"groups": GROUPS, "steps": STEPS, "eval": EVAL, "completions": COMPLETIONS}


def varying_columns(names: list[str]) -> list[str]:
    """The columns that differ between two equal runs (a resumed one and one never stopped): the run's id and the
    timings (wall-clock `t_*`, the process's `cpu_s`). Everything else must match exactly."""
    return [c for c in names if c in ("run_id", "cpu_s") or c.startswith("t_")]
# a step's part; an eval part of an evaluation at other settings than the run's own carries their tag
# (`part-000030-n4-t0.5-p1-m6.parquet`: grpo_lab/run/evaluations.py), so it lies beside the run's own part
_PART = re.compile(r"part-(\d{6})\.parquet")
_TAGGED = re.compile(r"part-(\d{6})-([A-Za-z0-9.]+(?:-[A-Za-z0-9.]+)*)\.parquet")


def part_path(run_dir: Path, table: str, step: int, tag: str | None = None) -> Path:
    """Where a step's part of `table` goes: `part-<step>.parquet`, or `part-<step>-<tag>.parquet`."""
    name = f"part-{step:06d}.parquet" if tag is None else f"part-{step:06d}-{tag}.parquet"
    if tag is not None and not _TAGGED.fullmatch(name):
        raise ValueError(f"part tag {tag!r}: letters, digits, dots and single dashes only")
    return Path(run_dir) / table / name


def write_part(run_dir: Path, table: str, step: int, rows: list[dict], tag: str | None = None) -> Path:
    """Write rows as `<run_dir>/<table>/part-<step>[-<tag>].parquet`, atomically: the old part, if any, is
    replaced whole by the rename, never removed before the new one is complete."""
    path = part_path(run_dir, table, step, tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"  # unique per process: never two writers on one temp
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), tmp)
    os.replace(tmp, path)
    return path


def parts(run_dir: Path, table: str) -> list[tuple[int, Path]]:
    """The run's own parts of `table`, (step, path) in step order: the trainer's (an eval part of another
    evaluation's settings, `tagged_parts`, is not among them)."""
    folder = Path(run_dir) / table
    found = [(int(m.group(1)), p) for p in folder.glob("part-*.parquet") if (m := _PART.fullmatch(p.name))]
    return sorted(found)


def tagged_parts(run_dir: Path, table: str = "eval") -> list[tuple[int, str, Path]]:
    """The parts written beside the run's own, (step, tag, path) in step and tag order: evaluations at other
    settings (experiments.evaluate)."""
    folder = Path(run_dir) / table
    found = [(int(m.group(1)), m.group(2), p) for p in folder.glob("part-*.parquet")
             if (m := _TAGGED.fullmatch(p.name))]
    return sorted(found)


def read_table(run_dir: Path, table: str, *, own: bool = False) -> pa.Table:
    """All parts of one table of one run, concatenated in step order (empty table if none): eval rows of every
    evaluation, each row with its settings (`n`, `temperature`, ...), or with `own` the run's own parts only
    (`parts`: the trainer's evaluation)."""
    found = [(s, "", p) for s, p in parts(run_dir, table)] + ([] if own else tagged_parts(run_dir, table))
    if not found:
        return SCHEMAS[table].empty_table()
    return pa.concat_tables([pq.read_table(p, schema=SCHEMAS[table]) for _, _, p in sorted(found)])
