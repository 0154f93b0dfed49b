"""Other tools' GRPO runs as grpo-lab runs: their logged completions read into a run directory (groups, steps and
eval tables, run.json, config.json), which `python -m analysis` and the notebook API read like any run.

    python -m analysis.ingest TOOL SOURCE --out RUN_DIR [options]     # TOOL: trl, verl, open_instruct, nemo_rl
    python -m analysis.ingest TOOL --help                              # what SOURCE is, its own options, an example

Each reader (`trl`, `verl`, `open_instruct`, `nemo_rl`) says in its docstring what its tool writes and how groups are
rebuilt from it, and declares its options and example (`tool.Tool`); `tables` turns what it read into the table
contract; `writer` writes the run only where it is the ingest's to write. Every choice (grouping, reward, correctness,
difficulty, token counts) and everything the source lacks is recorded in run.json's `imported` block, which the
report's provenance quotes. A new tool: its module, and its line in `TOOLS` below.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from analysis.ingest import nemo_rl, open_instruct, trl, verl
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.tables import Reading, build
from analysis.ingest.tool import Option, Tool
from analysis.ingest.writer import check_writable, write

TOOLS: dict[str, Tool] = {t.name: t for t in (trl.TOOL, verl.TOOL, open_instruct.TOOL, nemo_rl.TOOL)}

__all__ = ["TOOLS", "IngestError", "Option", "Reading", "Tool", "ingest", "not_an_option"]


def not_an_option(tool: Tool, flag: str) -> str:
    """The one line for an option `tool` does not take (another tool's, or none's)."""
    theirs = ", ".join(o.flag for o in tool.options) or "none"
    return f"{flag}: not an option of {tool.name} (its own: {theirs}; python -m analysis.ingest {tool.name} --help)"


def ingest(tool: str, source: str | Path, out: str | Path, reading: Reading | None = None,
           group_size: int | None = None, settings: dict | None = None, **options: object) -> Path:
    """Read `tool`'s logs at `source` into the run directory `out`; returns `out`. `options`: the tool's own
    (`TOOLS[tool].options`; None: not given). `settings`: config keys to record (dotted key -> value), so ingested
    runs compare as arms and seeds (`seed`, `algo.beta`, ...)."""
    reading = reading or Reading()
    if tool not in TOOLS:
        raise IngestError(f"{tool!r}: not a tool the ingest reads (one of {', '.join(TOOLS)})")
    declared = TOOLS[tool]
    given = {name: value for name, value in options.items() if value is not None}
    own = {o.name for o in declared.options}
    for name in given:
        if name not in own:
            raise IngestError(not_an_option(declared, f"--{name.replace('_', '-')}"))
    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise IngestError(f"{source}: no such folder")
    if not math.isfinite(reading.correct_at):
        raise IngestError(f"--correct-at {reading.correct_at}: must be a number (a sample is correct where its field "
                          "is at least this)")
    if group_size is not None and group_size < 2:
        raise IngestError(f"--group-size {group_size}: a group needs at least 2 completions")
    check_writable(out)  # before any reading: a folder not the ingest's is one line at once
    logged = declared.read(source, group_size=group_size, **given)
    run_id = f"{tool}-{_content_id(Path(logged.source), logged.files)}"
    built = build(logged, run_id, reading)
    record = _record(declared, logged, built.how, built.absent, built.tie_check, run_id, source, settings or {})
    if built.difficulty_order is not None:  # the report sorts the difficulties in this order, not alphabetically
        record["difficulty_order"] = built.difficulty_order
    write(out, record,
          _config(logged, built.groups, reading, settings or {}),
          {"groups": built.groups, "steps": built.steps, "eval": built.eval, "completions": built.completions})
    return out


def _content_id(source: Path, files: list[str]) -> str:
    """A run's id from what its logs hold, never where they lie: two runs written to one path in turn are two runs,
    and one run copied elsewhere is one (the report counts a run id once)."""
    digest = hashlib.sha1()
    for name in sorted(files):
        digest.update(name.encode() + b"\0")
        with open(source / name, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]


def _config(logged: Logged, groups: pa.Table, reading: Reading, settings: dict) -> dict:
    sizes = groups.column("group_size").to_numpy()
    per_step = groups.group_by("step").aggregate([("step", "count")]).column("step_count").to_numpy()
    # every tool here draws each prompt's group once, as grpo-lab's `fixed` sampler does (verl with DAPO's
    # filter_groups and open-instruct's filter_zero_std_samples write only the groups they kept: --set
    # sampler.name=dynamic says so); the seed where the logs record one (open-instruct's run name), else 0 and
    # runs of one arm need theirs told apart (--set seed=N)
    return {"source.tool": logged.tool, "seed": 0, "sampler.name": "fixed", "sampler.group_size": int(sizes.max()),
            "prompts_per_step": int(per_step.max()),
            "task.difficulty": "pass_rate" if reading.difficulty_from == "pass_rate" else "level",
            **logged.config, **settings}


def _record(tool: Tool, logged: Logged, how: dict, absent: list[str], tie_check: dict | None, run_id: str,
            source: Path, settings: dict) -> dict:
    seeded = "seed" in settings or "seed" in logged.config
    return {
        "run_id": run_id, "status": "done", "started": None, "finished": None, "version": None,
        "imported": {"tool": tool.name, "title": tool.title, "version": logged.version,
                     "source": str(source.resolve()), "files": logged.files,
                     "how": {**logged.how, **how, **({} if seeded else {"seed": "not in the logs: 0 (--set seed=N)"})},
                     "absent": [*logged.absent, *absent], "tie_check": tie_check,
                     "ingested": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    }
