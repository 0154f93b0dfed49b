"""Policies: the built-in tiny model (shipped in the package) or any local
transformers causal LM; device and dtype choice; the frozen reference copy."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from grpo_lab.allocator import reuse_freed_memory
from grpo_lab.errors import ConfigError
from grpo_lab.model.attention import attention_for
from grpo_lab.model.dequantized import float_copy
from grpo_lab.model.files import ModelFileError, check_model_files, check_model_folder, resolve_model_path
from grpo_lab.model.tiny import tiny_weights
from grpo_lab.model.tokenizer import CharTokenizer

log = logging.getLogger(__name__)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ConfigError(f"model.device={device!r} is invalid: this machine has {torch.cuda.device_count()} CUDA "
                          "devices; use 'auto' or 'cpu'")
    return dev


@contextlib.contextmanager
def _reading(folder: Path, path: str | None):
    """Whatever transformers raises on a model folder's files, as one line naming the folder."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as e:  # noqa: BLE001 - transformers and huggingface_hub raise many types; the chain is kept
        first = (str(e).strip().splitlines() or [""])[0][:300]
        raise ModelFileError(f"model.path={path!r}: {folder} cannot be loaded ({type(e).__name__}: {first})") from e


def pick_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """The dtype the weights are stored in. "auto" keeps fp32 weights everywhere: on CUDA the passes
    run in bf16 under autocast (see `amp`), while Adam's small steps still land on fp32 weights
    (stored in bf16 they would mostly round away). An explicit dtype stores the weights in it."""
    allowed = {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
               "autocast_bf16": torch.float32}
    if dtype not in allowed:
        raise ValueError(f"model.dtype={dtype!r} is not supported. Must be one of {', '.join(map(repr, allowed))}.")
    return allowed[dtype]


def amp_dtype(dtype: str, device: torch.device) -> torch.dtype | None:
    """The dtype the model's matmuls run in under `amp`: bf16 for "auto" on a CUDA device with bf16, and for
    "autocast_bf16" on any device (CPU included); None otherwise ("auto" CPU runs stay in exact fp32)."""
    if (dtype == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported()) or dtype == "autocast_bf16":
        return torch.bfloat16
    return None


def amp(dtype: str, device: torch.device) -> contextlib.AbstractContextManager:
    """The context the model's passes run in: autocast to `amp_dtype`, or nothing."""
    run = amp_dtype(dtype, device)
    return contextlib.nullcontext() if run is None else torch.autocast(device.type, dtype=run)


def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 matmul units (AVX512-BF16 or AMX), which oneDNN's bf16 kernels need."""
    check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(check and check())


def bf16_warning(dtype: str, device: torch.device) -> str | None:
    """One line when bf16 is asked for on a CPU without bf16 units (None otherwise): torch then converts in
    every matmul, and a SmolLM2 step measured 8.5x slower than fp32 (benchmarks/RESULTS.md)."""
    if dtype not in ("bfloat16", "autocast_bf16") or device.type != "cpu" or cpu_has_bf16():
        return None
    return (f"model.dtype={dtype} on a CPU without bf16 units (no AVX512-BF16/AMX): every matmul converts, a "
            "SmolLM2 GRPO step measured 8.5x slower than fp32 here; use model.dtype=auto (exact fp32) on this CPU")


def load_policy(name: str, path: str | None, device: str = "auto", dtype: str = "auto", gguf_file: str | None = None,
                trust_remote_code: bool = False):
    """Returns (model, tokenizer) on the chosen device. name: "tiny" or "hf" (a local folder or pkg:NAME,
    see model_files; with gguf_file, that GGUF file in it, dequantized by transformers).
    trust_remote_code (model.trust_remote_code): let a folder's auto_map run its own code; otherwise such a
    folder is refused in one line, and transformers is told False, so it never asks on a terminal."""
    dev = pick_device(device)
    dt = pick_dtype(dtype, dev)
    reuse_freed_memory()  # a process that runs a model keeps freed memory for its next large tensor
    if (warning := bf16_warning(dtype, dev)) is not None:
        log.warning("%s", warning)
    hf_logging.disable_progress_bar()  # one bar per shard per job floods sweep logs
    if name == "tiny":
        folder = tiny_weights()
        tokenizer = CharTokenizer.from_pretrained(folder)
    elif name == "hf":
        check_model_files(path, gguf_file)
        folder = resolve_model_path(path, gguf_file)
        if gguf_file is not None and (copy_ := float_copy(folder / gguf_file, _dequantize(path))) is not None:
            folder, gguf_file = copy_, None  # the float copy: the same weights and tokenizer, loaded in seconds
        if gguf_file is None:
            check_model_folder(folder, trust_remote_code)
        with _reading(folder, path):
            if gguf_file is None and _tokenizer_class(folder) == CharTokenizer.__name__:
                tokenizer = CharTokenizer.from_pretrained(folder)  # a model folder written by grpo-lab itself
            else:
                tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left", gguf_file=gguf_file,
                                                          trust_remote_code=trust_remote_code)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        raise ValueError(f"model.name={name!r} is not supported. Must be one of 'tiny', 'hf'.")
    with _reading(folder, path if name == "hf" else str(folder)):
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dt, attn_implementation="eager",
                                                     gguf_file=gguf_file if name == "hf" else None,
                                                     trust_remote_code=trust_remote_code and name == "hf")
    model.set_attn_implementation(attention_for(model.config, dev))  # grouped KV heads on CPU: no K/V copy
    model = model.to(dev)
    if gguf_file is not None:
        _drop_gguf_quantizer(model, gguf_file)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def _dequantize(path: str | None):
    """What makes a GGUF file's float copy: its fp32 model (quantizer dropped) and its tokenizer."""
    def convert(gguf: Path):
        with _reading(gguf.parent, path):
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, trust_remote_code=False)
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                         trust_remote_code=False)  # a GGUF file holds no code
        _drop_gguf_quantizer(model, gguf.name)
        return model, tokenizer
    return convert


def _drop_gguf_quantizer(model, gguf_file: str) -> None:
    """transformers dequantizes GGUF weights into plain floats on this path, yet keeps its GGUF quantizer
    attached, which refuses save_pretrained (so every checkpoint). The weights are an ordinary model's:
    detach the quantizer so they train and save as one."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    if not all(p.is_floating_point() for p in model.parameters()):
        raise ValueError(f"model.gguf_file={gguf_file!r}: transformers kept quantized GGUF blocks; grpo-lab trains "
                         "dequantized weights only")
    quantizer.remove_quantization_config(model)


def _tokenizer_class(folder: Path) -> str | None:
    config = folder / "tokenizer_config.json"
    return json.loads(config.read_text()).get("tokenizer_class") if config.exists() else None


def frozen_copy(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """The reference policy for the KL term: a copy that never trains, stored in `dtype` if given."""
    ref = copy.deepcopy(model).eval()
    if dtype is not None:  # parameters only: buffers such as the rotary inv_freq stay fp32 (bf16 would shift
        for p in ref.parameters():  # the angles of distant positions)
            p.data = p.data.to(dtype)
    ref.requires_grad_(False)
    return ref


def eos_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a completion (the tokenizer's, plus the generation config's)."""
    ids = {tokenizer.eos_token_id}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    ids.update(extra if isinstance(extra, list) else [extra])
    return sorted(i for i in ids if i is not None)
