"""How a problem reaches an instruct model as its users run it: the tokenizer's chat template with the
generation prompt, and the tokens that end the assistant's turn."""

from __future__ import annotations

import dataclasses

from grpo_lab.tasks.base import Task

_PROBE = "\u2063"  # an invisible separator: marks where an assistant message's content ends in a rendered chat


def chat_prompt(tokenizer, text: str, system_prompt: str | None = None) -> str:
    """`text` as one user turn rendered by the tokenizer's chat template, ending in the assistant's
    generation prompt. Rollouts tokenize it with add_special_tokens=False, so a BOS the template writes
    is the only one (no doubled BOS)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"task.chat_template=true: the tokenizer {type(tokenizer).__name__} has no chat template")
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt is not None else [])
    messages.append({"role": "user", "content": text})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def render_task(task: Task, tokenizer, system_prompt: str | None = None) -> Task:
    """The task with every prompt rendered as a chat (prompt ids, answers and difficulties unchanged)."""

    def render(problems):
        return tuple(dataclasses.replace(p, prompt=chat_prompt(tokenizer, p.prompt, system_prompt)) for p in problems)

    return dataclasses.replace(task, train=render(task.train), held_out=render(task.held_out))


def end_of_turn_ids(tokenizer) -> list[int]:
    """The special token the chat template writes right after an assistant message (<|im_end|> in ChatML,
    <|eot_id|> in Llama 3, <end_of_turn> in Gemma): read off the template itself, because many
    tokenizers name another token as eos (Qwen2 base: <|endoftext|>). Empty when there is none."""
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "1"}, {"role": "assistant", "content": _PROBE}], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that refuses this conversation has no end-of-turn to read
        return []
    after = text[text.rfind(_PROBE) + len(_PROBE):] if _PROBE in text else ""
    ids = tokenizer(after, add_special_tokens=False)["input_ids"]
    return ids[:1] if ids and ids[0] in set(tokenizer.all_special_ids) else []
