"""A tool's logged completions (`logs.Logged`) as grpo-lab's tables: groups, steps and eval rows, in the table
contract (analysis/data/schema.py) that every report section reads.

Each group's tie is recomputed from its rewards (zero spread: every reward equal, as eq. 3 then gives every sample
advantage 0), never read from a flag the tool logged; a sample is correct where its correctness column (the reward,
or `--correct-from`) is at least `--correct-at`, so a tie's kind is all_correct, all_wrong, or other (tied on a
value between, as continuous or shaped rewards can be).

Token counts come from a logged field, else a tokenizer re-encoding the completion texts, else they are absent: the
`tokens` and `tokens_total` columns are then null (the contract allows it for ingested runs), and the report leaves
out what it would have measured with them (`TOKENS_ABSENT`), as run.json's `imported.absent` says.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from analysis.ingest.logs import IngestError, Logged

PASS_RATE = "pass_rate"
TOKEN_COLUMN = "completion_tokens"  # a column of generated token counts, used where the logs have it
# what a run without token counts leaves out of its report (each section says so in one line where it would be)
TOKENS_ABSENT = ("the report leaves out its section at equal tokens and the generated-tokens panel of the cost "
                 "figure, and shows tokens as – in its spend and pass@k tables and its budget line")
NO_TOKENS = (f"no `{TOKEN_COLUMN}` field (--tokens-from names another), no --tokenizer, and no tokenizer.json in the "
             "source or its checkpoint-*/ folders")


@dataclass(frozen=True)
class Reading:
    """How the logged fields become the tables' columns (the ingest's options)."""

    difficulty_from: str = PASS_RATE  # a logged field, or the pass rate of the prompt's first group
    correct_from: str = "reward"  # the column a sample's correctness is read from
    correct_at: float = 1.0  # correct where that column is >= this
    answer_from: str | None = None  # the field holding the extracted answer (held-out rows' `answer`)
    tokens_from: str | None = None  # the field holding each completion's generated token count
    tokenizer: Path | None = None  # else a tokenizer.json to count the completion text's tokens with
    difficulty_order: tuple[str, ...] | None = None  # a logged field's labels in order (None: as first logged)


@dataclass
class Built:
    groups: pa.Table
    steps: pa.Table
    eval: pa.Table | None
    completions: pa.Table | None = None  # every logged completion's text, for the viewer (analysis/view)
    how: dict[str, str] = field(default_factory=dict)  # what the provenance says of each choice
    absent: list[str] = field(default_factory=list)  # what the logs lacked that the tables would have held
    tie_check: dict | None = None  # the recomputed ties against the tool's own logged fraction, per step
    difficulty_order: list[str] | None = None  # a logged difficulty field's labels in order (run.json; the report's)


def prompt_id(text: str) -> str:
    """A prompt's id: its text's hash, so the same prompt has one id in every run ingested."""
    return "p" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def pass_rate_bin(p: float, bins: int = 5) -> str:
    """grpo-lab's difficulty bin of a pass rate (grpo_lab/rollout/evaluation.py): "p0.0-0.2", ..., "p0.8-1.0"."""
    k = min(int(p * bins), bins - 1)
    return f"p{k / bins:.1f}-{(k + 1) / bins:.1f}"


