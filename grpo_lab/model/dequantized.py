"""A GGUF file dequantized once. transformers turns GGUF blocks into floats on every load (25-33 s for SmolLM2-135M,
in every job of a sweep); the first load here saves the float model and its tokenizer under the cache, keyed by the
GGUF file's sha256, and every load (the first included) reads that copy: safetensors and JSON only, no pickle.

The cache folder is grpo-lab's by its marker (`grpo-lab-dequantized.json`, written last, naming the digest): a folder
of that name without it is never read, replaced or deleted; the file then loads from its GGUF every time. Two jobs
may convert at once: each writes its own temporary folder and renames it into place; the loser's is removed."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from grpo_lab.model.chunked import cache_folder, sha256_of

log = logging.getLogger(__name__)
MARKER = "grpo-lab-dequantized.json"


def dequantized_folder(digest: str) -> Path:
    """Where the float copy of the GGUF file of sha256 `digest` lives."""
    return cache_folder(digest).parent.parent / "dequantized" / digest


def ours(folder: Path, digest: str) -> bool:
    """Whether `folder` is a whole float copy written here, of the GGUF file of sha256 `digest`."""
    try:
        return json.loads((folder / MARKER).read_text()).get("sha256") == digest
    except (OSError, ValueError, AttributeError):
        return False


def float_copy(gguf: Path, convert) -> Path | None:
    """The folder of `gguf`'s float copy, made with `convert(gguf) -> (model, tokenizer)` (fp32, dequantized) where
    the cache lacks it; None where a folder of that name is not ours (loaded from the GGUF instead, and said)."""
    digest = sha256_of(gguf)
    folder = dequantized_folder(digest)
    if ours(folder, digest):
        return folder
    if folder.exists():
        log.warning("%s is not a float copy grpo-lab wrote (no %s naming sha256 %s…): left as it is; %s is "
                    "dequantized on every load", folder, MARKER, digest[:12], gguf.name)
        return None
    log.info("dequantizing %s once into %s (later loads read that copy)", gguf.name, folder)
    model, tokenizer = convert(gguf)
    temporary = folder.parent / f".{digest}.{os.getpid()}.partial"
    try:
        model.save_pretrained(temporary, safe_serialization=True)
        tokenizer.save_pretrained(temporary)
        (temporary / MARKER).write_text(json.dumps({"sha256": digest, "gguf_file": gguf.name}) + "\n")
        try:
            temporary.rename(folder)
        except OSError:  # another job put its copy there first
            if not ours(folder, digest):
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return folder
