"""What the jobs trained and on what, in words, from their resolved configs: the report's header names the model (a
quantised file says so: it trains as dequantised float weights, not the quantised model) and the task."""

from __future__ import annotations

import os
import re

import pandas as pd

QUANT = re.compile(r"(?:^|[._-])((?:I?Q[0-9]_[A-Z0-9_]*?|Q[0-9]|F16|BF16|F32))(?:\.gguf)?$", re.IGNORECASE)


def _value(row: pd.Series, key: str) -> str:
    value = row.get(key)
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def model_text(row: pd.Series) -> str:
    """One job's model: "the built-in tiny model", "`SmolLM2-135M-Instruct.Q4_1.gguf` (GGUF Q4_1, dequantised)",
    "`model-folder`"; "" where its config does not say (an ingested run). A job whose passes ran in bf16 says so
    ("...; bf16, model.dtype=autocast_bf16"): its numbers are not the fp32 model's."""
    name, path, gguf = (_value(row, k) for k in ("model.name", "model.path", "model.gguf_file"))
    dtype = _value(row, "model.dtype")
    cuda = dtype == "auto" and _value(row, "device").startswith("cuda")  # auto: bf16 autocast on CUDA
    bf16 = f"bf16, model.dtype={dtype}{' on CUDA' if cuda else ''}" if dtype in ("autocast_bf16", "bfloat16") or cuda \
        else ""
    if name == "tiny":
        return "the built-in tiny model" + (f" ({bf16})" if bf16 else "")
    if gguf:
        quant = QUANT.search(os.path.basename(gguf))
        kind = f"GGUF {quant.group(1).upper()}" if quant else "GGUF"
        return f"`{os.path.basename(gguf)}` ({kind}, dequantised{'; ' + bf16 if bf16 else ''})"
    return (f"`{os.path.basename(path.rstrip('/')) or path}`" + (f" ({bf16})" if bf16 else "")) if path else ""


def task_text(row: pd.Series) -> str:
    """One job's task: "arithmetic", "reasoning-gym's chain_sum", "`problems.jsonl`"; "" where not said."""
    name = _value(row, "task.name")
    if name == "gym":
        return f"reasoning-gym's {_value(row, 'task.gym.generator')}"
    if name == "mathset":
        return f"`{os.path.basename(_value(row, 'task.path'))}`"
    return name


def setup_text(jobs: pd.DataFrame) -> str:
    """" of <model> on <task>" for the header's line ("and" between distinct ones); "" where the configs say
    neither."""
    if jobs.empty:
        return ""
    models = [m for m in dict.fromkeys(model_text(r) for _, r in jobs.iterrows()) if m]
    tasks = [t for t in dict.fromkeys(task_text(r) for _, r in jobs.iterrows()) if t]
    return (f" of {' and '.join(models)}" if models else "") + (f" on {' and '.join(tasks)}" if tasks else "")
