"""What a run starts from: the task and the policy, prompts rendered as the model's users run it."""

from __future__ import annotations

from grpo_lab.model.load import amp, eos_ids, load_policy
from grpo_lab.rollout.evaluation import label_by_pass_rate
from grpo_lab.tasks import build_task
from grpo_lab.tasks.chat import end_of_turn_ids, render_task


def load_task_and_policy(cfg, policy: tuple | None = None):
    """What both training and evaluation start from: the task (difficulty relabelled by the base
    model's pass rate when task.difficulty=pass_rate), the policy, its tokenizer and end-token ids.
    policy: an already loaded (model, tokenizer) of cfg.model, to skip loading it again."""
    task = build_task(cfg.task)
    model, tokenizer = policy or load_policy(cfg.model.name, cfg.model.path, cfg.model.device, cfg.model.dtype,
                                             gguf_file=cfg.model.gguf_file,
                                             trust_remote_code=cfg.model.trust_remote_code)
    end_ids = eos_ids(model, tokenizer)
    shots = [*cfg.task.shots, *task.shots]
    if cfg.task.chat_template:  # as the model's users run it: chat-rendered prompts, turns end at end-of-turn
        task = render_task(task, tokenizer, cfg.task.system_prompt, shots)
        end_ids = sorted(set(end_ids) | set(end_of_turn_ids(tokenizer)))
    elif shots:  # a base model: the worked examples as plain text before each question
        task = render_task(task, tokenizer, shots=shots, chat=False)
    if cfg.task.difficulty == "pass_rate":
        with amp(cfg.model.dtype, next(model.parameters()).device):
            task = label_by_pass_rate(task, model, tokenizer, n=cfg.task.difficulty_samples,
                                      temperature=cfg.eval.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                                      end_ids=end_ids, seed=cfg.seed, max_rows=cfg.rollout.max_rows_per_call,
                                      stop=cfg.rollout.stop)
    return task, model, tokenizer, end_ids
