"""verl's rollout dumps (`trainer.rollout_data_dir=DIR`, and `trainer.validation_data_dir=DIR` for validation).

What verl writes (verl/trainer/ppo/ray_trainer.py, `_dump_generations`): one `<global_step>.jsonl` a step, a JSON
object a line: `input` (the decoded prompt), `output` (the decoded response), `score` (the sequence's reward: its
token-level scores summed), `step`, in newer versions `gts` (the ground truth), and every per-sample list the reward
function returned beside the score (`reward_extra_infos`: e.g. `acc`, `pred`). It dumps no group id unless the row
carries one (`uid`, the id verl gives each prompt before repeating it `rollout.n` times), and the rows of a step may
be reordered (`trainer.balance_batch`), so:

- a group is the rows of one `uid` within a step where the rows have it, else the rows of one identical `input`;
- every group must have the same size (`actor_rollout_ref.rollout.n`; `--group-size` to say it): a group of another
  size (a prompt twice in one batch, a dump cut short) is refused naming its first file:line;
- the reward is `score`, as logged; numeric fields beside it are kept as columns of their own (`--correct-from acc`);
- validation dumps are grouped by `input` within their step (step 0: before training, `val_before_train`), each
  prompt's samples `actor_rollout_ref.rollout.val_kwargs.n`.

With DAPO's `algorithm.filter_groups` on, verl dumps the batch it trains on, after tied groups were dropped: the
ties it filtered are not in the dump (said in the provenance when the dump has no tied group at all).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.text import as_text

FILE = re.compile(r"(\d+)\.jsonl")
REQUIRED = ("input", "output", "score")


def read(source: Path, group_size: int | None = None, validation: Path | None = None) -> Logged:
    """The verl rollout dumps in `source` and, with `validation`, its validation dumps."""
    samples, files = _read_folder(source, "rollout_data_dir")
    val_files: list[str] = []
    samples["group"] = _group_keys(samples, group_size, held_out=False)
    held_out = pd.DataFrame(columns=samples.columns)
    if validation is not None:
        held_out, val_files = _read_folder(validation, "validation_data_dir")
        held_out["group"] = _group_keys(held_out, None, held_out=True)
    # the files named from the folder that holds both dump folders where one does, else from the rollouts folder
    shared = validation is not None and validation.resolve().parent == source.resolve().parent
    if shared:
        files = [str(Path(source.name) / f) for f in files]
        val_files = [str(Path(validation.name) / f) for f in val_files]
    else:
        val_files = [str(validation.resolve() / f) for f in val_files]
    extras = [c for c in samples.columns if c not in ("input", "output", "score", "step", "where", "prompt",
                                                       "completion", "reward", "group")]
    how = {
        "grouping": ("the rows of one `uid` within a step" if (samples.get("uid") is not None)
                     else "the rows of one identical `input` within a step (no `uid` in the dump)"),
        "reward": "`score`",
        "logged beside": ", ".join(f"`{c}`" for c in extras) or "nothing",
    }
    absent = ["per-step training metrics (loss, KL: verl dumps none)"]
    if validation is None:
        absent.append("held-out evaluation (no validation dumps read: trainer.validation_data_dir, --validation)")
    return Logged(tool="verl", version=None, source=str(source.resolve().parent if shared else source),
                  files=files + val_files, samples=samples,
                  held_out=held_out, reward_columns=["score"], how=how, absent=absent)


def _read_folder(folder: Path, key: str) -> tuple[pd.DataFrame, list[str]]:
    paths = sorted((p for p in folder.glob("*.jsonl") if FILE.fullmatch(p.name)),
                   key=lambda p: int(FILE.fullmatch(p.name).group(1)))
    if not paths:
        raise IngestError(f"{folder}: no <step>.jsonl (verl writes them with trainer.{key}=DIR)")
    rows: list[dict] = []
    for path in paths:
        rows += _read_file(path, folder)
    frame = pd.DataFrame(rows)
    return frame, [p.name for p in paths]


def _read_file(path: Path, folder: Path) -> list[dict]:
    rel = path.relative_to(folder.parent) if folder.parent != folder else path.name
    file_step = int(FILE.fullmatch(path.name).group(1))
    rows = []
    with open(path, encoding="utf-8", errors="strict") as f:
        for number, line in enumerate(f, start=1):
            where = f"{rel}:{number}"
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise IngestError(f"{where}: not a JSON line ({e.msg} at column {e.colno})") from None
            if not isinstance(row, dict):
                raise IngestError(f"{where}: a JSON {type(row).__name__}, not an object")
            missing = [k for k in REQUIRED if k not in row]
            if missing:
                raise IngestError(f"{where}: no {missing[0]!r} (verl's dumps have {', '.join(REQUIRED)}, step)")
            score = row["score"]
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                raise IngestError(f"{where}: score {score!r} is not a finite number")
            step = row.get("step", file_step)
            if isinstance(step, bool) or not isinstance(step, int) or step != file_step:
                raise IngestError(f"{where}: step {step!r} where the file is step {file_step}")
            row.update(step=step, where=where, reward=float(score),
                       prompt=as_text(row["input"], where), completion=as_text(row["output"], where, True))
            rows.append(row)
    return rows


def _group_keys(samples: pd.DataFrame, group_size: int | None, held_out: bool) -> np.ndarray:
    """Each row's group within its step (uid where the rows have one, else the input text); every group of the
    same size (`group_size` where given, else the first group's; held-out: within a step)."""
    key = samples["uid"].astype(str) if "uid" in samples and not held_out else samples["prompt"]
    if "uid" in samples and not held_out and samples["uid"].isna().any():
        at = samples["where"].iloc[int(np.flatnonzero(samples["uid"].isna())[0])]
        raise IngestError(f"{at}: no uid where other rows have one")
    groups = samples["step"].astype(str) + "\x00" + key
    sizes = groups.map(groups.value_counts())
    for step, in_step in samples.groupby("step", sort=True).indices.items():
        want = group_size if group_size is not None else int(sizes.iloc[in_step[0]])
        if not held_out and group_size is None and step == samples["step"].min():
            group_size = want  # training: one rollout.n for the whole run
        odd = in_step[sizes.iloc[in_step].to_numpy() != want]
        if len(odd):
            first = samples["where"].iloc[odd[0]]
            raise IngestError(
                f"{first}: a group of {int(sizes.iloc[odd[0]])} completions where {'this step' if held_out else 'the run'}"
                f"'s groups have {want} (each prompt's {'val_kwargs.n' if held_out else 'rollout.n'}; a prompt twice "
                "in one batch forms one group of twice the size unless the dump has `uid`)")
    return groups.to_numpy(object)
