"""Data parallel over torch.distributed, the nanoGPT way: whether this process runs under torchrun
is read from its environment (RANK, WORLD_SIZE, LOCAL_RANK); one process group (gloo on CPU,
nccl on CUDA with LOCAL_RANK picking the GPU); `is_main()` decides who writes. The trainer calls
this module; nothing else knows about ranks.

Every helper is a no-op (or the identity) in a single process, so the trainer's code is the same
for one process and for many. Every collective here is a synchronisation point: all ranks must
call the same ones in the same order, which the trainer guarantees by deciding everything
(sampling rounds, stops, budgets) from global quantities only.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher setting its variables) started this process."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def setup(backend: str = "auto", timeout_s: float = 600) -> None:
    """Join the process group of torchrun's job (once; later calls do nothing). A collective that
    waits longer than `timeout_s` (a stuck rank) raises instead of hanging; a dead rank's peers
    fail at once (gloo: "Connection closed by peer"). Without torchrun it does nothing."""
    if not under_torchrun() or dist.is_initialized():
        return
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank())
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    # torchrun's agent stops the surviving ranks with SIGTERM when one dies: as an exception it
    # unwinds through train(), which then records the failure in run.json.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(f"stopped by signal {signum} (another rank failed)"))


def teardown() -> None:
    global _MESH
    _MESH = None
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", 0))


def is_main() -> bool:
    """The one process that writes run.json, the tables and checkpoints."""
    return rank() == 0


def device(requested: str) -> str:
    """The device this rank runs on: "auto" under torchrun with CUDA is the GPU named by LOCAL_RANK."""
    if requested == "auto" and torch.cuda.is_available() and under_torchrun():
        return f"cuda:{local_rank()}"
    return requested


def rank_seed(seed: int) -> int:
    """This rank's sampling seed: the run's seed on rank 0 (one process equals rank 0), a distinct
    stream on every other rank."""
    return seed + 1_000_003 * rank()


def job_gpu(job_num: int, n_gpus: int) -> int:
    """The GPU of a sweep's job k on a machine with n GPUs: k mod n, so parallel jobs spread out."""
    return job_num % n_gpus


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def all_reduce_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks, in place; returns it. Identity in one process."""
    if dist.is_initialized():
        moved = tensor.to(_comm_device())
        dist.all_reduce(moved)
        if moved is not tensor:
            tensor.copy_(moved)
    return tensor


def global_sum(x: float | int | torch.Tensor) -> torch.Tensor:
    """Sum over ranks of a number or a tensor, as a new float64 tensor (exact for counts < 2^53)."""
    return all_reduce_(torch.as_tensor(x).detach().to("cpu", torch.float64).clone())


def sum_gradients(params: list[torch.nn.Parameter]) -> None:
    """Sum every parameter's gradient over ranks, in one flat buffer (one collective). A rank with
    no samples this step contributes zeros. With a loss normalised over the global batch, the sum
    is the gradient of the global batch's loss."""
    if not dist.is_initialized():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # (total parameters,)
    all_reduce_(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def gather_objects(obj: object) -> list:
    """Every rank's `obj`, in rank order, on every rank (picklable objects)."""
    if not dist.is_initialized():
        return [obj]
    out: list = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: object) -> object:
    """Rank 0's `obj` on every rank."""
    if not dist.is_initialized():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def broadcast_parameters(module: torch.nn.Module) -> None:
    """Rank 0's weights on every rank (as DDP does at start): ranks then update in lockstep."""
    if not dist.is_initialized():
        return
    for t in list(module.parameters()) + list(module.buffers()):
        moved = t.data.to(_comm_device())
        dist.broadcast(moved, src=0)
        if moved is not t.data:
            t.data.copy_(moved)


def max_over_ranks(n: int | float) -> int | float:
    """The largest of every rank's `n`, of `n`'s type."""
    t = torch.tensor([n], dtype=torch.float64 if isinstance(n, float) else torch.int64)
    if dist.is_initialized():
        t = t.to(_comm_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return type(n)(t.item())


def mesh(device_type: str):
    """The 1-D device mesh of every rank of the process group (FSDP2 shards over it), made once."""
    global _MESH
    if _MESH is None or _MESH.device_type != device_type:
        from torch.distributed.device_mesh import init_device_mesh

        _MESH = init_device_mesh(device_type, (world(),))
    return _MESH


_MESH = None


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
