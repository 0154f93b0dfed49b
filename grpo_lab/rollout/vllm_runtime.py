"""What a running vLLM engine does around its draws, apart from the draws: the trainer's global random streams
kept across the engine's own seeding, vLLM's expected warnings quieted, and sleep mode's calls on a GPU in one
place (recorded, so their order is tested on a CPU: `DrySleep`)."""

from __future__ import annotations

import collections
import contextlib
import logging
from typing import ClassVar


@contextlib.contextmanager
def _global_random_states_kept():
    """Python's, numpy's and torch's global generator states (CUDA's too, where it is in use) as they were before,
    whatever the block seeds them with."""
    import random

    import numpy as np
    import torch

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


class _Explained(logging.Filter):
    """vLLM's warnings that are expected here and said in this module's docstring: it warns that a tied output
    layer and the rotary tables got no weights in a reload (they have none in a checkpoint: the tied layer is
    re-processed after every push, `_reprocess_shared`), and that it has no tokenizer for a chat-template warm-up
    or an end token (it is given token ids and end ids: grpo-lab tokenizes). Every other record passes."""

    EXPECTED = ("ParallelLMHead: Failed to load weights", "RotaryEmbedding: Failed to load weights",
                "Chat template warmup failed", "Using None for EOS token id because tokenizer is not initialized")

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.EXPECTED)


def _quiet_expected_warnings() -> None:
    for name in ("vllm.model_executor.model_loader.reload.layerwise", "vllm.renderers.base"):
        found = logging.getLogger(name)
        if not any(isinstance(f, _Explained) for f in found.filters):
            found.addFilter(_Explained())


class SleepMode:
    """Sleep mode's calls on a GPU, in one place, each recorded in `calls` (the engine records its pushes and draws
    beside them): empty PyTorch's cache, wake one kind of the engine's memory, put it to sleep (level 2). `DrySleep`
    records the same calls without making them, so the order is tested on a CPU (benchmarks/gpu_check.py --dry)."""

    dry: ClassVar[bool] = False

    def __init__(self, llm, calls: collections.deque):
        self.llm, self.calls = llm, calls

    def empty_cache(self) -> None:
        self.calls.append("empty_cache")
        if not self.dry:
            import torch

            torch.cuda.empty_cache()

    def wake(self, tag: str) -> None:
        self.calls.append(f"wake {tag}")
        if not self.dry:
            self.llm.wake_up(tags=[tag])

    def sleep(self) -> None:
        self.calls.append("sleep")
        if not self.dry:
            self.llm.sleep(level=2)


class DrySleep(SleepMode):
    """SleepMode's calls recorded, not made: an engine on a CPU (where vLLM has no sleep mode) takes the GPU's path
    through them."""

    dry = True
