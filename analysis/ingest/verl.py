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

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.ingest.jsonl import objects
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.text import as_text
from analysis.ingest.tool import Option, Tool

FILE = re.compile(r"(\d+)\.jsonl")
REQUIRED = ("input", "output", "score")


def read(source: Path, group_size: int | None = None, validation: Path | None = None) -> Logged:
    """The verl rollout dumps in `source` and, with `validation`, its validation dumps."""
    if validation is not None and not Path(validation).is_dir():
        raise IngestError(f"--validation {validation}: no such folder")
    validation = Path(validation) if validation is not None else None
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
    for where, row in objects(path, rel):
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
    """Each row's group within its step: its uid where the rows have one, else its input text. Every training
    group has one size (`group_size`, else the one most groups have: rollout.n is one per run); held-out groups
    one size within each step (val_kwargs.n may change between validations)."""
    uid = "uid" in samples and not held_out
    if uid and samples["uid"].isna().any():
        raise IngestError(f"{samples['where'].iloc[int(np.flatnonzero(samples['uid'].isna())[0])]}: no uid where "
                          "other rows have one")
    groups = samples["step"].astype(str) + "\x00" + (samples["uid"].astype(str) if uid else samples["prompt"])
    sizes = groups.map(groups.value_counts()).to_numpy()
    first = ~groups.duplicated().to_numpy()  # one row per group, to count group sizes by
    if group_size is not None:
        want = np.full(len(samples), group_size)
    elif held_out:  # the size most of each step's groups have
        per_step = pd.Series(sizes[first]).groupby(samples["step"].to_numpy()[first]).agg(lambda v: v.mode().max())
        want = samples["step"].map(per_step).to_numpy()
    else:  # the size most of the run's groups have
        want = np.full(len(samples), pd.Series(sizes[first]).mode().max())
    odd = np.flatnonzero(sizes != want)
    if len(odd):
        i = odd[0]
        scope, key = ("this step", "val_kwargs.n") if held_out else ("the run", "rollout.n")
        raise IngestError(
            f"{samples['where'].iloc[i]}: a group of {sizes[i]} completions where {scope}'s groups have {want[i]} "
            f"(each prompt's {key}; a prompt twice in one batch forms one group of twice the size unless the dump "
            "has `uid`)")
    return groups.to_numpy(object)


TOOL = Tool(
    name="verl", title="verl", read=read,
    source="the folder trainer.rollout_data_dir named",
    example="python -m analysis.ingest verl DIR --validation VAL --out runs/verl-run --correct-from acc "
            "--answer-from pred --tokenizer MODEL_DIR",
    options=(Option("validation", "the folder trainer.validation_data_dir named (held-out evaluations)", Path,
                    "DIR"),),
)