def build(logged: Logged, run_id: str, reading: Reading) -> Built:
    """The groups, steps and eval tables of `logged` (IngestError, one line, for a field that is not there)."""
    how: dict[str, str] = {}
    for frame in (logged.samples, logged.held_out):  # an infinite reward would enter every mean as a number
        rewards = pd.to_numeric(frame["reward"], errors="coerce").to_numpy(np.float64) if len(frame) else np.zeros(0)
        with np.errstate(over="ignore"):  # the tables keep rewards in float32: 1e39 is an infinity there
            finite = np.isfinite(rewards.astype(np.float32))
        if not finite.all():
            at = int(np.flatnonzero(~finite)[0])
            raise IngestError(f"{frame['where'].iloc[at]}: reward {rewards[at]:g} is not a finite number "
                              "(the tables keep rewards as float32)")
    samples = _prepared(logged.samples, reading, logged, how, "training")
    absent = [] if samples["tokens"].notna().all() else [f"token counts ({NO_TOKENS}): {TOKENS_ABSENT}"]
    groups = _groups(samples, run_id, logged.reward_columns)
    steps = _steps(groups, logged.tool_steps, run_id)
    completions = _completions(samples, groups)
    evaluated = None
    if len(logged.held_out):
        held_out = _prepared(logged.held_out, reading, logged, how, "held-out")
        if held_out["tokens"].isna().any() and not absent:
            absent.append(f"the evaluated samples' token counts ({NO_TOKENS}): their tokens are null")
        evaluated = _eval(held_out, groups, run_id, reading)
    order = _difficulty_order(samples, logged.held_out if evaluated is None else held_out, reading, how)
    return Built(groups=groups, steps=steps, eval=evaluated, completions=completions, how=how, absent=absent,
                 tie_check=_tie_check(steps, logged.tool_ties), difficulty_order=order)


def _difficulty_order(samples: pd.DataFrame, held_out: pd.DataFrame, reading: Reading, how: dict) -> list[str] | None:
    """A logged difficulty field's labels in order: `--difficulty-order` (which must name every label logged), else
    as first logged (training rows in step order, then held-out labels not among them); None for pass-rate bins,
    whose natural order is their rates'."""
    if reading.difficulty_from == PASS_RATE:
        if reading.difficulty_order:
            raise IngestError("--difficulty-order: orders the labels of a logged field (--difficulty-from FIELD); "
                              "pass-rate bins sort by their rates")
        return None
    frames = [f.iloc[np.argsort(f["step"].to_numpy(), kind="stable")] for f in (samples, held_out) if len(f)]
    found = list(dict.fromkeys(label for f in frames for label in f["difficulty"]))
    if not reading.difficulty_order:
        how["difficulty order"] = f"as first logged: {', '.join(found)}"
        return found
    given = list(dict.fromkeys(reading.difficulty_order))
    missing = [label for label in found if label not in given]
    if missing:
        raise IngestError(f"--difficulty-order {','.join(given)}: does not name {', '.join(missing)} (logged "
                          f"{reading.difficulty_from}: {', '.join(found)})")
    how["difficulty order"] = f"--difficulty-order: {', '.join(given)}"
    return given


def _prepared(frame: pd.DataFrame, reading: Reading, logged: Logged, how: dict, kind: str) -> pd.DataFrame:
    """`frame` with prompt_id, difficulty, correct and tokens columns."""
    frame = frame.copy()
    frame["prompt_id"] = frame["prompt"].map(prompt_id)
    value = _numbers(frame, reading.correct_from, logged)
    frame["correct"] = value >= reading.correct_at
    how["correct"] = f"`{reading.correct_from}` >= {reading.correct_at:g}"
    frame["tokens"], counted = _tokens(frame, reading, logged)
    if how.setdefault("tokens", counted) != counted:  # held-out rows counted otherwise than training ones
        how["tokens (held-out)"] = counted
    if reading.difficulty_from == PASS_RATE:
        first = frame[frame["step"] == frame.groupby("prompt_id")["step"].transform("min")]
        rate = first.groupby("prompt_id")["correct"].mean()
        frame["difficulty"] = frame["prompt_id"].map(rate.map(pass_rate_bin))
        how[f"difficulty ({kind})"] = (
            "a bin of each prompt's pass rate in its first " + ("group" if kind == "training" else "evaluation")
            + " (the tool's run holds no base-model measurement: these groups' ties are partly so by construction)")
    else:
        field_ = reading.difficulty_from
        if field_ not in frame:
            raise IngestError(f"--difficulty-from {field_}: no such field in the {kind} rows of {logged.source} "
                              f"(fields: {_fields(frame)}; or --difficulty-from {PASS_RATE})")
        missing = frame[field_].isna().to_numpy()
        if missing.any():
            raise IngestError(f"{frame['where'].iloc[int(np.argmax(missing))]}: no {field_} (--difficulty-from)")
        frame["difficulty"] = frame[field_].map(_label)
        how[f"difficulty ({kind})"] = f"the logged field `{field_}`"
    return frame


