"""Run by tests/test_distributed.py, under torchrun or in one process (no collectives then).

    update IN OUT [STRATEGY]: this rank's share of fixed rollouts (IN, written by the test) through
        trainer.update, for every loss aggregation and two ways of splitting the groups over
        ranks; rank 0 saves the weights, gradients and statistics after each to OUT. When IN holds
        RL-ZVP directions and reused groups' behaviour flags, the rows are shaped per token and the
        reused ones divide by their stored log-probs; what each row trained with (its advantage, its
        first-pass log-probs) is gathered to rank 0. STRATEGY: ddp (default) or fsdp (model and
        reference sharded, the weights and gradients gathered whole for the comparison).
    rollout OUT: the tiny model sharded (fsdp); inside one `gathered` block each rank samples its own rounds
        (different prompt counts and lengths, an empty round, a split call), counting the collectives it
        issues; the tokens against an unsharded copy's with the same generator; rank 0 saves both to OUT.
    stuck TIMEOUT_S: rank 1 never joins the second collective; rank 0 must fail within TIMEOUT_S.
"""

from __future__ import annotations

import contextlib
import sys
import time

import torch

from grpo_lab import distributed
from grpo_lab.config import TrainConfig
from grpo_lab.model.load import frozen_copy, load_policy
from grpo_lab.model.sharding import full
from grpo_lab.rollout.generate import Rollout
from grpo_lab.train.microbatch import micro_batches
from grpo_lab.train.objective import AGG_MODES
from grpo_lab.train.parallel import build_parallel
from grpo_lab.train.update import TrainingRows, update

# which groups (of 4) each rank trains on, and in micro-batches of how many groups (None: all at once):
# split evenly; evenly with gradient accumulation over one-group micro-batches; all on rank 0 (rank 1 none)
SPLITS = {"even": (lambda i, r, w: i % w == r, None), "even-micro": (lambda i, r, w: i % w == r, 1),
          "lopsided": (lambda i, r, w: r == 0, None)}


def update_config(agg: str) -> TrainConfig:
    cfg = TrainConfig()
    cfg.algo.loss_agg, cfg.algo.mu, cfg.algo.beta = agg, 2, 0.04
    return cfg


def apply_update(base: dict, groups: list, advantages: list[torch.Tensor], agg: str, pad_id: int,
                 micro_groups: int | None = None, direction: list | None = None, behaviour: list | None = None,
                 strategy: str = "ddp", tied: list | None = None, keys: dict | None = None,
                 probe: bool = False, ref_base: dict | None = None) -> dict:
    """A fresh copy of the base model and optimizer, one `update` on these groups (this rank's
    share); returns the weights, the last mu-step's gradients, the step's statistics and what each row
    trained with (every rank's rows, in rank order)."""
    cfg = update_config(agg)
    cfg.model.logprob_chunk = 16 if micro_groups else 0  # the chunked head too (through the sharded root under fsdp)
    model, _ = load_policy("tiny", None, "cpu", "float32")
    model.load_state_dict(base)
    ref = frozen_copy(model)
    if ref_base is not None:  # a reference the policy has moved from: the KL term has a gradient from the start
        ref.load_state_dict(ref_base)
    par = build_parallel(strategy, torch.device("cpu"), None)
    model, ref = par.prepare(model, ref)
    model.train()
    # SGD, not the trainer's AdamW: Adam's g / (|g| + eps) turns float32 rounding of near-zero gradient
    # elements into steps of up to lr, which would hide what is compared here (the same gradient)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    micro = micro_batches([[g] for g in groups], pad_id, micro_groups)  # units of one group each
    adv = torch.cat(advantages) if advantages else torch.zeros(0)  # (N,)
    rows = TrainingRows.plain(adv)
    if direction is not None:  # RL-ZVP's rows: its tied units shaped token by token in the update
        cfg.algo.advantage = "rl_zvp"
        rows.direction = torch.cat(direction) if direction else torch.zeros(0, dtype=torch.int8)
        rows.behaviour = torch.cat(behaviour) if behaviour else torch.zeros(0, dtype=torch.bool)
    if tied is not None:  # tied units, and the keys that say how they enter the loss (grpo_lab/advantage/ties.py)
        rows.tied = torch.cat(tied) if tied else torch.zeros(0, dtype=torch.bool)
        for key, value in (keys or {}).items():
            setattr(cfg.algo, key, value)
    out = update(model, ref, optimizer, micro, rows, cfg, par, pad_id, probe)
    stats = {k: v for k, v in out.items() if k not in ("advantages", "behaviour", "entropy")}
    per_row = {k: out[k] for k in ("advantages", "entropy", "behaviour") if out[k] is not None}
    return {"weights": torch.cat([full(p).detach().reshape(-1) for p in model.parameters()]),
            "grads": torch.cat([full(p.grad).reshape(-1) for p in model.parameters()]), "stats": stats,
            "rows": distributed.gather_objects(per_row), "strategy": par.name}


