"""Other tools' GRPO runs as grpo-lab runs: their logged completions read into a run directory (groups, steps and
eval tables, run.json, config.json), which `python -m analysis` and the notebook API read like any run.

    python -m analysis.ingest trl  OUTPUT_DIR       --out RUN_DIR [options]   # GRPOConfig(log_completions=True)
    python -m analysis.ingest verl ROLLOUT_DATA_DIR --out RUN_DIR [--validation VALIDATION_DATA_DIR] [options]

Each reader (`trl`, `verl`) says in its docstring what its tool writes and how groups are rebuilt from it;
`tables` turns what it read into the table contract; `writer` writes the run only where it is the ingest's to
write. Every choice (grouping, reward, correctness, difficulty, token counts) and everything the source lacks is
recorded in run.json's `imported` block, which the report's provenance quotes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from analysis.ingest import trl, verl
from analysis.ingest.logs import IngestError, Logged
from analysis.ingest.tables import Reading, build
from analysis.ingest.writer import check_writable, write

READERS: dict[str, Callable[..., Logged]] = {"trl": trl.read, "verl": verl.read}

__all__ = ["IngestError", "READERS", "Reading", "ingest"]


def ingest(tool: str, source: str | Path, out: str | Path, reading: Reading | None = None,
           group_size: int | None = None, reward_weights: Sequence[float] | None = None,
           validation: str | Path | None = None, settings: dict | None = None) -> Path:
    """Read `tool`'s logs at `source` into the run directory `out`; returns `out`. `settings`: config keys to
    record (dotted key -> value), so ingested runs compare as arms and seeds (`seed`, `algo.beta`, ...)."""
    reading = reading or Reading()
    if tool not in READERS:
        raise IngestError(f"{tool!r}: not a tool the ingest reads (one of {', '.join(READERS)})")
    source, out = Path(source), Path(out)
    if not source.is_dir():
        raise IngestError(f"{source}: no such folder")
    if group_size is not None and group_size < 2:
        raise IngestError(f"--group-size {group_size}: a group needs at least 2 completions")
    if validation is not None and tool != "verl":
        raise IngestError(f"--validation: {tool} logs no held-out completions apart from training ones")
    if validation is not None and not Path(validation).is_dir():
        raise IngestError(f"--validation {validation}: no such folder")
    check_writable(out)  # before any reading: a folder not the ingest's is one line at once
    options = {"group_size": group_size}
    if tool == "trl":
        options["reward_weights"] = list(reward_weights) if reward_weights else None
    elif reward_weights:
        raise IngestError("--reward-weights: verl logs the one score it trained on")
    else:
        options["validation"] = Path(validation) if validation is not None else None
    logged = READERS[tool](source, **options)
    run_id = f"{tool}-{hashlib.sha1(str(source.resolve()).encode()).hexdigest()[:10]}"
    built = build(logged, run_id, reading)
    settings = settings or {}
    sizes = built.groups.column("group_size").to_numpy()
    per_step = built.groups.group_by("step").aggregate([("step", "count")]).column("step_count").to_numpy()
    # TRL and verl draw every prompt's group once, as grpo-lab's `fixed` sampler does (verl with DAPO's
    # filter_groups dumps only the groups it kept: --set sampler.name=dynamic says so); no tool logs the seed beside
    # its completions, so runs of one arm need theirs told apart (--set seed=N)
    config = {"source.tool": tool, "seed": 0, "sampler.name": "fixed", "sampler.group_size": int(sizes.max()),
              "prompts_per_step": int(per_step.max()),
              "task.difficulty": "pass_rate" if reading.difficulty_from == "pass_rate" else "level", **settings}
    how = {**logged.how, **built.how, **({} if "seed" in settings else {"seed": "not in the logs: 0 (--set seed=N)"})}
    record = {
        "run_id": run_id, "status": "done", "started": None, "finished": None, "version": None,
        "imported": {"tool": tool, "version": logged.version, "source": str(source.resolve()), "files": logged.files,
                     "how": how, "absent": logged.absent, "tie_check": built.tie_check,
                     "ingested": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    }
    write(out, record, config, {"groups": built.groups, "steps": built.steps, "eval": built.eval})
    return out
