"""Checkpoints of a sharded (dist.strategy=fsdp) model through torch.distributed.checkpoint: every rank writes
its own shards, no rank gathers the whole model.

A checkpoint folder holds the weights once, as an ordinary transformers folder (config.json,
model-0000k-of-0000K.safetensors and their index: from_pretrained, load_weights and evaluation read it as
they read a ddp checkpoint), and the AdamW state in DCP's own format under optim/ (each rank its shards).
A weight tied to another (the output layer to the embedding) is written once and aliased on load.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from grpo_lab import distributed

FILE_BYTES = 5 * 2**30  # weights per safetensors file, as transformers' save_pretrained splits them
OPTIM = "optim"


def _untied(model, state: dict) -> tuple[dict, dict[str, str]]:
    """The state dict with each parameter shared under several names (a tied output layer) under its first name
    only, and {dropped name: kept name}: the same on every rank (read from the module, not the shards)."""
    first: dict[int, str] = {}
    aliases = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases[name] = first[id(p)]
        else:
            first[id(p)] = name
    return {k: v for k, v in state.items() if k not in aliases}, aliases


def _file_index(state: dict) -> dict[str, int]:
    """Each weight's safetensors file (1, 2, ...): consecutive weights, about FILE_BYTES a file."""
    out, total = {}, 0
    for name, t in state.items():
        out[name] = 1 + total // FILE_BYTES
        total += t.numel() * t.element_size()
    return out


def save_sharded(folder: Path, model, optimizer) -> None:
    """Write the model as a transformers folder and the optimizer under optim/, into `folder` (which rank 0
    made). Called by every rank at the same point."""
    weights, _ = _untied(model, get_model_state_dict(model))
    dcp.save(weights, storage_writer=HuggingFaceStorageWriter(
        path=str(folder), save_distributed=True, enable_consolidation=True, fqn_to_index_mapping=_file_index(weights)))
    dcp.save({OPTIM: get_optimizer_state_dict(model, optimizer)}, checkpoint_id=folder / OPTIM)
    if distributed.is_main():
        model.config.save_pretrained(folder)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.save_pretrained(folder)
        shutil.rmtree(folder / "sharded", ignore_errors=True)  # the writer's per-rank staging, now consolidated
    distributed.barrier()


def load_sharded(folder: Path, model, optimizer) -> None:
    """Read a save_sharded checkpoint into this rank's shards of `model` and `optimizer` (every rank)."""
    state = get_model_state_dict(model)
    weights, aliases = _untied(model, state)
    dcp.load(weights, storage_reader=HuggingFaceStorageReader(path=str(folder)))  # each rank reads its slices
    set_model_state_dict(model, {**weights, **{name: weights[kept] for name, kept in aliases.items()}})
    optim = {OPTIM: get_optimizer_state_dict(model, optimizer)}
    dcp.load(optim, checkpoint_id=folder / OPTIM)
    set_optimizer_state_dict(model, optimizer, optim[OPTIM])


def drop_optimizer(folder: Path) -> None:
    shutil.rmtree(Path(folder) / OPTIM, ignore_errors=True)

