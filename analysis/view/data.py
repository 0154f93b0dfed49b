"""What the viewer embeds: every group of a run or sweep (or a deterministic sample of them), the replies kept beside
them, the base evaluation's replies, and the tie rate of every (arm, step bin, difficulty) cell over all groups.

A group row holds what the groups table recorded (rewards, correctness, the advantages the update used, tokens,
truncations, answers read); its replies exist only where the run kept them (the completions table: the first step's
group of each difficulty, and `log_completions=N` a step) and at the base evaluation (a few replies of each
difficulty). Columns go out as lists, one per field, so a million-group sweep's sample stays a few MB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from analysis.data.arms import arm_keys, arm_name, short_label
from analysis.data.completions import read_completions
from analysis.data.labels import label_order, natural_sorted
from analysis.data.load import GROUP_COLUMNS, find_jobs, load
from analysis.data.records import difficulty_order

# groups embedded whole up to this; above it, a deterministic sample of about this many (`--max-groups`)
MAX_GROUPS = 40_000
HEAT_COLUMNS = 24  # step bins of a heatmap at most
LIST_COLUMNS = ("rewards", "correct", "advantages", "n_answered")
REPLY_COLUMNS = ("completion", "answer", "answered", "tokens", "truncated", "reward", "correct")
TRAIN, HELD_OUT = 0, 1  # a group's source: a training draw, or the base evaluation of held-out prompts


@dataclass(frozen=True)
class Source:
    """What the viewer reads: the runs' folder and, where it was given a report folder, that report."""

    runs: Path | list[Path]  # several: one page over every job of them (job names as `load` gives them)
    report: Path | None


def locate(path: Path) -> Source:
    """A run, a sweep, or a report folder whose `data/` holds the runs (`python -m analysis.pack`)."""
    if find_jobs(path):
        return Source(path, None)
    data = path / "data"
    if data.is_dir() and find_jobs(data):
        return Source(data, path)
    return Source(path, None)  # load() says what is missing, in one line


def collect(path: Path | Sequence[Path], max_groups: int = MAX_GROUPS, title: str | None = None) -> dict:
    """The viewer's payload for the run, sweep or report at `path`, or for several runs and sweeps (JSON-ready)."""
    several = not isinstance(path, (str, Path))
    source = Source([Path(p) for p in path], None) if several else locate(Path(path))
    tables = load(source.runs, tables=("groups",), columns={"groups": (*GROUP_COLUMNS, *LIST_COLUMNS)})
    with label_order(difficulty_order(tables.jobs)):  # difficulties in the order the runs recorded, as the report
        return _payload(tables, source, path, several, max_groups, title)


def _payload(tables, source: Source, path, several: bool, max_groups: int, title: str | None) -> dict:
    """`collect`'s payload from the loaded tables."""
    groups, jobs = tables.groups, tables.jobs
    keys = arm_keys(jobs, tables.config_columns)
    job_names = [str(j) for j in jobs["job"]]
    arms = [short_label(arm_name(row, keys)) for _, row in jobs.iterrows()]
    seeds = [None if "seed" not in jobs or pd.isna(s) else _plain(s) for s in jobs.get("seed", [None] * len(jobs))]
    job_index = {name: i for i, name in enumerate(job_names)}

    frame = _train_groups(groups, job_index)
    replies = _replies(jobs, frame, job_index)
    held = _held_out(jobs, job_index)
    frame = pd.concat([frame, held.groups], ignore_index=True) if len(held.groups) else frame
    replies = {**replies, **{len(frame) - len(held.groups) + i: r for i, r in held.replies.items()}}
    frame["has_text"] = frame.index.isin(list(replies))
    chosen, how = _sample(frame, max_groups)
    shown = frame.loc[chosen].reset_index()
    arm_order = list(dict.fromkeys(natural_sorted(arms)))
    return {
        "title": title or (source.report or source.runs).resolve().name,
        "source": ", ".join(map(str, path)) if several else str(path),
        "arm_keys": keys,
        "jobs": [{"name": n, "arm": a, "seed": s} for n, a, s in zip(job_names, arms, seeds)],
        "arms": arm_order,
        "sample": {**how, "shown": int(len(shown)), "total": int(len(frame)),
                   "train_total": int((frame["src"] == TRAIN).sum()), "held_out_total": int(len(held.groups))},
        "groups": _columns(shown),
        "replies": [replies[i] for i in shown["index"] if i in replies],
        "difficulties": natural_sorted(shown["difficulty"].astype(str).unique()),  # the filter's, in label order
        "heat": _heatmaps(frame[frame["src"] == TRAIN], arms, arm_order),
    }


