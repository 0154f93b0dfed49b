"""Every evaluation of a run: the settings its rows were sampled under, the part each one's rows go to, and the
record of every evaluation that wrote rows (`<run>/evaluations.jsonl`).

A run's own evaluation (the trainer's: `eval.n`, `eval.temperature`, `rollout.max_new_tokens`) writes
`eval/part-<step>.parquet`, the name the trainer's resume looks for; an evaluation at other settings
(`experiments.evaluate n=4 temperature=0.5`) writes `eval/part-<step>-n4-t0.5-p1-m6.parquet` beside it, so no
evaluation ever writes over another's rows, and two evaluations' rows are never taken for one.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from grpo_lab.run.tables import EVAL, part_path, parts

RECORD_NAME = "evaluations.jsonl"
SETTING_COLUMNS = ("n", "temperature", "top_p", "max_new_tokens")


def _float32(x: float) -> float:
    """`x` as the eval table stores it (float32), back as a Python float: what two settings are compared by."""
    return float(np.float32(x))


def _short(x: float) -> str:
    """The shortest text that reads back as the same float32: 0.7 -> "0.7", 1.0 -> "1"."""
    return np.format_float_positional(np.float32(x), trim="-")


@dataclass(frozen=True)
class EvalSetting:
    """How an evaluation sampled: n samples per held-out prompt at `temperature` (0: greedy), nucleus `top_p`
    (1: none; evaluation has no top_p yet, recorded so that another engine can) and `max_new_tokens`."""

    n: int
    temperature: float
    top_p: float
    max_new_tokens: int

    def __post_init__(self) -> None:  # compared as stored: a float32 each
        object.__setattr__(self, "temperature", _float32(self.temperature))
        object.__setattr__(self, "top_p", _float32(self.top_p))

    @property
    def tag(self) -> str:
        """The part-name tag of an evaluation at these settings: "n4-t0.5-p1-m6"."""
        return f"n{self.n}-t{_short(self.temperature)}-p{_short(self.top_p)}-m{self.max_new_tokens}"

    def text(self) -> str:
        """"n=16 temperature=1 top_p=1 max_new_tokens=6": as a user types them."""
        return (f"n={self.n} temperature={_short(self.temperature)} top_p={_short(self.top_p)} "
                f"max_new_tokens={self.max_new_tokens}")

    def columns(self) -> dict:
        """The settings as JSON records them: each float as its shortest text reads (0.7, not 0.699999988...)."""
        return {**asdict(self), "temperature": float(_short(self.temperature)), "top_p": float(_short(self.top_p))}


def own_setting(cfg) -> EvalSetting | None:
    """The settings of the run's own evaluation (its config's eval block; the rollout's token limit), or None
    when the run evaluates nothing itself (eval.n = 0)."""
    if not cfg.eval.n:
        return None
    return EvalSetting(cfg.eval.n, cfg.eval.temperature, 1.0, cfg.rollout.max_new_tokens)


def setting_tag(cfg, setting: EvalSetting) -> str | None:
    """The part tag an evaluation at `setting` writes under: None (the run's own part) at the run's own
    settings, else the settings' tag."""
    return None if setting == own_setting(cfg) else setting.tag


def existing_rows(run_dir: Path, step: int, tag: str | None) -> tuple[Path, str] | None:
    """The part an evaluation at (`step`, `tag`) would replace, with what its rows say of their settings; None
    when there is none. Reads the part's footer and its setting columns only."""
    path = part_path(run_dir, "eval", step, tag)
    if not path.exists():
        return None
    return path, described_settings(path)


def described_settings(path: Path) -> str:
    """The settings a part's rows recorded ("n=16 temperature=1.0 ..."), or what is known of a part written before
    rows recorded them (its samples per prompt)."""
    try:
        table = pq.read_table(path, columns=[c for c in (*SETTING_COLUMNS, "sample")
                                             if c in pq.read_schema(path).names])
    except (OSError, ValueError) as e:
        return f"an unreadable part ({e})"
    if "n" in table.column_names and table.num_rows and table.column("n").null_count == 0:
        first = table.slice(0, 1).to_pylist()[0]
        return EvalSetting(**{c: first[c] for c in SETTING_COLUMNS}).text()
    samples = max(table.column("sample").to_pylist(), default=-1) + 1 if "sample" in table.column_names else 0
    return f"n={samples} (settings not recorded: written by an older version)"


def command_line() -> str:
    """The command this process runs, as a user would type it ("python -m experiments.evaluate run_dir=R n=4")."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    head = ["python", "-m", spec.name] if spec is not None and spec.name != "__main__" else ["python", sys.argv[0]]
    return shlex.join([*head, *sys.argv[1:]])


def record_evaluation(run_dir: Path, *, process: str, step: int, setting: EvalSetting, part: Path, rows: int,
                      run_id: str, git: dict | None, replaced: bool = False, same_as: int | None = None) -> None:
    """Append one line to `<run>/evaluations.jsonl` for an eval part just written: which process (train or
    evaluate), the step, the settings, the part, its rows, whether it replaced rows of the same settings, the
    command line, the git commit and the time; `same_as`, only where it is set: the step whose rows these are
    (the model took no optimizer step between, `same_model_rows`). Append-only and written by the run's lock holder
    alone; a line torn by a kill is closed first, so it spoils only itself (`read_evaluations` skips it)."""
    line = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "process": process, "run_id": run_id,
            "step": step, **setting.columns(), "part": part.relative_to(run_dir).as_posix(), "rows": rows,
            "replaced": replaced, "command": command_line(), "git": git, "pid": os.getpid(),
            "host": socket.gethostname(), **({"same_as": same_as} if same_as is not None else {})}
    path = Path(run_dir) / RECORD_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        torn = os.fstat(fd).st_size > 0 and not _ends_with_newline(path)
        os.write(fd, (("\n" if torn else "") + json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def record_own_evaluation(run_dir: Path, cfg, step: int, rows: int, run_id: str, same_as: int | None = None) -> None:
    """`record_evaluation` of the trainer's evaluation at `step` (its own part, the code in its run.json)."""
    try:
        git = json.loads((Path(run_dir) / "run.json").read_text()).get("git")
    except (OSError, ValueError, AttributeError):
        git = None
    record_evaluation(run_dir, process="train", step=step, setting=own_setting(cfg),
                      part=part_path(run_dir, "eval", step), rows=rows, run_id=run_id, git=git, same_as=same_as)


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def read_evaluations(run_dir: Path) -> list[dict]:
    """The lines of `<run>/evaluations.jsonl` that are whole JSON objects of this run (its run.json's run_id; a
    line of a run that resume=never replaced is not its), in order; [] when there is no record."""
    try:
        text = (Path(run_dir) / RECORD_NAME).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    try:
        run_id = json.loads((Path(run_dir) / "run.json").read_text()).get("run_id")
    except (OSError, ValueError, AttributeError):
        run_id = None
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line torn by a kill
        if isinstance(entry, dict) and (run_id is None or entry.get("run_id") == run_id):
            out.append(entry)
    return out


def not_the_trainers(run_dir: Path) -> set[str]:
    """The parts ("eval/part-000004.parquet") whose last line in evaluations.jsonl says another process than the
    trainer wrote them (experiments.evaluate, overwrite=true at the run's own settings included): rows the training
    run cannot redraw, so no cleanup of its own may delete them. A part no line names is the trainer's (a run from
    before the record, or one killed between its part and its line)."""
    last: dict[str, object] = {}
    for entry in read_evaluations(run_dir):
        if isinstance(entry.get("part"), str):
            last[entry["part"]] = entry.get("process")
    return {part for part, process in last.items() if process != "train"}


def same_model_rows(run_dir: Path, cfg, step: int, updates: int) -> tuple[int, list[dict]] | None:
    """The trainer's last evaluation before `step` when the policy has taken no optimizer step since (its rows'
    `updates` are `updates`): (its step, its rows as of `step`: their step, and no reply's text, which only the base
    evaluation keeps), which measured the very weights an evaluation at `step` would; None where there is none, or
    its rows are not all of the run's own settings and that count of updates (a part written before rows recorded
    them, or one `not_the_trainers`). Read from the tables alone, so a resumed run decides as the run it continues
    did. Reads only."""
    theirs = not_the_trainers(run_dir)
    earlier = [(s, p) for s, p in parts(run_dir, "eval") if s < step and f"eval/{p.name}" not in theirs]
    if not earlier:
        return None
    at, path = earlier[-1]
    rows = pq.read_table(path, schema=EVAL).to_pylist()
    setting = own_setting(cfg)
    keys = {(r["updates"], r["n"], r["temperature"], r["top_p"], r["max_new_tokens"]) for r in rows}
    if setting is None or keys != {(updates, setting.n, setting.temperature, setting.top_p, setting.max_new_tokens)}:
        return None
    return at, [r | {"step": step, "completion": None, "prompt": None, "gold": None} for r in rows]
