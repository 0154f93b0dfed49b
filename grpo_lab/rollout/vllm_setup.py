"""What rollout.engine=vllm needs to know before its engine starts, read without starting it: the policy's
config.json (its context, head size, and the KV cache one sequence takes, so a setting vLLM would refuse in a
57-line traceback is one line naming our key first), and what the installed vLLM runs (its architectures, version,
the head sizes of its CPU attention, whether its sleep pool takes PyTorch's expandable segments). vLLM is imported
only through `_vllm`, which sets it to run its engine in this process."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from grpo_lab.errors import require
from grpo_lab.footprint import TINY_CONFIG

MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
KV_BLOCK = 128  # tokens: the KV cache is handed out in blocks; one sequence is counted in whole blocks of this
KV_SHARE = 0.98  # of rollout.vllm.kv_cache_gb, what vLLM's CPU backend can give the cache (0.99 GiB of 1 measured)
# the attention head sizes vLLM 0.32's CPU backend runs (vllm/v1/attention/backends/cpu_attn.py:69); asked of the
# installed vLLM where it can be
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

def _model_config(cfg) -> dict | None:
    """The policy's config.json, without loading it (None: a GGUF file or an unreadable config, checked at build)."""
    from grpo_lab.model.files import resolve_model_path

    if cfg.model.name == "tiny":
        path = TINY_CONFIG
    elif cfg.model.gguf_file or not cfg.model.path:
        return None  # a GGUF file's shape is checked when the engine starts; a missing path by the model's checks
    else:
        try:
            path = Path(resolve_model_path(cfg.model.path, None)) / "config.json"
        except (OSError, ValueError):
            return None  # the model files' own checks name what is wrong with them
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _text(config: dict) -> dict:
    return config.get("text_config") or config


def _positions(config: dict) -> int | None:
    """The model's own context, tokens (None: its config does not say)."""
    found = _text(config).get("max_position_embeddings")
    return int(found) if isinstance(found, int) and found > 0 else None


def _head_size(config: dict) -> int | None:
    text = _text(config)
    try:
        return int(text.get("head_dim") or int(text["hidden_size"]) // int(text["num_attention_heads"]))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _kv_bytes_per_token(config: dict, element: int) -> int | None:
    """Every layer's keys and values for one token, bytes, at `element` bytes a number."""
    text, head = _text(config), _head_size(config)
    try:
        kv_heads = int(text.get("num_key_value_heads") or text["num_attention_heads"])
        return int(text["num_hidden_layers"]) * 2 * kv_heads * head * element if head else None
    except (KeyError, TypeError, ValueError):
        return None


def _engine_dtype(setting: str, cuda: bool) -> str:
    return setting if setting != "auto" else ("bfloat16" if cuda else "float32")


def _check_kv_holds(config: dict, kv_gb: float, dtype: str, length: int, why: str) -> None:
    """A CPU KV cache of `kv_gb` GiB holds one sequence of `length` tokens (vLLM refuses to start otherwise, in a
    57-line traceback whose remedies are not our keys)."""
    per_token = _kv_bytes_per_token(config, 2 if dtype == "bfloat16" else 4)
    if per_token is None:
        return
    need = -(-length // KV_BLOCK) * KV_BLOCK * per_token
    require(need <= KV_SHARE * kv_gb * 2**30, "rollout.vllm.kv_cache_gb", kv_gb,
            f"one sequence of {length:,} tokens ({why}) needs {need / 2**30:.2f} GiB of KV cache here "
            f"({per_token:,} bytes a token): raise it, or lower rollout.vllm.max_model_len")


def _vllm():
    """vLLM, set to run its engine in this process (tensors pass to it without a copy through a pipe, and it shares
    the trainer's process). It reads the setting when it is imported: every import of it here goes through this;
    another value set by the user is refused by VLLMEngine.check."""
    os.environ.setdefault(MULTIPROCESSING, "0")
    import vllm

    return vllm


def _supported_architectures() -> set[str]:
    return set(_vllm().ModelRegistry.get_supported_archs())


def _version() -> str:
    return _vllm().__version__


def _cpu_head_sizes() -> tuple[int, ...]:
    """The head sizes the installed vLLM's CPU attention runs (vLLM 0.32's where it cannot be asked)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        return tuple(CPUAttentionBackend.get_supported_head_sizes())
    except Exception:  # noqa: BLE001 - another vLLM's layout: the sizes 0.32 has
        return CPU_HEAD_SIZES


def _pool_takes_expandable_segments() -> bool:
    """Whether the installed vLLM's sleep-mode pool turns PyTorch's expandable segments off around itself (vLLM
    0.32 does: vllm/device_allocator/cumem.py:382-394, #40812); before that, its allocator refused them."""
    return importlib.util.find_spec("vllm.device_allocator.alloc_conf") is not None