def _plain(value: object) -> object:
    """A config value as JSON takes it (numpy scalars unwrapped)."""
    return value.item() if isinstance(value, np.generic) else value


def _train_groups(groups: pd.DataFrame, job_index: dict[str, int]) -> pd.DataFrame:
    """The groups table as the viewer's rows (one per group, in each job's draw order)."""
    n = len(groups)
    absent = pd.Series([None] * n, index=groups.index, dtype=object)
    return pd.DataFrame({
        "job": groups["job"].astype(str).map(job_index).to_numpy(np.int32),
        "step": groups["step"].to_numpy(np.int64),
        "prompt": groups["prompt_id"].astype(str).to_numpy(object),
        "difficulty": groups["difficulty"].astype(str).to_numpy(object),
        "round": groups["round"].to_numpy(np.int64),
        "kind": _kinds(groups["tie"].to_numpy(bool), groups["tie_kind"]),
        "rewards": groups["rewards"].to_numpy(object),
        "correct": groups["correct"].to_numpy(object),
        "advantages": (groups["advantages"] if "advantages" in groups else absent).to_numpy(object),
        "tokens": groups["tokens"].fillna(-1).to_numpy(np.int64),  # -1: not counted (an ingested run's logs)
        "truncated": groups["truncated"].to_numpy(np.int64) if "truncated" in groups else np.full(n, -1),
        "answered": (groups["n_answered"].fillna(-1) if "n_answered" in groups else pd.Series(-1, index=groups.index))
        .to_numpy(np.int64),
        "used": groups["used"].to_numpy(bool),
        "src": np.full(n, TRAIN, dtype=np.int64),
    })


def _kinds(tie: np.ndarray, tie_kind: pd.Series) -> np.ndarray:
    """Each group's tie kind as the viewer's filter names it: all_correct, all_wrong, other (a tie of equal partial
    rewards) or mixed (no tie)."""
    kinds = tie_kind.astype(object).where(tie_kind.notna(), "other").to_numpy(object)
    return np.where(tie, kinds, "mixed")


def _replies(jobs: pd.DataFrame, frame: pd.DataFrame, job_index: dict[str, int]) -> dict[int, dict]:
    """The kept replies of each training group that has some, keyed by its row in `frame`: a completions row is
    matched to its group by (job, step, prompt, round), the n-th such completions group to the n-th such group."""
    found = [read_completions(Path(run_dir)).assign(job=job_index[str(name)])
             for name, run_dir in zip(jobs["job"], jobs["path"])]
    kept = pd.concat([f for f in found if not f.empty], ignore_index=True) if any(not f.empty for f in found) else None
    if kept is None:
        return {}
    key = ["job", "step", "prompt_id", "round"]
    order = frame.assign(prompt_id=frame["prompt"]).reset_index()
    order["nth"] = order.groupby(key, sort=False).cumcount()
    heads = kept.drop_duplicates([*key, "group"])[[*key, "group"]]
    heads = heads.assign(nth=heads.groupby(key, sort=False).cumcount())
    placed = heads.merge(order[[*key, "nth", "index"]], on=[*key, "nth"], how="inner")
    kept = kept.merge(placed[[*key, "group", "index"]], on=[*key, "group"], how="inner")
    out: dict[int, list[dict]] = {}
    for index, rows in kept.sort_values("sample").groupby("index", sort=False):
        out[int(index)] = {"prompt": _text(rows["prompt"].iloc[0]),
                           "gold": _text(rows["gold"].iloc[0]) if "gold" in rows else None,
                           "samples": [_reply(r) for r in rows.to_dict("records")]}
    return out


