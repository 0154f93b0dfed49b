"""What a step cost, and the counters a run carries across checkpoints.

The steps table's cost columns: prompt tokens prefilled and tokens generated, the token positions the training
passes ran (`token_passes`), a FLOP estimate by the 6N rule (`flops`: Kaplan et al. 2020, Chinchilla's C = 6ND),
and the run's totals (`updates`: optimizer steps taken; `flops_total`), which checkpoints save with samples_total
and tokens_total. With N the policy's parameters (`flop_params`) and P the positions of the training rows (each
training row's completion tokens, and its prompt's tokens once per prompt a pass prefills):

    flops = 2N (prompt_tokens + gen_tokens)        sampling: 2N a position, each prompt prefilled once a group
          + 6N P passes  (2N P where no backward)   the policy's passes: the first is the first update's forward
          + 2N P         (algo.beta > 0)            the reference's one forward
    token_passes = P (passes + [beta > 0])

An estimate: attention's context-dependent FLOPs, gradient checkpointing's recomputed forward, evaluation, and a
sampler's own passes (SPO's trackers, pass-rate labels) are not counted, and LoRA's frozen weights are counted as
trained ones (6N where their weight gradients are never computed)."""

from __future__ import annotations

import math
from pathlib import Path

from grpo_lab.run.tables import read_table
from grpo_lab.train.objective import kl_on

# the run's totals, saved in every checkpoint (state.pt's counters, counters.json) and restored on resume
COUNTERS = {"samples_total": 0, "tokens_total": 0, "updates": 0, "flops_total": 0.0}


def flop_params(model) -> int:
    """N of the FLOP estimate: the policy's parameters, each counted once (tied weights once; under LoRA the base's
    and the adapters'), less the input embedding's (a lookup: it multiplies nothing) unless it is tied to the output
    layer, whose matrix product it then is."""
    n = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if embedding is not None and not (output is not None and output.weight is embedding.weight):
        n -= embedding.weight.numel()
    return int(n)


def step_costs(n: int, prompt_tokens: int, gen_tokens: int, work: dict, beta: float) -> dict:
    """The steps table's cost columns of one step. `work`: the update's training positions (`positions`), the
    policy passes it ran (`passes`) and whether they ran a backward (`backward`)."""
    positions, passes = work["positions"], work["passes"]
    reference = int(kl_on(beta) and positions > 0)  # the reference's one forward over the training rows
    policy = 6 if work["backward"] else 2  # a forward and its backward: 2N + 4N a position
    flops = 2.0 * n * (prompt_tokens + gen_tokens) + float(policy * n * positions * passes) \
        + 2.0 * n * positions * reference
    return dict(prompt_tokens=prompt_tokens, gen_tokens=gen_tokens, token_passes=positions * (passes + reference),
                flops=flops)


def row_updates(row: dict, mu: int) -> int:
    """The optimizer steps a steps-table row took: its opt_steps; in a part written before that column, mu where
    its grad_norm is finite (a step then took its mu updates or none, and only an update measured a norm)."""
    if row.get("opt_steps") is not None:
        return int(row["opt_steps"])
    norm = row.get("grad_norm")
    return mu if norm is not None and math.isfinite(norm) else 0


def restore_counters(saved: dict, run_dir: Path, step: int, mu: int) -> dict:
    """The run's counters at the checkpoint of `step` (`saved`: its state's). A checkpoint written before a counter
    existed: `updates` recounted from the steps table's rows up to `step`, `flops_total` NaN (not recountable:
    the tables do not hold what the passes ran)."""
    out = {k: saved[k] for k in COUNTERS if k in saved}
    if "updates" not in out:
        rows = read_table(run_dir, "steps").to_pylist()
        out["updates"] = sum(row_updates(r, mu) for r in rows if r["step"] <= step)
    out.setdefault("flops_total", float("nan"))
    return out