def _label(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _fields(frame: pd.DataFrame) -> str:
    return ", ".join(c for c in frame.columns if c not in ("where", "group", "prompt_id", "correct", "tokens"))


def _numbers(frame: pd.DataFrame, column: str, logged: Logged) -> np.ndarray:
    if column not in frame:
        raise IngestError(f"--correct-from {column}: no such field in {logged.source} (fields: {_fields(frame)})")
    values = pd.to_numeric(frame[column].map(lambda v: float(v) if isinstance(v, bool) else v), errors="coerce")
    bad = values.isna().to_numpy()
    if bad.any():
        at = int(np.argmax(bad))
        raise IngestError(f"{frame['where'].iloc[at]}: {column} {frame[column].iloc[at]!r} is not a number "
                          "(--correct-from)")
    return values.to_numpy(np.float64)


def _tokens(frame: pd.DataFrame, reading: Reading, logged: Logged) -> tuple[pd.Series, str]:
    """Each completion's token count, and how it was had: a logged field (exact), else the completion text
    re-encoded with `--tokenizer` or one saved in the source's checkpoints, else none (nulls)."""
    field_ = reading.tokens_from or (TOKEN_COLUMN if TOKEN_COLUMN in frame else None)
    if field_ is not None:
        if field_ not in frame:
            raise IngestError(f"--tokens-from {field_}: no such field in {logged.source} (fields: {_fields(frame)})")
        counts = pd.to_numeric(frame[field_], errors="coerce")
        bad = (counts.isna() | (counts < 0) | (counts != np.floor(counts))).to_numpy()
        if bad.any():
            at = int(np.argmax(bad))
            raise IngestError(f"{frame['where'].iloc[at]}: {field_} {frame[field_].iloc[at]!r} is no token count")
        # a reader that counted them from logged token ids says how (open-instruct's, NeMo-RL's)
        said = logged.how.get("tokens") if field_ == TOKEN_COLUMN and not reading.tokens_from else None
        return counts.astype(np.int64), said or f"the logged field `{field_}` (exact)"
    path = reading.tokenizer or _found_tokenizer(Path(logged.source))
    if path is None:
        return pd.Series(None, index=frame.index, dtype=object), "none (null): not in the logs"
    from tokenizers import Tokenizer  # reads a JSON file: runs no code

    file = path / "tokenizer.json" if path.is_dir() else path
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as e:  # noqa: BLE001 (tokenizers raises its own exception kinds)
        raise IngestError(f"--tokenizer {file}: not a tokenizers JSON file ({str(e).splitlines()[0][:80]})") from None
    encoded = tokenizer.encode_batch(list(frame["completion"]), add_special_tokens=False)
    found = "" if reading.tokenizer else f" found at {path}"
    return (pd.Series([len(e.ids) for e in encoded], index=frame.index, dtype=np.int64),
            f"the completion text re-encoded with `{file.name}`{found} (no end token: a few tokens from exact)")


def _found_tokenizer(source: Path) -> Path | None:
    """A TRL output_dir's tokenizer.json: its own, else its last checkpoint's (TRL saves it with each)."""
    if (source / "tokenizer.json").is_file():
        return source / "tokenizer.json"
    saved = sorted(source.glob("checkpoint-*/tokenizer.json"),
                   key=lambda p: int(p.parent.name.rsplit("-", 1)[-1]) if p.parent.name.rsplit("-", 1)[-1].isdigit()
                   else -1)
    return saved[-1] if saved else None


def _in_groups(samples: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
    """The samples in step order, then in the order the tool logged the groups' first rows: (that frame, the rows
    taking each group's samples together, groups in order; each group's size; where each group starts there)."""
    order = samples.iloc[np.lexsort((np.arange(len(samples)), samples["step"].to_numpy()))]
    code, _ = pd.factorize(order["step"].astype(str) + "\x00" + order["group"].astype(str))  # first seen, first
    rows = np.argsort(code, kind="stable")  # (samples,) each group's rows together, groups in order
    size = np.bincount(code)  # (groups,)
    return order, rows, size, np.r_[0, np.cumsum(size)[:-1]]


def _groups(samples: pd.DataFrame, run_id: str, reward_columns: list[str]) -> pa.Table:
    """One row per group, in step order, then in the order the tool logged the groups' first rows."""
    order, rows, size, start = _in_groups(samples)
    first = rows[start]  # (groups,) each group's first row in `order`
    reward = order["reward"].to_numpy(np.float64)[rows]
    correct = order["correct"].to_numpy(bool)[rows]
    counted = order["tokens"].notna().all()  # token counts are the run's, or none at all
    tokens = np.add.reduceat(order["tokens"].to_numpy(np.int64)[rows], start) if counted else None
    n_correct = np.add.reduceat(correct.astype(np.int64), start)
    mean = np.add.reduceat(reward, start) / size
    spread = np.repeat(mean, size)
    tie = np.maximum.reduceat(reward, start) == np.minimum.reduceat(reward, start)
    kind = np.where(n_correct == size, "all_correct", np.where(n_correct == 0, "all_wrong", "other"))
    step = order["step"].to_numpy()[first]
    unit = pd.Series(step).groupby(step).cumcount().to_numpy()  # the group's place in its step
    offsets = pa.array(np.r_[0, np.cumsum(size)].astype(np.int32))
    columns = {
        "run_id": pa.array([run_id] * len(size)), "step": pa.array(step, pa.int32()),
        "prompt_id": pa.array(order["prompt_id"].to_numpy(object)[first]),
        "difficulty": pa.array(order["difficulty"].to_numpy(object)[first].astype(str)),
        "round": pa.array(np.zeros(len(size)), pa.int16()), "group_size": pa.array(size, pa.int16()),
        "rewards": pa.ListArray.from_arrays(offsets, pa.array(reward.astype(np.float32))),
        "correct": pa.ListArray.from_arrays(offsets, pa.array(correct)),
        "reward_mean": pa.array(mean, pa.float32()),
        "reward_std": pa.array(np.sqrt(np.add.reduceat((reward - spread) ** 2, start) / size), pa.float32()),
        "n_correct": pa.array(n_correct, pa.int16()), "tie": pa.array(tie),
        "tie_kind": pa.array(np.where(tie, kind, None), pa.string()), "used": pa.array(np.ones(len(size), bool)),
        "tokens": _counts(tokens, len(size), pa.int32()), "samples_total": pa.array(np.cumsum(size), pa.int64()),
        "tokens_total": _counts(None if tokens is None else np.cumsum(tokens), len(size), pa.int64()),
        "unit": pa.array(unit, pa.int32()),
        # eq. 3 gives a sample a nonzero advantage where its reward is off its group's mean (none in a tie)
        "n_informative": pa.array(np.where(tie, 0, np.add.reduceat((reward != spread).astype(np.int64), start)),
                                  pa.int16()),
    }
    if "truncated" in order:  # samples cut at the length limit, where the tool logged why each one ended
        cut = order["truncated"].to_numpy(bool)[rows].astype(np.int64)
        columns["truncated"] = pa.array(np.add.reduceat(cut, start), pa.int16())
    if "advantage" in order:  # the advantage each sample trained with, as the tool logged it
        logged = pd.to_numeric(order["advantage"], errors="coerce").to_numpy(np.float64)[rows]
        columns["advantages"] = pa.ListArray.from_arrays(offsets, pa.array(logged.astype(np.float32)))
    for name in (c for c in reward_columns if c in order and c != "reward"):  # each function's own values
        columns[f"rewards_{name}"] = pa.ListArray.from_arrays(offsets, pa.array(order[name].to_numpy(np.float64)[rows]))
    return pa.table(columns)


def _completions(samples: pd.DataFrame, groups: pa.Table) -> pa.Table:
    """Every logged completion as a row of the completions table (grpo_lab/run/tables.py), its group's by the
    groups table's order: the texts the viewer shows beside each group's numbers."""
    order, rows, size, start = _in_groups(samples)
    ordered = order.iloc[rows]
    group = np.repeat(groups.column("unit").to_numpy(), size)  # the group's place among its step's groups
    sample = np.arange(len(rows)) - np.repeat(start, size)
    per_group = {c: np.repeat(groups.column(c).to_numpy(zero_copy_only=False), size)
                 for c in ("run_id", "prompt_id", "difficulty", "tie", "tie_kind", "used")}
    tokens = ordered["tokens"]
    return pa.table({
        "run_id": pa.array(per_group["run_id"]), "step": pa.array(ordered["step"].to_numpy(), pa.int32()),
        "group": pa.array(group, pa.int32()), "prompt_id": pa.array(per_group["prompt_id"]),
        "difficulty": pa.array(per_group["difficulty"]), "round": pa.array(np.zeros(len(rows)), pa.int16()),
        "sample": pa.array(sample, pa.int16()), "group_size": pa.array(np.repeat(size, size), pa.int16()),
        "prompt": pa.array(ordered["prompt"].astype(str).to_numpy(object)),
        "gold": pa.nulls(len(rows), pa.string()),  # no tool logs the reference answer beside its completions
        "completion": pa.array(ordered["completion"].astype(str).to_numpy(object)),
        "answered": pa.nulls(len(rows), pa.bool_()), "answer": pa.nulls(len(rows), pa.string()),
        "tokens": pa.array(tokens.to_numpy(), pa.int32(), from_pandas=True),
        "reward": pa.array(ordered["reward"].to_numpy(np.float64), pa.float32()),
        "correct": pa.array(ordered["correct"].to_numpy(bool)),
        "truncated": (pa.array(ordered["truncated"].to_numpy(bool)) if "truncated" in ordered
                      else pa.nulls(len(rows), pa.bool_())),
        "tie": pa.array(per_group["tie"]), "tie_kind": pa.array(per_group["tie_kind"], pa.string()),
        "used": pa.array(per_group["used"]),
    })


def _counts(values: np.ndarray | None, n: int, kind: pa.DataType) -> pa.Array:
    """Token counts as a column: null where the run has none (never 0, which would read as "no tokens")."""
    return pa.nulls(n, kind) if values is None else pa.array(values, kind)


def _steps(groups: pa.Table, tool_steps: pd.DataFrame | None, run_id: str) -> pa.Table:
    g = groups.select(["step", "group_size", "n_correct", "tie", "reward_mean", "samples_total",
                       "tokens_total"]).to_pandas()
    g["reward_sum"] = g["reward_mean"].astype(np.float64) * g["group_size"]
    per = g.groupby("step").agg(groups=("tie", "size"), tie_frac=("tie", "mean"), samples=("group_size", "sum"),
                                correct=("n_correct", "sum"), reward_sum=("reward_sum", "sum"),
                                samples_total=("samples_total", "max"), tokens_total=("tokens_total", "max"))
    per = per.reset_index()
    metrics = ("loss", "pg_loss", "kl", "clip_frac", "grad_norm", "lr", "t_rollout", "t_update", "t_total")
    logged = (tool_steps.set_index("step") if tool_steps is not None and len(tool_steps)
              else pd.DataFrame(index=pd.Index([], name="step")))
    frame = pd.DataFrame({"run_id": run_id, "step": per["step"].astype(np.int32)})
    for name in metrics:
        frame[name] = per["step"].map(logged[name]).astype("float64") if name in logged else np.nan
    frame["reward_mean"] = per["reward_sum"] / per["samples"]
    frame["accuracy"] = per["correct"] / per["samples"]
    for name in ("tie_frac", "groups", "samples", "samples_total", "tokens_total"):
        frame[name] = per[name]
    table = pa.Table.from_pandas(frame, preserve_index=False)
    # a metric the tool never logged is null, not NaN: "not recorded", never a number; token counts likewise
    nullable = {**dict.fromkeys(metrics, pa.float64()), "tokens_total": pa.int64()}
    return table.from_arrays([pa.array(table.column(c).to_numpy(zero_copy_only=False), nullable[c], from_pandas=True)
                              if c in nullable else table.column(c) for c in table.column_names],
                             names=table.column_names)


def _eval(held_out: pd.DataFrame, groups: pa.Table, run_id: str, reading: Reading) -> pa.Table:
    """Held-out rows: `sample` numbers each prompt's completions at a step; `n` their count; the samples and tokens
    the run had drawn by that step (0 at step 0, before training)."""
    frame = held_out.sort_values(["step", "prompt_id"], kind="stable").reset_index(drop=True)
    frame["sample"] = frame.groupby(["step", "prompt_id"]).cumcount()
    frame["n"] = frame.groupby(["step", "prompt_id"])["sample"].transform("size")
    totals = groups.select(["step", "samples_total", "tokens_total"]).to_pandas().groupby("step").max()
    drawn = totals.reindex(range(int(max(totals.index.max(), frame["step"].max())) + 1)).ffill()
    drawn["samples_total"] = drawn["samples_total"].fillna(0)  # before the first training step: none drawn
    if totals["tokens_total"].notna().all():
        drawn["tokens_total"] = drawn["tokens_total"].fillna(0)
    if reading.answer_from is not None and reading.answer_from not in frame:
        raise IngestError(f"--answer-from {reading.answer_from}: no such field in the held-out rows "
                          f"(fields: {_fields(frame)})")
    answers = ([None if v is None or v != v else str(v) for v in frame[reading.answer_from]]  # NaN: no answer
               if reading.answer_from else [None] * len(frame))
    return pa.table({
        "run_id": pa.array([run_id] * len(frame)),
        "step": pa.array(frame["step"].to_numpy(), pa.int32()),
        "prompt_id": pa.array(frame["prompt_id"].to_numpy(object)),
        "difficulty": pa.array(frame["difficulty"].to_numpy(object)),
        "sample": pa.array(frame["sample"].to_numpy(), pa.int32()),
        "answer": pa.array(answers, pa.string()),
        "correct": pa.array(frame["correct"].to_numpy(bool)),
        "tokens": pa.array(frame["tokens"].to_numpy(), pa.int32(), from_pandas=True),
        "n": pa.array(frame["n"].to_numpy(), pa.int32()),
        "samples_total": pa.array(drawn["samples_total"].reindex(frame["step"]).to_numpy(np.int64), pa.int64()),
        "tokens_total": pa.array(drawn["tokens_total"].reindex(frame["step"]).to_numpy(), pa.int64(), from_pandas=True),
    })


def _tie_check(steps: pa.Table, tool_ties: dict[int, float]) -> dict | None:
    """The recomputed tie fraction per step against the tool's own (TRL's frac_reward_zero_std), where it logged one."""
    if not tool_ties:
        return None
    ours = dict(zip(steps.column("step").to_pylist(), steps.column("tie_frac").to_pylist()))
    common = sorted(s for s in tool_ties if s in ours)
    diffs = {s: abs(ours[s] - tool_ties[s]) for s in common}
    differ = [s for s in common if diffs[s] > 1e-6]  # TRL averages in float32
    return {"steps": len(common), "equal": len(common) - len(differ), "differ": differ[:10],
            "largest_difference": max(diffs.values(), default=0.0),
            "only_logged_by_tool": sorted(s for s in tool_ties if s not in ours)[:10]}