def _text(value: object) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _reply(row: dict) -> dict:
    """One reply as the page shows it: its text and what was read from it (null: not recorded)."""
    def get(name):
        value = row.get(name)
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else _plain(value)
    return {"text": _text(row.get("completion")) or "", "answer": _text(get("answer")), "answered": get("answered"),
            "tokens": get("tokens"), "truncated": get("truncated"), "reward": get("reward"), "correct": get("correct")}


@dataclass
class _Held:
    groups: pd.DataFrame
    replies: dict[int, dict]


def _held_out(jobs: pd.DataFrame, job_index: dict[str, int]) -> _Held:
    """The base evaluation's held-out groups that kept replies: one group per (job, prompt), of its kept samples."""
    rows = []
    for name, run_dir in zip(jobs["job"], jobs["path"]):
        for part in sorted((Path(run_dir) / "eval").glob("part-*.parquet")):
            table = _kept_eval(part)
            if table is not None and table.num_rows:
                rows.append(table.to_pandas().assign(job=job_index[str(name)]))
    if not rows:
        return _Held(pd.DataFrame(columns=["job"]), {})
    kept = pd.concat(rows, ignore_index=True)
    kept = kept[kept["step"] == kept.groupby("job")["step"].transform("min")]  # the base evaluation only
    groups, replies = [], {}
    for (job, prompt), samples in kept.sort_values("sample").groupby(["job", "prompt_id"], sort=False):
        correct = samples["correct"].astype(bool).to_numpy()
        rewards = correct.astype(float)
        answered = samples["answered"] if "answered" in samples else samples["answer"].notna()
        kind = "mixed" if 0 < correct.sum() < len(correct) else "all_correct" if correct.all() else "all_wrong"
        if len(correct) == 1:
            kind = "mixed"  # one reply ties with nothing
        replies[len(groups)] = {"prompt": _text(samples["prompt"].iloc[0]) if "prompt" in samples else None,
                                "gold": _text(samples["gold"].iloc[0]) if "gold" in samples else None,
                                "samples": [_reply({**r, "reward": float(r["correct"])})
                                            for r in samples.to_dict("records")]}
        groups.append({"job": job, "step": int(samples["step"].iloc[0]), "prompt": str(prompt),
                       "difficulty": str(samples["difficulty"].iloc[0]), "round": 0, "kind": kind,
                       "rewards": rewards.tolist(), "correct": correct.tolist(), "advantages": None,
                       "tokens": int(samples["tokens"].sum()) if samples["tokens"].notna().all() else -1,
                       "truncated": -1,
                       "answered": int(answered.astype(bool).sum()), "used": False, "src": HELD_OUT})
    return _Held(pd.DataFrame(groups), replies)


def _kept_eval(part: Path) -> pa.Table | None:
    """An eval part's rows that kept their reply (null elsewhere), or None where it keeps none."""
    names = pq.read_schema(part).names
    if "completion" not in names:
        return None
    wanted = [c for c in ("step", "prompt_id", "difficulty", "sample", "answer", "answered", "correct", "tokens",
                          "completion", "prompt", "gold") if c in names]
    table = pq.read_table(part, columns=wanted)
    return table.filter(pc.is_valid(table.column("completion")))


