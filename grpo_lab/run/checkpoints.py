"""Checkpoints that resume exactly: model, optimizer, every RNG the run draws from, and counters.

A full checkpoint (weights + state.pt) can resume a run; a weights-only one (state.pt removed, the
largest part: the optimizer's moments are twice the weights) can only be evaluated. Under LoRA the weights
are the adapters (adapter_config.json + adapter_model.safetensors) and the optimizer state is theirs.

state.pt holds tensors and plain containers only (grpo_lab/run/plain.py) and is read with
torch.load(weights_only=True): a checkpoint is data, and loading one never runs code. One holding anything
else (a planted payload, or numpy objects pickled by an older version) is refused in one line."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import pickle
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from grpo_lab import distributed
from grpo_lab.errors import InputError
from grpo_lab.model.files import ModelFileError, check_model_folder, check_safetensors
from grpo_lab.model.lora import is_adapter_folder, load_adapters
from grpo_lab.model.sharding import is_sharded
from grpo_lab.run.owned import delete_checkpoint
from grpo_lab.run.plain import BadCheckpoint, UnsafeCheckpoint, from_plain, to_plain
from grpo_lab.run.sharded import OPTIM, check_metadata, drop_optimizer, load_sharded, save_sharded

log = logging.getLogger(__name__)

_STEP = re.compile(r"step-(\d{6})$")
# the run's totals at a checkpoint kept in counters.json (grpo_lab/train/costs.py: COUNTERS): samples drawn, tokens
# generated, optimizer steps taken, the FLOP estimate
TOTALS = ("samples_total", "tokens_total", "updates", "flops_total")


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:06d}"


def rng_state(generator: torch.Generator) -> dict:
    """Every random stream a process draws from: its sampling generator, torch's, Python's, numpy's, and on a GPU
    each device's (LoRA dropout draws there: without it a resumed GPU run would differ from the uninterrupted one)."""
    state = {"generator": generator.get_state(), "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
             "numpy_rng": np.random.get_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(generator: torch.Generator, state: dict) -> None:
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    np.random.set_state(state["numpy_rng"])
    cuda = state.get("cuda_rng")  # saved on a GPU: restored where the same devices are
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _carry_theirs(old: Path, new: Path) -> None:
    """A step saved again: the old folder's own files deleted by name, a person's files moved into the new one (one
    whose name the new checkpoint took stays in the old folder, which then stays too)."""
    for path in delete_checkpoint(old):
        target = new / path.relative_to(old)
        if not os.path.lexists(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)
    for folder in sorted((p for p in old.rglob("*") if p.is_dir()), reverse=True) + [old]:
        try:
            folder.rmdir()  # only what is empty now
        except OSError:
            pass


def save_checkpoint(run_dir: Path, step: int, model, optimizer, generator: torch.Generator, counters: dict,
                    ranks_rng: list[dict] | None = None) -> Path:
    """Write checkpoints/step-NNNNNN/ (HF model folder + state.pt), atomically via rename.
    `ranks_rng`: every rank's `rng_state`, in rank order, when the run spans several processes.
    A sharded model (dist.strategy=fsdp): every rank calls it and writes its shards (grpo_lab/run/sharded.py);
    the optimizer then lives in optim/, not state.pt, and rank 0 alone writes the rest and renames."""
    sharded = is_sharded(model)
    final = checkpoint_dir(run_dir, step)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")  # unique per process; a killed one's is cleaned
    if sharded:
        tmp = distributed.broadcast_object(tmp)  # rank 0's: one folder for every rank's shards
    main = distributed.is_main() or not sharded
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    try:
        if sharded:
            distributed.barrier()  # the folder exists before any rank writes into it
            save_sharded(tmp, model, optimizer)
        else:
            model.save_pretrained(tmp)  # loadable on its own by from_pretrained, e.g. for evaluation
        if main:
            save_torch(to_plain({
                "step": step,
                "optimizer": None if sharded else optimizer.state_dict(),
                **rng_state(generator),  # rank 0's (the only one in a single process)
                "counters": counters,
                "world_size": len(ranks_rng) if ranks_rng else 1,
                "strategy": "fsdp" if sharded else "ddp",
                "ranks_rng": ranks_rng,
            }), tmp / "state.pt")
    except OSError as e:
        if e.filename is None:  # a write that named no file (a buffered one's, at close): the checkpoint's folder
            raise OSError(e.errno, e.strerror, str(tmp)) from e
        raise
    except Exception as e:  # safetensors and torch report a failed write in their own types
        failed = write_error(e, tmp)
        if failed is None:
            raise
        raise failed from e
    if not main:
        return final
    # the run's totals at this step, readable without torch and kept when state.pt is pruned away (a total not
    # known, NaN: flops_total resumed from a checkpoint written before it, is null)
    totals = {k: None if isinstance(counters[k], float) and math.isnan(counters[k]) else counters[k]
              for k in TOTALS if k in counters}
    (tmp / "counters.json").write_text(json.dumps(totals))
    if final.exists():  # set aside, not deleted in place: a kill mid-delete must not leave half a checkpoint
        old = final.with_name(f".{final.name}.{os.getpid()}.old.tmp")
        final.rename(old)
        tmp.rename(final)
        _carry_theirs(old, final)
    else:
        tmp.rename(final)
    return final


class _KeptWriteError:
    """The file torch.save writes through, keeping the OSError a write raised: torch's zip writer turns it into its
    own RuntimeError ("unexpected pos 704 vs 598" in torch 2.13), with no errno to tell a full disk by."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def save_torch(obj, path: Path) -> None:
    """torch.save(obj, path), a failed write raised as the OSError it was (ENOSPC on a full disk)."""
    with open(path, "wb") as f:
        kept = _KeptWriteError(f)
        try:
            torch.save(obj, kept)
        except RuntimeError:
            if kept.error is None:
                raise
            raise kept.error from None


def write_error(e: Exception, path: Path) -> OSError | None:
    """A library's failed write as the OSError it was: safetensors says "(os error 28)", torch's writer only
    that a write failed (then a filesystem with no room left is ENOSPC). None when it was not a write."""
    found = re.search(r"os error (\d+)", str(e))
    if found:
        code = int(found.group(1))
    elif "write" in str(e).lower() and _no_room(path):
        code = errno.ENOSPC
    else:
        return None
    return OSError(code, os.strerror(code), str(path))


def _no_room(path: Path) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 1 << 20  # under 1 MiB left: a checkpoint's next write cannot fit


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint a run can resume from (a full one), or None."""
    steps = checkpoint_steps(run_dir)
    return checkpoint_dir(run_dir, steps[-1]) if steps else None


def checkpoint_steps(run_dir: Path, *, resumable: bool = True) -> list[int]:
    """Steps with a checkpoint, ascending: full ones only, or (resumable=False) weights-only ones too.
    Every step-NNNNNN folder is whole: it appears by an atomic rename."""
    return [int(p.name[5:]) for p in sorted((Path(run_dir) / "checkpoints").glob("step-*"))
            if _STEP.search(p.name) and ((p / "state.pt").exists() if resumable else has_weights(p))]


def has_weights(path: Path) -> bool:
    """A checkpoint folder with weights to evaluate: a model folder, or LoRA adapters (adapter_config.json)."""
    return (path / "config.json").exists() or is_adapter_folder(path)


def drop_state(run_dir: Path, step: int) -> None:
    """Make a full checkpoint weights-only (the unlink is atomic: it is whole either way; a sharded optimizer
    goes after it, so a kill between the two leaves a weights-only checkpoint)."""
    (checkpoint_dir(run_dir, step) / "state.pt").unlink(missing_ok=True)
    drop_optimizer(checkpoint_dir(run_dir, step))


def prune_checkpoints(run_dir: Path, keep_last: int | None, pinned: set[int], evaluated: set[int]) -> None:
    """Keep the newest `keep_last` full checkpoints (None: all) and the `pinned` steps whole; older
    checkpoints of `evaluated` steps keep their weights (for re-evaluation), the rest go."""
    if keep_last is None:
        return
    for step in checkpoint_steps(run_dir)[:-keep_last]:
        if step in pinned:
            continue
        if step in evaluated:
            drop_state(run_dir, step)
        else:  # by the names save_checkpoint writes: a file a person put there stays, and so does the folder
            delete_checkpoint(checkpoint_dir(run_dir, step))


def load_weights(path: Path, model) -> None:
    """Load a checkpoint's weights into `model` (same architecture), in place; a LoRA checkpoint's adapters into
    `model`, the run's PeftModel (grpo_lab/model/lora.py)."""
    from safetensors.torch import load_file

    if is_adapter_folder(path):
        load_adapters(path, model)
        return
    if hasattr(model, "peft_config"):
        raise ValueError(f"{path} holds a full model's weights, but the run trains LoRA adapters (model.lora.rank > 0)")

    device = str(next(model.parameters()).device)
    weights = {k: v for f in sorted(path.glob("*.safetensors")) for k, v in load_file(f, device=device).items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()  # stored once
    if unexpected or set(missing) - tied:
        raise RuntimeError(f"{path}: weights do not match the model "
                           f"(missing {missing[:3]}, unexpected {unexpected[:3]})")


def checkpoint_totals(path: Path) -> dict:
    """The run's TOTALS at a checkpoint, full or weights-only (a total absent where not recorded; {} where the
    only record is a state.pt that is refused unread: an older version's, or a planted payload; its weights still
    evaluate, and the analysis counts the samples from the groups table)."""
    if (path / "counters.json").exists():
        return json.loads((path / "counters.json").read_text())
    if (path / "state.pt").exists():  # a checkpoint written before counters.json
        try:
            return read_state(path, mmap=True).get("counters", {})
        except UnsafeCheckpoint as refused:
            log.warning("%s; its samples drawn are not recorded here", refused)
    return {}


def check_checkpoint(path: Path, trust_remote_code: bool = False) -> None:
    """A checkpoint's weight files, read as far as their headers (ModelFileError naming the file): a LoRA
    checkpoint's adapter_config.json and adapter_model.safetensors, a model folder's config.json and every
    safetensors file (an index's shards included), at least one of them."""
    if is_adapter_folder(path):
        try:
            json.loads((path / "adapter_config.json").read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise ModelFileError(f"{path / 'adapter_config.json'}: not a readable JSON file ({e})") from None
        if not (path / "adapter_model.safetensors").exists():
            raise ModelFileError(f"{path / 'adapter_model.safetensors'}: missing (the checkpoint's adapters)")
        check_safetensors(path / "adapter_model.safetensors")
        return
    # config.json, and every safetensors file as long as its header says; a run trained with custom code (trusted
    # then) keeps it in its checkpoints, and only their safetensors are read here
    check_model_folder(path, trust_remote_code)
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.safetensors.index.json")):
        raise ModelFileError(f"{path / 'model.safetensors'}: missing (the checkpoint has no weights file)")


def read_state(path: Path, mmap: bool = False) -> dict:
    """The state.pt of the checkpoint folder `path`, read safely (weights_only) and rebuilt (numpy arrays,
    sampler dataclasses). Raises UnsafeCheckpoint in one line, naming the file and what it would have run
    (BadCheckpoint for a file that is not a readable state at all).
    mmap: leave the tensors on disk until used (the optimizer's moments are twice the weights)."""
    file = Path(path) / "state.pt"
    try:
        state = torch.load(file, weights_only=True, map_location="cpu", mmap=mmap)
        return from_plain(state)
    except pickle.UnpicklingError as e:
        found = re.search(r"(?:Unsupported global|Unsupported operand|Trying to call reduce for|Unsupported class)"
                          r"[:\s]*(?:GLOBAL\s+)?([^\s]+)", str(e))
        what = f" ({found.group(1)})" if found else ""
        raise UnsafeCheckpoint(
            f"{file}: refused: it holds pickled Python objects{what}, not only tensors and plain data, and loading "
            "them could run code; nothing was loaded (an older grpo-lab's checkpoint holds numpy objects: it cannot "
            "resume, its weights still evaluate; start over with resume=never or a new out_dir)") from None
    except Exception as e:  # noqa: BLE001 - cut short, or not a torch file: torch's readers raise many types
        first = (str(e).strip().splitlines() or [""])[0][:200]
        raise BadCheckpoint(f"{file}: not a readable checkpoint state ({type(e).__name__}: {first})") from None


class WorldSizeChanged(InputError):
    """A checkpoint saved by a run of one number of processes, resumed with another."""


class StrategyChanged(WorldSizeChanged):
    """A checkpoint saved under one dist.strategy, resumed under the other."""


def check_world_size(path: Path, world: int, strategy: str | None = None) -> None:
    """Raise WorldSizeChanged, in one line, when the checkpoint at `path` was saved by a run of
    another number of processes, or (given `strategy`) under another dist.strategy: a ddp checkpoint holds the
    whole optimizer in state.pt, an fsdp one its shards in optim/ (read lazily: the optimizer state stays on disk)."""
    state = read_state(path, mmap=True)
    if (path / OPTIM).exists():  # an fsdp checkpoint's optimizer: its DCP metadata is a pickle too
        check_metadata(path / OPTIM)
    saved = state.get("world_size", 1)
    if saved != world:
        raise WorldSizeChanged(
            f"resume: {path} was saved by {saved} process(es), this run has {world}; resume with the same "
            f"number (torchrun --nproc_per_node {saved}): each rank's random stream is restored exactly")
    was = state.get("strategy", "ddp")
    if strategy is not None and was != strategy:
        raise StrategyChanged(f"resume: {path} was saved under dist.strategy={was}, this run shards as "
                               f"dist.strategy={strategy}; resume with dist.strategy={was}")


def load_checkpoint(path: Path, model, optimizer, generator: torch.Generator, rank: int = 0,
                    world: int = 1) -> tuple[int, dict]:
    """Restore everything save_checkpoint wrote, `rank`'s random streams included; returns (step, counters).
    Raises WorldSizeChanged or StrategyChanged (before touching anything) when `world` or the sharding is not
    the saved run's. A sharded model: every rank calls it and reads its own shards."""
    sharded = is_sharded(model)
    check_world_size(path, world, "fsdp" if sharded else "ddp")
    state = read_state(path)
    if sharded:
        load_sharded(path, model, optimizer)
    else:
        load_weights(path, model)
        optimizer.load_state_dict(state["optimizer"])
    set_rng_state(generator, state["ranks_rng"][rank] if state.get("ranks_rng") else state)
    return state["step"], state["counters"]
