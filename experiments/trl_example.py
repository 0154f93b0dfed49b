"""A real TRL GRPOTrainer run on CPU that logs every completion, for `python -m analysis.ingest trl`.

    pip install -e '.[bench]'      # TRL
    python -m experiments.trl_example --out runs/trl [--steps 12] [--seed 0] [--format-weight 0]
    python -m analysis.ingest trl runs/trl --out runs/trl-run --difficulty-from level
    python -m analysis runs/trl-run

What a TRL user's own script needs for the ingest is one option: `GRPOConfig(log_completions=True,
logging_steps=1)`. TRL then writes `<output_dir>/completions/completions_<step>.parquet` at every logging
step: the prompt, the completion, one column per reward function, the advantage and whatever the reward
functions log with `log_extra`. Here they also log each prompt's `level` (its difficulty) and each completion's
generated token count (`completion_tokens`: exact, where re-encoding the text would only approximate it).
`logging_steps=1`: TRL keeps only the last generation batch at each logging step, so a longer interval loses
the batches in between. No evaluation: TRL logs evaluation completions under the same file name as the step's
training ones, replacing them.

The run: the built-in tiny model (grpo_lab's 0.65M-parameter arithmetic model), the arithmetic task's training
pool, 8 prompts a step with 8 completions each, at most 6 new tokens, temperature 1, beta 0.04. The reward is
grpo_lab's rule (exact integer match, `accuracy`); `--format-weight W > 0` adds a second reward function,
`finished` (W when the completion ended by itself), so the logged rewards are a sum of two and no longer
binary. `--plain` logs nothing beside the rewards (no `level`, no `completion_tokens`): what a TRL user's own
script writes with `log_completions=True` alone, which the ingest reads with no flags, its token counts absent.
`trainer_state.json` (TRL's per-step metrics, `frac_reward_zero_std` among them) is saved at the end.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

from grpo_lab.config import TaskConfig
from grpo_lab.model.tiny import tiny_weights
from grpo_lab.model.tokenizer import CharTokenizer
from grpo_lab.rewards.rules import RewardWeights, score
from grpo_lab.tasks import build_task

PROMPTS_PER_STEP = 8
GROUP_SIZE = 8
MAX_NEW_TOKENS = 6


class Accuracy:
    """1 for the right integer, 0 otherwise (grpo_lab's rule); logs each prompt's level and each completion's
    generated token count beside the rewards."""

    __name__ = "accuracy"  # TRL names a reward function's column by its __name__

    def __init__(self, kind: str, extras: bool = True):
        self.kind, self.extras = kind, extras

    def __call__(self, prompts, completions, completion_ids, answer, level, log_extra=None, **kw) -> list[float]:
        if log_extra is not None and self.extras:
            log_extra("level", [str(v) for v in level])
            log_extra("completion_tokens", [len(ids) for ids in completion_ids])
        return [score(c, True, a, self.kind, RewardWeights()).reward for c, a in zip(completions, answer)]


class Finished:
    """`weight` when the completion ended with the end token before the length limit."""

    __name__ = "finished"

    def __init__(self, weight: float, eos_id: int):
        self.weight, self.eos_id = weight, eos_id

    def __call__(self, prompts, completions, completion_ids, **kw) -> list[float]:
        return [self.weight * (len(ids) < MAX_NEW_TOKENS or (len(ids) > 0 and ids[-1] == self.eos_id))
                for ids in completion_ids]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="TRL's output_dir (created; refused if it holds anything)")
    p.add_argument("--steps", type=int, default=12, help="optimizer steps (default 12)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format-weight", type=float, default=0.0,
                   help="> 0: a second reward function, `finished`, worth this much (default 0: one function)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--plain", action="store_true", help="log nothing beside the rewards (no level, no token counts): "
                   "a TRL user's own script with log_completions=True alone")
    args = p.parse_args(argv)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        p.error(f"--out {out}: exists and is not an empty folder (this script writes only a new one)")
    if args.steps < 1:
        p.error(f"--steps {args.steps}: must be >= 1")
    try:
        from datasets import Dataset
        from transformers import AutoModelForCausalLM
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as e:
        raise SystemExit(f"TRL is not installed ({e.name}): pip install -e '.[bench]'") from None
    torch.set_num_threads(args.threads)
    # TRL 1.16 asks transformers 5 a deprecated question at every step; the answer is right, the warning noise
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)

    folder = tiny_weights()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                 trust_remote_code=False)
    tokenizer = CharTokenizer.from_pretrained(folder)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    task = build_task(TaskConfig())
    data = Dataset.from_list([{"prompt": q.prompt, "answer": q.answer, "level": q.difficulty} for q in task.train])
    rewards = [Accuracy(task.answer_kind, extras=not args.plain)]
    if args.format_weight > 0:
        rewards.append(Finished(args.format_weight, tokenizer.eos_token_id))
    config = GRPOConfig(
        output_dir=str(out), seed=args.seed, max_steps=args.steps,
        per_device_train_batch_size=PROMPTS_PER_STEP * GROUP_SIZE, num_generations=GROUP_SIZE,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1,
        max_completion_length=MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, top_k=0, beta=0.04,
        learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        gradient_checkpointing=False, activation_checkpointing=False, use_cpu=True, bf16=False, fp16=False,
        report_to="none", save_strategy="no", eval_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        log_completions=True, logging_steps=1,  # what the ingest needs: every step's completions on disk
        num_completions_to_print=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=rewards, args=config, train_dataset=data,
                          processing_class=tokenizer)
    trainer.train()
    trainer.save_state()  # trainer_state.json: TRL's own per-step metrics, read by the ingest as a cross-check
    trainer.create_model_card()  # README.md, whose framework versions name TRL's (the ingest's provenance)
    print(f"TRL run written to {out} ({args.steps} steps; completions in {out / 'completions'})")


if __name__ == "__main__":
    main()
