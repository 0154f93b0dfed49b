"""Prompts and completions as text: a tool logs either plain strings or chat messages ({role, content} each)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from analysis.ingest.logs import IngestError


def as_text(value: object, where: str, content_only: bool = False) -> str:
    """`value` as one string: a string as it is; chat messages as JSON of their roles and contents (a prompt: its
    identity), or `content_only`, their contents joined by newlines (a completion: what the model wrote)."""
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(isinstance(m, Mapping) for m in value):
        messages = [{"role": str(m.get("role", "")), "content": _content(m.get("content"))} for m in value]
        if content_only:
            return "\n".join(m["content"] for m in messages)
        return json.dumps(messages, ensure_ascii=False)
    raise IngestError(f"{where}: {type(value).__name__} {str(value)[:40]!r} is neither text nor chat messages")


def _content(content: object) -> str:
    """A message's content: text, or content blocks ({type: text, text}) whose text parts are joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, np.ndarray):
        content = content.tolist()
    if isinstance(content, (list, tuple)):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, Mapping))
    return "" if content is None else str(content)