def _sample(frame: pd.DataFrame, max_groups: int) -> tuple[np.ndarray, dict]:
    """The rows shown, in order, and how they were chosen. Units are (step, prompt) across every job (the same
    prompt in every arm, and every round of it, together); groups with replies come first, then units by a
    fixed hash of (step, prompt) until `max_groups` is reached. Every group with replies is always kept."""
    if len(frame) <= max_groups:
        return frame.index.to_numpy(), {"whole": True, "rule": f"every group ({len(frame):,})"}
    unit = frame["step"].astype(str) + "\x1f" + frame["prompt"].astype(str)
    ranked = pd.DataFrame({"unit": unit, "text": frame["has_text"]})
    per_unit = ranked.groupby("unit", sort=False).agg(size=("text", "size"), text=("text", "any"))
    per_unit["hash"] = pd.util.hash_pandas_object(per_unit.index.to_series(), index=False).to_numpy(np.uint64)
    per_unit = per_unit.sort_values(["text", "hash"], ascending=[False, True])
    within = per_unit["size"].cumsum() <= max_groups
    keep = per_unit.index[within | per_unit["text"]]
    chosen = frame.index[unit.isin(keep)].to_numpy()
    with_text = int(frame["has_text"].sum())
    rule = (f"{len(chosen):,} of {len(frame):,} groups: the {with_text:,} with replies (the first step's group of "
            "each difficulty, log_completions, the base evaluation's held-out replies) and, with them, every group of "
            "the same prompt at the same step in every job; then whole (step, prompt) units across every job, those "
            "with the smallest hash of step and prompt id (pandas' hash_pandas_object), until the page holds "
            f"{max_groups:,} groups")
    return chosen, {"whole": False, "rule": rule}


def _columns(shown: pd.DataFrame) -> dict[str, list]:
    """The shown groups as one list per field; rewards and advantages rounded to 4 places."""
    text_at = np.cumsum(shown["has_text"].to_numpy()) - 1
    return {
        "job": shown["job"].astype(int).tolist(), "step": shown["step"].astype(int).tolist(),
        "prompt": shown["prompt"].tolist(), "difficulty": shown["difficulty"].tolist(),
        "round": shown["round"].astype(int).tolist(), "kind": shown["kind"].tolist(),
        "rewards": [_rounded(r) for r in shown["rewards"]], "correct": [_bools(c) for c in shown["correct"]],
        "advantages": [_rounded(a) for a in shown["advantages"]], "tokens": shown["tokens"].astype(int).tolist(),
        "truncated": shown["truncated"].astype(int).tolist(), "answered": shown["answered"].astype(int).tolist(),
        "used": shown["used"].astype(bool).tolist(), "src": shown["src"].astype(int).tolist(),
        "text": np.where(shown["has_text"].to_numpy(), text_at, -1).astype(int).tolist(),
    }


def _rounded(values: object) -> list | None:
    """A list of floats rounded to 4 places; NaN (a sample that did not train) as null; None stays None."""
    if values is None or (isinstance(values, float) and math.isnan(values)):
        return None
    return [None if v is None or math.isnan(v) else round(float(v), 4) for v in values]


def _bools(values: object) -> list | None:
    return None if values is None else [bool(v) for v in values]


def _heatmaps(train: pd.DataFrame, arms: list[str], arm_order: list[str]) -> dict:
    """Each arm's tie rate by (step bin, difficulty) over every first-round group (the report's tie fractions count
    first rounds: a redraw is drawn because its prompt tied), with each cell's group count."""
    first = train[train["round"] == 0]
    if first.empty:
        return {"bins": [], "difficulties": [], "arms": {}}
    last = int(first["step"].max())
    width = max(1, math.ceil(last / HEAT_COLUMNS))
    bins = [[lo, min(lo + width - 1, last)] for lo in range(1, last + 1, width)]
    difficulties = natural_sorted(first["difficulty"].unique())
    col = ((first["step"].to_numpy() - 1) // width).clip(0, len(bins) - 1)
    arm_of_row = np.asarray(arms, dtype=object)[first["job"].to_numpy()]
    counts = pd.DataFrame({"arm": arm_of_row, "col": col, "difficulty": first["difficulty"].to_numpy(),
                           "tie": first["kind"].to_numpy() != "mixed",
                           "all_correct": first["kind"].to_numpy() == "all_correct",
                           "all_wrong": first["kind"].to_numpy() == "all_wrong"})
    cells = counts.groupby(["arm", "difficulty", "col"]).agg(n=("tie", "size"), ties=("tie", "sum"),
                                                            correct=("all_correct", "sum"), wrong=("all_wrong", "sum"))
    found = {key: [int(v) for v in values] for key, values in zip(cells.index, cells.to_numpy())}
    out = {arm: [[found.get((arm, d, c)) for c in range(len(bins))] for d in difficulties] for arm in arm_order}
    return {"bins": bins, "difficulties": [str(d) for d in difficulties], "arms": out}

