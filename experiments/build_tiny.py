"""Rebuild the built-in model from its recipe (grpo_lab/model/tiny.py) and measure it beside the shipped one.

    python -m experiments.build_tiny --out /tmp/tiny [--threads 2] [--seed 1]

The weights ship in the package (grpo_lab/model/tiny_weights/), so no run ever builds them; this is how
they were made, and how to check that the recipe still makes a model of the same quality: held-out sampled
accuracy per level (temperature 1) of both models on the same prompts, with the same random numbers.
To ship a new build, build into grpo_lab/model/tiny_weights (after removing it) and rebuild the reports.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

from grpo_lab.config import RolloutConfig
from grpo_lab.model.load import eos_ids, load_policy
from grpo_lab.model.tiny import RECIPE_FILE, TinySpec, build_tiny, tiny_weights
from grpo_lab.rollout.evaluation import accuracy_by_difficulty, evaluate
from grpo_lab.tasks.arithmetic import LEVELS, held_out_problems

# The quality measurement: up to 256 held-out prompts a level (level 1 has 25, level 2 has 225) x 16 samples.
# The standard error of one level's accuracy is then at most sqrt(0.25 / 3600) = 0.008 (level 1: 0.02 at
# p = 0.9, less near 1), so TOLERANCE is over 4 standard errors of a difference from sampling alone.
PROMPTS_PER_LEVEL = 256
SAMPLES = 16
# two builds of the recipe agree within this, per level (measured: docs/GUIDE.md, "The built-in model")
TOLERANCE = 0.05


def held_out_accuracy(folder: str | Path, prompts_per_level: int = PROMPTS_PER_LEVEL, n: int = SAMPLES,
                      seed: int = 0) -> dict[str, float]:
    """Sampled accuracy per level (temperature 1) of the model in `folder` on held-out prompts."""
    model, tokenizer = load_policy("hf", str(folder), device="cpu", dtype="float32")
    problems = [p for level in LEVELS for p in held_out_problems(level, prompts_per_level, seed)]
    rows = evaluate(model, tokenizer, problems, n=n, temperature=1.0, max_new_tokens=RolloutConfig().max_new_tokens,
                    end_ids=eos_ids(model, tokenizer), answer_kind="integer", seed=seed, run_id="", step=0)
    return accuracy_by_difficulty(rows)


def record_accuracy(folder: Path, accuracy: dict[str, float]) -> None:
    """Write the measurement into the folder's recipe.json, with how it was measured."""
    path = folder / RECIPE_FILE
    record = json.loads(path.read_text())
    record["held_out_accuracy"] = {level: round(a, 4) for level, a in accuracy.items()}
    record["measured_with"] = {"prompts_per_level": PROMPTS_PER_LEVEL, "samples": SAMPLES, "temperature": 1.0,
                               "seed": 0}
    path.write_text(json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="a new folder for the built model")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default, every core)")
    parser.add_argument("--seed", type=int, default=TinySpec().warm_seed, help="the recipe's seed (shipped: 0)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = build_tiny(args.out, dataclasses.replace(TinySpec(), warm_seed=args.seed))
    built, shipped = held_out_accuracy(out), held_out_accuracy(tiny_weights())
    record_accuracy(out, built)
    print(f"built {out}; held-out sampled accuracy ({SAMPLES} samples x up to {PROMPTS_PER_LEVEL} prompts a level):")
    print("level  shipped  this build  difference")
    for level in built:
        diff = built[level] - shipped[level]
        print(f"{level:>5}  {shipped[level]:7.3f}  {built[level]:10.3f}  {diff:+10.3f}"
              f"{'' if abs(diff) <= TOLERANCE else f'  (over the tolerance {TOLERANCE})'}")


if __name__ == "__main__":
    main()
