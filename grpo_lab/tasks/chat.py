"""How a problem reaches a model as its users run it: an instruct model through the tokenizer's chat template with
the generation prompt (and the tokens that end the assistant's turn); a base model as plain text, worked examples
before the question (a few-shot prompt)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from grpo_lab.records import Task

_PROBE = "\u2063"  # an invisible separator: marks where an assistant message's content ends in a rendered chat


def chat_prompt(tokenizer, text: str, system_prompt: str | None = None, shots: Sequence[Sequence[str]] = ()) -> str:
    """`text` as one user turn rendered by the tokenizer's chat template, ending in the assistant's
    generation prompt; `shots`, (user, assistant) pairs, are earlier turns of the same chat (a few-shot
    prompt). Rollouts tokenize it with add_special_tokens=False, so a BOS the template writes is the only
    one (no doubled BOS)."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"task.chat_template=true: the tokenizer {type(tokenizer).__name__} has no chat template")
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt is not None else [])
    for user, assistant in shots:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": text})
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def plain_prompt(text: str, shots: Sequence[Sequence[str]] = ()) -> str:
    """`text` after `shots` as plain text, for a base model: each worked example its question, a line break, its
    answer and a blank line, then the question and a line break, so the reply takes the examples' place (a base
    model's few-shot prompt; model=gemma3 stops its reply at the blank line). No shots: `text` unchanged."""
    if not shots:
        return text
    return "".join(f"{user}\n{assistant}\n\n" for user, assistant in shots) + f"{text}\n"


def render_task(task: Task, tokenizer, system_prompt: str | None = None, shots: Sequence[Sequence[str]] = (),
                chat: bool = True) -> Task:
    """The task with every prompt rendered as a chat (`chat`), else as plain text after the shots (prompt ids,
    answers and difficulties unchanged). A problem whose question is one of the `shots` leaves both pools: its
    answer is in the prompt."""
    shown = {user for user, _ in shots}

    def render(problems):
        return tuple(dataclasses.replace(p, prompt=chat_prompt(tokenizer, p.prompt, system_prompt, shots) if chat
                                         else plain_prompt(p.prompt, shots))
                     for p in problems if p.prompt not in shown)

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