def run_update(src: str, dst: str, strategy: str = "ddp") -> None:
    with torch.serialization.safe_globals([Rollout]):  # the test's groups: our own dataclass, nothing else
        data = torch.load(src, weights_only=True)
    rank, world = distributed.rank(), distributed.world()
    out = {}
    for agg in AGG_MODES:
        for split, (mine, micro_groups) in SPLITS.items():
            keep = [i for i in range(len(data["groups"])) if mine(i, rank, world)]
            extra = {k: [data[k][i] for i in keep] for k in ("direction", "behaviour", "tied") if k in data}
            out[agg, split] = apply_update(data["base"], [data["groups"][i] for i in keep],
                                           [data["advantages"][i] for i in keep], agg, data["pad_id"], micro_groups,
                                           **extra, strategy=strategy, keys=data.get("keys"),
                                           probe=data.get("probe", False), ref_base=data.get("ref"))
    if distributed.is_main():
        torch.save(out, dst)


COLLECTIVES = ("all_gather_single", "reduce_scatter_single", "all_gather_into_tensor", "reduce_scatter_tensor",
               "all_reduce", "all_gather", "broadcast", "all_gather_object", "barrier")


@contextlib.contextmanager
def count_collectives():
    """Counts the torch.distributed collectives this rank issues inside (FSDP2 looks them up on the `dist` module
    at call time, so patching its attributes sees them)."""
    import torch.distributed as dist

    counts = dict.fromkeys(COLLECTIVES, 0)
    saved = {name: getattr(dist, name) for name in COLLECTIVES}

    def counted(name, fn):
        def inner(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return inner

    for name, fn in saved.items():
        setattr(dist, name, counted(name, fn))
    try:
        yield counts
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


def run_rollout(dst: str) -> None:
    import copy

    from grpo_lab.model import sharding
    from grpo_lab.model.load import eos_ids
    from grpo_lab.rollout.generate import sample_groups

    model, tokenizer = load_policy("tiny", None, "cpu", "float32")
    whole = copy.deepcopy(model)
    model, _ = build_parallel("fsdp", torch.device("cpu"), None).prepare(model, None)
    rank = distributed.rank()
    # each rank its own rounds: prompt counts, lengths, an empty round on rank 0, a call split by max_rows on rank 1
    rounds = [(["12+34=", "7+5="], None), ([], None), (["1+2="], None)] if rank == 0 else \
        [(["305+117="], None), (["3+4=", "99+1=", "5+5="], 5)]

    def sample(m):
        gen = torch.Generator().manual_seed(7 + rank)
        return [sample_groups(m, tokenizer, prompts, 4, max_new_tokens=12, temperature=1.0, generator=gen,
                              end_ids=eos_ids(whole, tokenizer), max_rows=rows).completion_ids
                for prompts, rows in rounds if prompts]

    gathered_bytes = 0
    with sharding.gathered(model):
        gathered_bytes = sum(p.numel() * p.element_size() for p in model.parameters())  # plain tensors: whole
        with count_collectives() as counts:
            got = sample(model)
    want = sample(whole)
    shard_bytes = sum(sharding.local(p).numel() * p.element_size() for p in model.parameters())
    out = {"collectives": sum(counts.values()), "same": [torch.equal(a, b) for a, b in zip(got, want)],
           "lengths": [int((t != tokenizer.pad_token_id).sum()) for t in got], "gathered_bytes": gathered_bytes,
           "shard_bytes": shard_bytes, "whole_bytes": sum(p.numel() * p.element_size() for p in whole.parameters())}
    everyone = distributed.gather_objects(out)
    if distributed.is_main():
        torch.save(everyone, dst)


def run_stuck(timeout_s: float) -> None:
    distributed.all_reduce_(torch.ones(1))  # both ranks are up
    if distributed.rank() == 1:
        time.sleep(timeout_s * 20)  # alive but never joins: only the timeout can end rank 0's wait
        return
    distributed.all_reduce_(torch.ones(1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    mode = sys.argv[1]
    distributed.setup("gloo", float(sys.argv[2]) if mode == "stuck" else 120)
    if mode == "update":
        run_update(*sys.argv[2:5])
    elif mode == "rollout":
        run_rollout(sys.argv[2])
    else:
        run_stuck(float(sys.argv[2]))
    distributed.teardown()
