"""What sampling certainly holds in memory, counted before any model loads and compared with the memory this
machine has free (MemAvailable, /proc/meminfo): `experiments.evaluate n=100000` once grew to 20 GB and was
killed. Every count that multiplies samples by tokens (eval.n x held-out prompts, a step's draw, the pass-rate
labelling) is checked with these counts (grpo_lab/config/checks.py, `check_memory`), and the error says the numbers.

The count is a floor, never a guess upward, so nothing that fits is refused: only what one generation call must
allocate (grpo_lab/rollout/generate.py: each row's new-token buffers, the KV cache's room for max_new_tokens
(GrowLayer), one step's logits) and the evaluation's rows, kept until its part is written. The model's shape comes
from its config.json (the built-in model's ships in the package); a GGUF file or an unreadable config counts no
KV cache. Where the model may run on a GPU (model.device cuda, or auto with an NVIDIA driver loaded), only what
stays in host memory counts. The memory free is MemAvailable, or less where a cgroup's limit leaves less; without
either (macOS) nothing is checked."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from grpo_lab.errors import ConfigError

TOKEN_BYTES = 21  # per row and new token of a generation call: token id (int64), log-prob (fp32), stop flag
# (bool), attention mask column (int64)
ROW_BYTES = 464  # an eval row: a dict of its 13 fields (sys.getsizeof; its values, mostly shared, not counted)
EVAL_PROMPTS_PER_CALL = 64  # evaluation samples 64 prompts a generation call (rollout/evaluation.py) ...
EVAL_BATCH_ROWS = 2**16  # ... and at most this many rows (fewer prompts at n > 1,024): a training step's most
TINY_CONFIG = Path(__file__).resolve().parent / "model" / "tiny_weights" / "config.json"
GIB = 2**30


@dataclass(frozen=True)
class Shape:
    """What a model's sampling holds per row: KV cache bytes per position (every layer's keys and values) and
    the vocabulary (one step's logits)."""

    kv_bytes: int = 0
    vocab: int = 0


def available() -> int | None:
    """Bytes of memory free for a new process: MemAvailable, or what a cgroup's memory limit leaves where that is
    less (a container, a SLURM job); None where neither says."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                          "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap, used = Path(limit).read_text().strip(), int(Path(usage).read_text())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 1 << 60:  # "max", or a huge number: no limit
            found.append(int(cap) - used)
    return min(found) if found else None


def eval_rows_per_call(prompts: int, n: int) -> int:
    """Rows one evaluation batch samples at once (rollout/evaluation.py): 64 prompts' n samples, fewer prompts
    where that passes EVAL_BATCH_ROWS."""
    return min(prompts, max(1, min(EVAL_PROMPTS_PER_CALL, EVAL_BATCH_ROWS // n))) * n


def on_host(device: str) -> bool:
    """Whether the model's tensors live in host memory: model.device cpu, or auto where no NVIDIA driver is
    loaded (auto picks CUDA when there is one; mps shares host memory)."""
    if device == "auto":
        return not os.path.exists("/proc/driver/nvidia/version")
    return device in ("cpu", "mps")


def model_shape(name: str, folder: Path | None, gguf_file: str | None, dtype: str) -> Shape:
    """The shape a model's config.json gives (the built-in model's for name "tiny"); Shape() when it cannot be
    read (a GGUF file, a config of another layout): then only the buffers count."""
    path = TINY_CONFIG if name == "tiny" else (folder / "config.json" if folder is not None and not gguf_file else None)
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
        config = config.get("text_config", config)
        heads = int(config["num_attention_heads"])
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
        kv_heads = int(config.get("num_key_value_heads") or heads)
        layers, vocab = int(config["num_hidden_layers"]), int(config["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return Shape()
    element = 2 if dtype in ("bfloat16", "autocast_bf16") else 4  # the cache's dtype (kvcache.py)
    return Shape(kv_bytes=layers * 2 * kv_heads * head_dim * element, vocab=vocab)


def sampling_bytes(rows: int, per_call: int, new_tokens: int, shape: Shape, host: bool, kept_rows: int = 0) -> int:
    """The floor of what sampling `rows` rows of `new_tokens` tokens, `per_call` rows a generation call, holds in
    host memory at its peak: one call's buffers, KV room and logits (where the model is on the host), and
    `kept_rows` eval rows."""
    call = min(rows, per_call) * (new_tokens * (TOKEN_BYTES + shape.kv_bytes) + 4 * shape.vocab) if host else 0
    return call + kept_rows * ROW_BYTES


def check_fits(key: str, value: object, what: str, need: int, free: int | None, advice: str) -> None:
    """Refuse `key=value` in one line when `need` bytes (at least) exceed `free`, saying both and what needs them."""
    if free is not None and need > free:
        raise ConfigError(f"{key}={value!r} is invalid: {what} holds at least {need / GIB:,.1f} GiB, and this machine "
                          f"has {free / GIB:,.1f} GiB free (MemAvailable, or a cgroup's limit); {advice}")
