"""LoRA adapters through peft (the library TRL's `peft_config` uses): `model.lora.rank` > 0 trains low-rank
adapters on the named linear layers and leaves the base weights frozen.

- The passes (sampling, log-probs, checkpointing, evaluation) take the transformers model with the adapters
  injected in place (`PeftModel.get_base_model()`): peft's own wrapper returns logits from its `base_model`,
  where grpo_lab's chunked output layer needs the backbone's hidden states.
- The reference policy is the same model with the adapters switched off (`adapters_off`): one copy of the base
  weights, no `frozen_copy`. At B = 0 (peft's init) the adapted model is the base model.
- Where every pass runs under bf16 autocast (model.dtype=autocast_bf16, or "auto" on CUDA), the frozen base linears
  and a frozen output layer are stored in bf16 (`store_frozen`): autocast would cast them at every call, so the
  products are the same bit for bit, at half the memory and without the casts.
- A checkpoint holds the adapters (`adapter_config.json`, `adapter_model.safetensors`) and the optimizer state
  of the adapters only; resume and `experiments.evaluate` load them onto the base (`load_adapters`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from grpo_lab.errors import ConfigError, require

if TYPE_CHECKING:  # torch is imported by the functions that run models, not by the config checks
    import torch

ADAPTER_CONFIG = "adapter_config.json"  # what marks a checkpoint folder as adapters (peft's save_pretrained)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
MAX_RANK = 2**14  # past any layer's width in a model trained on one machine: a larger rank is no longer low-rank
MAX_ALPHA = 2**16  # the scale alpha / rank past that would swamp the base layer's output at the first step


@dataclass
class LoraConfig:
    rank: int = 0  # adapter rank r; 0: full fine-tune (every weight trains, the reference is a frozen copy)
    alpha: float | None = None  # the adapters' scale is alpha / rank; None: 2 x rank (scale 2)
    # the linear layers given adapters, by module name; the output layer is left out (its chunked pass needs a
    # plain Linear, grpo_lab/model/logprobs.py)
    targets: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                        "up_proj", "down_proj"])
    dropout: float = 0.0  # > 0 makes the policy pass random: the first update's ratio would no longer be 1


def check_lora(lora: LoraConfig, strategy: str = "ddp") -> None:
    """The model.lora.* keys, before any model loads (the targets are checked against the model in add_adapters).
    Adapters under FSDP2 sharding (`strategy`, dist.strategy) are not built: refused, never silently half-done."""
    require(not (strategy == "fsdp" and lora.rank), "dist.strategy", strategy,
            "fsdp with LoRA adapters (model.lora.rank > 0) is not built yet: use dist.strategy=ddp with LoRA")
    require(0 <= lora.rank <= MAX_RANK, "model.lora.rank", lora.rank, f"must be in [0, {MAX_RANK}] (0: full fine-tune)")
    require(lora.alpha is None or 0 < lora.alpha <= MAX_ALPHA, "model.lora.alpha", lora.alpha,
            f"must be in (0, {MAX_ALPHA}] or null (2 x rank)")
    require(0 <= lora.dropout < 1, "model.lora.dropout", lora.dropout, "must be in [0, 1)")
    require(bool(lora.targets) and all(isinstance(t, str) and t for t in lora.targets), "model.lora.targets",
            lora.targets, "must list module names, e.g. [q_proj, v_proj]")


def linear_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers, the output layer's excluded."""
    import torch

    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules()
                   if isinstance(m, torch.nn.Linear) and m is not head})


def add_adapters(model: torch.nn.Module, lora: LoraConfig, frozen: torch.dtype | None = None):
    """(the model the passes take, the PeftModel or None). rank 0: (model, None), nothing changes. Otherwise
    the base weights are frozen in place and adapters injected (peft draws A from torch's global RNG); `frozen`:
    the dtype every pass's matmuls run in under autocast (`amp_dtype`), which the frozen layers are then stored in."""
    if lora.rank == 0:
        return model, None
    import peft  # imported only for LoRA runs: it is slow to import

    names = linear_names(model)
    unknown = [t for t in lora.targets if t not in names]
    if unknown:
        raise ConfigError(f"model.lora.targets={lora.targets} is invalid: {unknown} name no linear layer of "
                          f"{type(model).__name__}; its linear layers are {names}")
    config = peft.LoraConfig(r=lora.rank, lora_alpha=lora.alpha or 2 * lora.rank, target_modules=list(lora.targets),
                             lora_dropout=lora.dropout, bias="none", task_type="CAUSAL_LM")
    wrapped = peft.get_peft_model(model, config)
    if frozen is not None:
        store_frozen(wrapped.get_base_model(), frozen)
    return wrapped.get_base_model(), wrapped


def store_frozen(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """The frozen layers whose weights only ever enter autocast's matmuls, stored in its `dtype`: every LoRA layer's
    base linear, and the output layer (untied from the input embedding, which keeps its dtype: a lookup is no
    matmul, and the residual stream starts from it). Autocast casts such a weight at every call, so the products are
    bit for bit those of the wider copy; on a CPU the casts were a SmolLM2 LoRA step's largest cost after the
    matmuls (its 49,152 x 576 output layer every token drawn), and the copies hold half the memory. Norms and
    biases keep their dtype (added in the wider type, never cast by autocast)."""
    import torch

    for module in model.modules():
        base = getattr(module, "base_layer", None)
        if isinstance(base, torch.nn.Linear) and not base.weight.requires_grad:
            base.weight.data = base.weight.data.to(dtype)
    head = model.get_output_embeddings()
    if type(head) is torch.nn.Linear and not head.weight.requires_grad:
        head.weight = torch.nn.Parameter(head.weight.detach().to(dtype), requires_grad=False)


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimizer steps: every one in a full fine-tune, the adapters' under LoRA."""
    return [p for p in model.parameters() if p.requires_grad]


@contextlib.contextmanager
def adapters_off(ref) -> Iterator[torch.nn.Module]:
    """The reference policy to run: a frozen copy as it is, or a PeftModel's base model with its adapters
    switched off (on again after the block)."""
    if not hasattr(ref, "disable_adapter"):
        yield ref
        return
    with ref.disable_adapter():
        yield ref.get_base_model()


def is_adapter_folder(path: Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).exists()


def load_adapters(path: Path, wrapped) -> None:
    """Load a checkpoint's adapters into a PeftModel of the same LoRA config, in place."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    if not hasattr(wrapped, "peft_config"):
        raise ValueError(f"{path} holds LoRA adapters (adapter_config.json), but the run's model has none: "
                         "set the run's model.lora.rank")
    device = str(next(wrapped.parameters()).device)
    result = set_peft_model_state_dict(wrapped, load_file(Path(path) / ADAPTER_WEIGHTS, device=device))
    missing = [k for k in result.missing_keys if "lora_" in k]  # the base weights are "missing": not saved
    if result.unexpected_keys or missing:
        raise RuntimeError(f"{path}: adapters do not match the model's model.lora settings (missing {missing[:3]}, "
                           f"unexpected {result.unexpected_keys[:3]})")
