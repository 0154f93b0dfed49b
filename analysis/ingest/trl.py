"""TRL's GRPOTrainer logs (`GRPOConfig(log_completions=True)`): `<output_dir>/completions/completions_<step>.parquet`.

What TRL writes (trl/trainer/grpo_trainer.py, `log`): at every logging step, the last generation batch it holds
(a window of `generation_batch_size` completions): `step` (the global step at the log), `prompt`, `completion`
(text, or chat messages), one column per reward function (its raw value, before `reward_weights`), the columns
reward functions logged with `log_extra`, and `advantage`. It records no group id: a group is `num_generations`
consecutive completions of one prompt (TRL's RepeatSampler), and no token counts. So (the grouping is
`grouping.py`'s, shared with NeMo-RL's):

- groups are the runs of one prompt within a file, cut into groups of G (`--group-size`, else the greatest common
  divisor of those runs' lengths, said in the provenance); a run whose length is no multiple of G is refused;
- a file whose rows repeat the file before it is the same generation logged again (TRL logs its last generation at
  every logging step, and generates once every `steps_per_generation x num_iterations` steps): counted once;
- the reward is TRL's weighted sum of its functions' values (`--reward-weights`, default 1 each; NaN, a function
  that gave none, counts 0, as TRL's nansum does); each group's logged advantages must follow from it (proportional
  to reward - group mean, as every `scale_rewards` makes them), else the weights are wrong and the ingest says so;
- the reward functions are named by `trainer_state.json` (`rewards/<name>/mean`) where the run saved it, else the
  float columns between `completion` and the first extra column;
- TRL's own `frac_reward_zero_std` per step (trainer_state.json) is kept to be compared with the recomputed ties;
- token counts: a `completion_tokens` column where a reward function logged one (`log_extra`), else the completion
  texts re-encoded with `--tokenizer`, else with the tokenizer.json TRL saved with the processing class (the
  output_dir's own, else its latest `checkpoint-<step>/`: `Trainer._save`), else none: a plain run
  (`log_completions=True` and nothing more) ingests with its tokens null, the token-aligned parts of its report
  left out, and run.json's `imported.absent` and the ingest's summary say so.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from analysis.ingest.grouping import advantages_off, common_size, consecutive_groups
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.text import as_text
from analysis.ingest.tool import Option, Tool

FILE = re.compile(r"completions_(\d+)\.parquet")
SIZE = "TRL's num_generations"  # what the group size is called, in messages
REQUIRED = ("step", "prompt", "completion", "advantage")


def read(source: Path, group_size: int | None = None, reward_weights: list[float] | None = None) -> Logged:
    """The TRL run at `source` (its output_dir, or the completions folder itself)."""
    folder = source / "completions" if (source / "completions").is_dir() else source
    files = sorted((p for p in folder.glob("completions_*.parquet") if FILE.fullmatch(p.name)),
                   key=lambda p: int(FILE.fullmatch(p.name).group(1)))
    if not files:
        raise IngestError(f"{source}: no completions/completions_<step>.parquet (TRL writes them with "
                          "GRPOConfig(log_completions=True))")
    state = _trainer_state(source)
    named = _reward_names(state)
    frames, repeats, previous = [], 0, None
    for path in files:
        frame = _read_file(path, source)
        body = frame.drop(columns=["step", "where"])
        if previous is not None and body.shape == previous.shape and body.equals(previous):
            repeats += 1  # the same generation batch logged again at a later step
            continue
        previous = body
        frames.append(frame)
    columns = list(frames[0].columns)
    rewards = named if named is not None else _float_columns_after_completion(frames[0])
    for frame in frames:
        missing = [c for c in rewards if c not in frame.columns]
        if missing:
            raise IngestError(f"{frame['where'].iloc[0].rsplit(':', 1)[0]}: no column {missing[0]!r} "
                              f"(a reward function the run logged)")
    if not rewards:
        raise IngestError(f"{files[0]}: no reward column (a float column after `completion`)")
    weights = reward_weights or [1.0] * len(rewards)
    if len(weights) != len(rewards):
        raise IngestError(f"--reward-weights: {len(weights)} weights for {len(rewards)} reward functions "
                          f"({', '.join(rewards)})")
    samples = pd.concat(frames, ignore_index=True)
    values = samples[rewards].to_numpy(np.float64)  # (rows, functions)
    unscorable = np.isnan(values).all(axis=1)
    if unscorable.any():
        at = samples["where"].iloc[int(np.argmax(unscorable))]
        raise IngestError(f"{at}: every reward function gave None (NaN) for this completion: TRL trains it with "
                          "advantage 0 and no reward; such rows cannot enter a group's rewards")
    samples["reward"] = np.nansum(values * np.asarray(weights), axis=1)
    g = group_size or common_size(samples, "prompt", SIZE)
    samples["group"] = consecutive_groups(samples, "prompt", g, SIZE)
    off = advantages_off(samples, samples["group"].to_numpy())
    if off is not None:  # every scale_rewards of TRL's sum_then_normalize makes them proportional to r - mean
        weights_text = ", ".join(f"{c}={w:g}" for c, w in zip(rewards, weights))
        raise IngestError(f"{samples['where'].iloc[off[0]]}: the logged advantages of this group do not follow "
                          f"from its rewards summed with weights {weights_text} (pass TRL's reward_weights as "
                          "--reward-weights; multi_objective_aggregation='normalize_then_sum' is not read)")
    extras = [c for c in columns if c not in (*REQUIRED, "where", *rewards)]
    how = {
        "grouping": (f"{g} consecutive completions of one prompt within a file (TRL's num_generations; "
                     + ("--group-size" if group_size else "the most common length of a run of one prompt, every "
                        "run a multiple of it")
                     + ")"),
        "reward": ("the sum of " if len(rewards) > 1 else "") + ", ".join(
            f"`{c}`" + (f" x {w:g}" if w != 1 else "") for c, w in zip(rewards, weights)),
        "reward functions": ("named by trainer_state.json" if named is not None
                             else "the float columns between `completion` and the first extra column "
                                  "(no trainer_state.json)"),
        "logged beside": ", ".join(f"`{c}`" for c in extras) or "nothing",
    }
    if repeats:
        how["repeats"] = (f"{repeats} file{'s' * (repeats > 1)} repeated the generation logged before "
                          f"{'them' if repeats > 1 else 'it'} (TRL logs its last generation at every logging step): "
                          "counted once")
    ties, steps = _logged_metrics(state)
    absent = ["held-out evaluation (TRL logs none apart from its training completions)"]
    if state is None:
        absent.append("TRL's per-step metrics and its own frac_reward_zero_std, so the recomputed ties are checked "
                      "against nothing (no trainer_state.json: trainer.save_state() writes it)")
    return Logged(tool="trl", version=_version(source), source=str(source),
                  files=[str(p.relative_to(source)) for p in files], samples=samples,
                  held_out=pd.DataFrame(columns=samples.columns), reward_columns=rewards, how=how, absent=absent,
                  tool_ties=ties, tool_steps=steps)


def _read_file(path: Path, source: Path) -> pd.DataFrame:
    try:
        frame = pq.read_table(path).to_pandas()
    except Exception as e:  # noqa: BLE001 (pyarrow raises several kinds for a file that is not parquet)
        raise IngestError(f"{path}: not a readable parquet file ({type(e).__name__}: {str(e).splitlines()[0]})") \
            from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise IngestError(f"{path}: no column {missing[0]!r} (TRL's completions files have "
                          f"{', '.join(REQUIRED)})")
    rel = path.relative_to(source)
    frame["where"] = [f"{rel}:row {i}" for i in range(len(frame))]
    frame["prompt"] = [as_text(v, f"{rel}:row {i}") for i, v in enumerate(frame["prompt"])]
    frame["completion"] = [as_text(v, f"{rel}:row {i}", content_only=True) for i, v in enumerate(frame["completion"])]
    steps = pd.to_numeric(frame["step"], errors="coerce")
    if steps.isna().any() or (steps < 0).any() or (steps != np.floor(steps)).any():
        bad = int(np.flatnonzero(steps.isna() | (steps < 0) | (steps != np.floor(steps)))[0])
        raise IngestError(f"{rel}:row {bad}: step {frame['step'].iloc[bad]!r} is no step number")
    frame["step"] = steps.astype(np.int64)
    named = int(FILE.fullmatch(path.name).group(1))
    if (frame["step"] != named).any():  # TRL names each file by the global step it logs in every row
        bad = int(np.flatnonzero(frame["step"].to_numpy() != named)[0])
        raise IngestError(f"{rel}:row {bad}: step {frame['step'].iloc[bad]} in a file named for step {named}")
    return frame


def _trainer_state(source: Path) -> dict | None:
    """trainer_state.json of the run (its output_dir's, else its last checkpoint's), as JSON; None without one."""
    candidates = [source / "trainer_state.json"]
    checkpoints = sorted(source.glob("checkpoint-*/trainer_state.json"),
                         key=lambda p: int(p.parent.name.split("-")[-1]) if p.parent.name.split("-")[-1].isdigit()
                         else -1)
    candidates += checkpoints[::-1]
    for path in candidates:
        if path.is_file():
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise IngestError(f"{path}: not readable as JSON ({e})") from None
            return state if isinstance(state, dict) else None
    return None


def _reward_names(state: dict | None) -> list[str] | None:
    """The reward functions' names, in TRL's order, from the metrics it logged (`rewards/<name>/mean`)."""
    if state is None:
        return None
    names: list[str] = []
    for entry in state.get("log_history", []):
        for key in entry:
            m = re.fullmatch(r"rewards/(.+)/mean", key)
            if m and m.group(1) not in names:
                names.append(m.group(1))
    return names or None


def _float_columns_after_completion(frame: pd.DataFrame) -> list[str]:
    columns = list(frame.columns)
    out = []
    for c in columns[columns.index("completion") + 1:]:
        if c in ("advantage", "where") or not pd.api.types.is_float_dtype(frame[c]):
            break
        out.append(c)
    return out


STEP_METRICS = {"loss": "loss", "kl": "kl", "grad_norm": "grad_norm", "lr": "learning_rate", "t_total": "step_time",
                "clip_frac": "clip_ratio/region_mean"}


def _logged_metrics(state: dict | None) -> tuple[dict[int, float], pd.DataFrame | None]:
    """TRL's frac_reward_zero_std per step, and its per-step training metrics (grpo-lab's steps columns)."""
    if state is None:
        return {}, None
    ties, rows = {}, []
    for entry in state.get("log_history", []):
        step = entry.get("step")
        if not isinstance(step, int) or "frac_reward_zero_std" not in entry and "loss" not in entry:
            continue
        if isinstance(entry.get("frac_reward_zero_std"), (int, float)):
            ties[step] = float(entry["frac_reward_zero_std"])
        rows.append({"step": step, **{ours: _number(entry.get(theirs)) for ours, theirs in STEP_METRICS.items()}})
    steps = pd.DataFrame(rows).drop_duplicates("step", keep="last") if rows else None
    return ties, steps


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _version(source: Path) -> str | None:
    """TRL's version from the model card TRL writes beside a checkpoint ("- TRL: 1.16.0"), where there is one."""
    for card in [source / "README.md", *sorted(source.glob("checkpoint-*/README.md"))]:
        if card.is_file():
            m = re.search(r"^\s*-\s*TRL:\s*([\w.+-]+)", card.read_text(errors="replace"), re.MULTILINE)
            if m:
                return m.group(1)
    return None


def _weights(text: str) -> list[float]:
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not comma-separated numbers") from None


TOOL = Tool(
    name="trl", title="TRL", read=read,
    source="the run's output_dir (or its completions/ folder)",
    example="python -m analysis.ingest trl runs/trl --out runs/trl-run --correct-from accuracy "
            "--difficulty-from level",
    options=(Option("reward_weights", "GRPOConfig's reward_weights, one per reward function (default 1 each)",
                    _weights, "W1,W2,..."),),
)
