"""Checkpoints of a sharded (dist.strategy=fsdp) model through torch.distributed.checkpoint: every rank writes
its own shards, no rank gathers the whole model.

A checkpoint folder holds the weights once, as an ordinary transformers folder (config.json,
model-0000k-of-0000K.safetensors and their index: from_pretrained, load_weights and evaluation read it as
they read a ddp checkpoint), and the AdamW state in DCP's own format under optim/ (each rank its shards).
A weight tied to another (the output layer to the embedding) is written once and aliased on load.

Loading runs no code from the files: DCP's own reader unpickles optim/.metadata and torch.loads the optimizer's
non-tensor items with weights_only=False; here the metadata is unpickled with DCP's metadata classes alone
allowed (`SafeReader`) and those items are read with weights_only=True (`SafePlanner`).
"""

from __future__ import annotations

import io
import pickle
import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import (
    DefaultLoadPlanner,
    FileSystemReader,
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from grpo_lab import distributed
from grpo_lab.run.plain import UnsafeCheckpoint

FILE_BYTES = 5 * 2**30  # weights per safetensors file, as transformers' save_pretrained splits them
OPTIM = "optim"
# what DCP's .metadata pickle may name: its own metadata records, torch's sizes, dtypes and layouts, a path
METADATA_GLOBALS = frozenset({
    *(("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING")),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("torch._utils", "_get_layout"), ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"), ("collections", "OrderedDict"),
    *(("torch", name) for name, value in vars(torch).items() if isinstance(value, torch.dtype)),
})


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) not in METADATA_GLOBALS:
            raise pickle.UnpicklingError(f"{module}.{name}, not a DCP metadata record")
        return super().find_class(module, name)


def read_metadata(path: Path):
    """A DCP .metadata file, unpickled with only METADATA_GLOBALS allowed; UnsafeCheckpoint (one line) otherwise."""
    with open(path, "rb") as f:
        try:
            return _MetadataUnpickler(f).load()
        except pickle.UnpicklingError as e:
            raise UnsafeCheckpoint(f"{path}: refused: it names {e}, and loading it could run code; nothing was "
                                   "loaded") from None


def check_metadata(folder: Path) -> None:
    """Refuse, before any rank loads anything, an optimizer folder whose DCP metadata is not DCP's own."""
    read_metadata(Path(folder) / ".metadata")


class SafeReader(FileSystemReader):
    """DCP's FileSystemReader, its .metadata read by `read_metadata`: a planted payload is refused, never run."""

    def read_metadata(self, *args, **kwargs):
        metadata = read_metadata(Path(self._get_metadata_path(kwargs.get("rank"))))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    """DCP's default planner, the non-tensor items (the optimizer's param_groups) read with weights_only=True."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        plain = torch.load(value, weights_only=True)  # refuses anything but tensors and plain containers
        again = io.BytesIO()
        torch.save(plain, again)  # the parent's reader then reads back what was just checked, nothing else
        again.seek(0)
        super().load_bytes(read_item, again)


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
    # each rank reads its slices (safetensors and JSON: no pickle)
    dcp.load(weights, storage_reader=HuggingFaceStorageReader(path=str(folder)), planner=SafePlanner())
    set_model_state_dict(model, {**weights, **{name: weights[kept] for name, kept in aliases.items()}})
    optim = {OPTIM: get_optimizer_state_dict(model, optimizer)}
    dcp.load(optim, storage_reader=SafeReader(folder / OPTIM), planner=SafePlanner())
    set_optimizer_state_dict(model, optimizer, optim[OPTIM])


def drop_optimizer(folder: Path) -> None:
    shutil.rmtree(Path(folder) / OPTIM, ignore_errors=True)

