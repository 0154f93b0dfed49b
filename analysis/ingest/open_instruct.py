"""open-instruct's rollout traces (`open_instruct/grpo_fast.py --save_traces --rollouts_save_path DIR`).

What open-instruct writes (allenai/open-instruct at e6c3044aa6201c8bfa4573c1b03142af599e730d):
`<run_name>_rollouts_<shard:06d>.jsonl` in DIR (open_instruct/rl_utils.py:98), appended to (:125), a new shard
once 10,000 samples are written (:19, :156), one JSON object a line, `RolloutRecord` (:30-43): `step` (the data
loader's training step, from 0: data_loader.py:1360, :1592), `sample_idx` (the row in its step's batch),
`prompt_idx` (= sample_idx // num_samples_per_prompt_rollout: rl_utils.py:111), `prompt_tokens` and
`response_tokens` (token ids: no text), `reward` (the batch's score: verifiable reward, `verification_reward` 10 by
default (data_loader.py:452), plus any format reward), `advantage` (reward - group mean, or that over the group's
std + 1e-8 with advantage_normalization_type=standard: data_loader.py:1472-1482), `finish_reason` (vLLM's: stop,
length), `dataset`, `ground_truth`, `request_info` (tool calls), `logprobs`; and `<run_name>_metadata.jsonl`
(rl_utils.py:46-67: run_name, git_commit, model_name, timestamp). `run_name` is `<exp_name>__<seed>__<unix time>`
(grpo_fast.py:1024). So:

- a group is the rows of one `prompt_idx` within a step (open-instruct's own grouping); every group has one size
  (`--group-size`, else the size most have), the rows of a group one `prompt_tokens`, and each group's advantages
  follow from its rewards, else the one line names the first row;
- `step` is open-instruct's + 1 (grpo-lab's step N is the N-th update; open-instruct counts from 0);
- each completion's token count is its `response_tokens`' length (exact; with tools, the tool outputs' tokens
  inside the response are counted too: the traces keep no mask); `truncated`: finish_reason `length`;
- prompts and completions are their token ids written out (their identity; the traces hold no text);
- a step written twice (a resumed run writes the steps after its checkpoint again, into shard 0) is refused: which
  write came last cannot be told from the files;
- the seed is read from the run name; open-instruct's commit (the metadata's git_commit) is the version.

The traces are written after open-instruct's zero-std filtering (data_loader.py:1415-1443 calls
`accumulate_inference_batches`, whose `process_group` drops a group whose rewards have zero std when
`filter_zero_std_samples`, on by default: data_loader.py:815, :419; the traces are saved at :1486-1496): with it on,
no tied group is in the traces, so tie fractions recomputed from them undercount ties (0 where every tie was
dropped), and which prompts tied, all correct or all wrong, is lost; open-instruct's own count of the groups it
dropped (`filtered_prompts` in its tracker's metrics) is not in the traces. Where the traces hold a tied group the
filter was off and every group drawn is in them; the provenance says which. `mask_truncated_completions` drops
truncated rows before the advantages are computed (data_loader.py:1187-1202, :1453), so a step's rows no longer
fall in groups by position: refused (a group whose rows have different prompts).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.ingest.grouping import advantages_off
from analysis.ingest.jsonl import objects
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.tool import Option, Tool

FILE = re.compile(r"(?P<run>.+)_rollouts_(?P<shard>\d{6})\.jsonl")
INTEGERS = ("step", "sample_idx", "prompt_idx")
REQUIRED = (*INTEGERS, "prompt_tokens", "response_tokens", "reward", "advantage", "finish_reason")
KEPT = ("dataset", "ground_truth")  # scalar fields kept beside the reward (request_info and logprobs are not)
SEED = re.compile(r".+__(\d+)__\d+")  # grpo_fast.py's run_name: <exp_name>__<seed>__<unix time>


def read(source: Path, group_size: int | None = None, run_name: str | None = None) -> Logged:
    """The traces of one run in `source` (open-instruct's rollouts_save_path)."""
    run, paths = _shards(source, run_name)
    rows: list[dict] = []
    for path in paths:
        rows += _read_file(path, source)
    if not rows:
        raise IngestError(f"{paths[0].name}: no trace in it (an empty shard)")
    _no_step_twice(rows)
    samples = pd.DataFrame(rows)
    g = group_size or int(samples.groupby(["step", "prompt_idx"]).size().mode().max())
    samples["group"] = _groups(samples, g)
    off = advantages_off(samples, samples["group"].to_numpy())
    if off is not None:
        raise IngestError(f"{samples['where'].iloc[off[0]]}: the logged advantages of this group do not follow from "
                          "its rewards (open-instruct's are reward - group mean, or that over the group's std)")
    by_group = samples.groupby("group", sort=False)["reward"]
    tied = by_group.max() == by_group.min()
    metadata = _metadata(source, run)
    how = {
        "grouping": (f"the rows of one `prompt_idx` within a step, {g} each (num_samples_per_prompt_rollout; "
                     + ("--group-size" if group_size else "the size most groups have") + ")"),
        "reward": "`reward` (open-instruct's score: verifiable reward, verification_reward 10 by default, plus any "
                  "format reward)",
        "step": "open-instruct's `step` + 1 (it counts from 0)",
        "tokens": "each row's `response_tokens` counted (exact; with tools, the tool outputs' tokens inside a "
                  "response too: the traces keep no mask)",
        "logged beside": ", ".join(f"`{c}`" for c in ("advantage", "finish_reason", *KEPT) if c in samples),
    }
    absent = ["held-out evaluation (open-instruct's traces hold training rollouts only)",
              "per-step training metrics (loss, KL: in open-instruct's tracker, not its traces)",
              "the prompts' and completions' text (token ids only)"]
    if tied.any():
        how["ties"] = (f"the traces hold {int(tied.sum())} tied groups: filter_zero_std_samples was off, every group "
                       "drawn is in them")
    else:
        how["ties"] = ("the traces hold no tied group: written after open-instruct's zero-std filtering "
                       "(filter_zero_std_samples, its default), which drops every tied group before they are saved")
        absent.append("the tied groups open-instruct dropped before writing its traces (filter_zero_std_samples): "
                      "tie fractions recomputed from these traces undercount ties (0 where every tie was dropped), "
                      "and its own count of them (filtered_prompts, in its tracker) is not in the traces")
    if metadata.get("model_name"):
        how["model"] = f"`{metadata['model_name']}` (the traces' metadata)"
    seed = SEED.fullmatch(run)
    if seed:
        how["seed"] = f"{seed.group(1)}, from the run name `{run}` (<exp_name>__<seed>__<time>)"
    files = [p.name for p in paths] + ([f"{run}_metadata.jsonl"] if metadata else [])
    commit = metadata.get("git_commit")
    return Logged(tool="open_instruct", version=str(commit)[:12] if commit else None, source=str(source), files=files,
                  samples=samples, held_out=pd.DataFrame(columns=samples.columns), reward_columns=["reward"],
                  how=how, absent=absent, config={"seed": int(seed.group(1))} if seed else {})


def _shards(source: Path, run_name: str | None) -> tuple[str, list[Path]]:
    """The run whose traces are read, and its shards in order."""
    runs: dict[str, list[Path]] = {}
    for path in source.glob("*_rollouts_*.jsonl"):
        m = FILE.fullmatch(path.name)
        if m:
            runs.setdefault(m.group("run"), []).append(path)
    if not runs:
        raise IngestError(f"{source}: no <run_name>_rollouts_<shard>.jsonl (open-instruct writes them with "
                          "--save_traces --rollouts_save_path DIR)")
    if run_name is not None and run_name not in runs:
        raise IngestError(f"--run-name {run_name}: no {run_name}_rollouts_*.jsonl in {source} (runs there: "
                          f"{', '.join(sorted(runs))})")
    if run_name is None and len(runs) > 1:
        raise IngestError(f"{source}: the traces of {len(runs)} runs ({', '.join(sorted(runs)[:3])}"
                          f"{', ...' if len(runs) > 3 else ''}): name one with --run-name")
    run = run_name or next(iter(runs))
    return run, sorted(runs[run], key=lambda p: int(FILE.fullmatch(p.name).group("shard")))


def _read_file(path: Path, source: Path) -> list[dict]:
    rows = []
    for where, row in objects(path, path.relative_to(source)):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise IngestError(f"{where}: no {missing[0]!r} (open-instruct's traces have {', '.join(REQUIRED)})")
        for key in INTEGERS:
            if isinstance(row[key], bool) or not isinstance(row[key], int) or row[key] < 0:
                raise IngestError(f"{where}: {key} {row[key]!r} is not a count")
        for key in ("reward", "advantage"):
            value = row[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise IngestError(f"{where}: {key} {value!r} is not a finite number")
        for key in ("prompt_tokens", "response_tokens"):
            ids = row[key]
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise IngestError(f"{where}: {key} is not a list of token ids")
        if not isinstance(row["finish_reason"], str):
            raise IngestError(f"{where}: finish_reason {row['finish_reason']!r} is not text")
        rows.append({
            "step": row["step"] + 1, "sample_idx": row["sample_idx"], "prompt_idx": row["prompt_idx"],
            "prompt": json.dumps(row["prompt_tokens"]), "completion": json.dumps(row["response_tokens"]),
            "reward": float(row["reward"]), "advantage": float(row["advantage"]),
            "completion_tokens": len(row["response_tokens"]), "finish_reason": row["finish_reason"],
            "truncated": row["finish_reason"] == "length", "where": where,
            **{k: (v if v is None or isinstance(v, (str, int, float)) else json.dumps(v))
               for k, v in ((k, row.get(k)) for k in KEPT) if k in row},
        })
    return rows


def _no_step_twice(rows: list[dict]) -> None:
    """A (step, sample_idx) written once: a resumed run appends the steps it redoes to shard 0 again."""
    seen: dict[tuple[int, int], str] = {}
    for row in rows:
        key = (row["step"], row["sample_idx"])
        if key in seen:
            raise IngestError(f"{row['where']}: step {key[0] - 1} sample_idx {key[1]} was written before, at "
                              f"{seen[key]} (a resumed run writes the steps after its checkpoint again: keep one)")
        seen[key] = row["where"]


def _groups(samples: pd.DataFrame, g: int) -> np.ndarray:
    """Each row's group (step and prompt_idx), every group `g` rows of one prompt, as open-instruct made them."""
    key = samples["step"].astype(str) + "." + samples["prompt_idx"].astype(str)
    sizes = key.map(key.value_counts()).to_numpy()
    odd = np.flatnonzero((sizes != g) | (samples["sample_idx"].to_numpy() // g != samples["prompt_idx"].to_numpy()))
    if len(odd):
        i = odd[0]
        raise IngestError(f"{samples['where'].iloc[i]}: prompt_idx {samples['prompt_idx'].iloc[i]} of step "
                          f"{samples['step'].iloc[i] - 1} has {sizes[i]} rows where groups have {g} "
                          "(num_samples_per_prompt_rollout: --group-size)")
    prompts = samples.groupby(key.to_numpy(), sort=False)["prompt"].transform("first")
    mixed = np.flatnonzero((prompts != samples["prompt"]).to_numpy())
    if len(mixed):
        raise IngestError(f"{samples['where'].iloc[mixed[0]]}: a row of prompt_idx "
                          f"{samples['prompt_idx'].iloc[mixed[0]]} with another prompt than its group's first "
                          "(mask_truncated_completions drops rows before they are grouped: such traces are not read)")
    return key.to_numpy(object)


def _metadata(source: Path, run: str) -> dict:
    """The run's `<run_name>_metadata.jsonl` (one JSON line), or {} where there is none."""
    path = source / f"{run}_metadata.jsonl"
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text().splitlines()[0])
    except (ValueError, IndexError):
        raise IngestError(f"{path.name}:1: not a JSON line (open-instruct's metadata: run_name, git_commit, "
                          "model_name, timestamp)") from None
    return record if isinstance(record, dict) else {}


TOOL = Tool(
    name="open_instruct", title="open-instruct", read=read,
    source="the folder --rollouts_save_path named (grpo_fast.py --save_traces)",
    example="python -m analysis.ingest open_instruct ROLLOUTS_DIR --out runs/oi-run --correct-at 10   "
            "# verification_reward 10: a right answer scores 10",
    options=(Option("run_name", "the run whose traces to read, where the folder holds several "
                    "(<run_name>_rollouts_*.jsonl)", str, "NAME"),),
)
